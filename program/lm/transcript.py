"""LM transcripts: record every request and reply of a run, and replay them without the model.

A figure measured on a real model is only worth publishing if it can be re-scored: the recording
engine wraps any DSPy 3.4 engine and appends one JSON line per call (the request's key, its
messages, the reply text, tokens and seconds); the replay engine answers the same requests from
that file, so the whole pipeline, gatekeeper and metrics run again exactly as they did. Under
greedy decoding a request already made in the run is answered from its transcript, not the model,
and with a reply cache (program/lm/reply_cache.py) one answered in an earlier run is answered from it.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import dspy
from dspy.clients.errors import wrap_error
from dspy.lm15 import Message, Response, TextPart, Usage
from dspy.utils.exceptions import LMTransportError, is_retryable_lm_error

from program.lm.adapter import field_value
from program.lm.engine import lm_identity
from program.lm.reply_cache import ReplyCache
from program.lm.wire import text_of


class TranscriptMissing(LookupError):
    """The replayed run asked for something the recorded run never did."""


class RecordedFailure(RuntimeError):
    """The call failed when the run was recorded (the entry's `error`): a replay fails it again, as
    the engine did then, so the program takes the same path."""


class RecordedTransientFailure(LMTransportError):
    """A recorded failure DSPy took for transient and asked again (a timeout, a server error): a
    replay fails it as one, so DSPy asks again and gets the reply recorded next."""


def request_key(request) -> str:
    """What identifies a request: its system text, messages and response schema."""
    payload = {
        "system": text_of(request.system),
        "messages": [[m.role, m.text or ""] for m in request.messages],
        "response_format": request.config.response_format,
    }
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str).encode()).hexdigest()


def repeat_key(request) -> str:
    """What makes a request an exact repeat: its request_key and every generation setting (a reply
    cut at 300 tokens does not answer the same prompt at 900)."""
    settings = repr((request.config, request.tools))
    return hashlib.sha256(f"{request_key(request)}\n{settings}".encode()).hexdigest()


def deterministic(request) -> bool:
    """Greedy decoding: the same request always gets the same reply, so a repeat need not reach the
    model. At a temperature above 0 a repeat is a fresh sample (optimizers sample on purpose, e.g.
    bootstrapping at temperature 1.0 through a copy of this LM), and without a temperature the
    provider's default applies, which for most is sampling: neither is served from the transcript."""
    return request.config.temperature == 0


class RecordingEngine:
    """Wraps an engine; every call is appended to `path` as it completes.

    Under greedy decoding an exact repeat of a request made earlier in this run is answered with
    the recorded reply instead of the model, and recorded again, marked `"repeat": true` with 0
    seconds and tokens, so that a replay sends and answers the same sequence. With a `cache`, the
    first asking of a request in this run is answered from the replies of earlier runs where the
    cache keeps one, recorded marked `"cached": true` the same way, and every reply the model gives
    is kept in it. `calls` counts the replies the model gave, `repeats` those served from the run's
    own transcript and `cached` those served from the cache. A call the engine raised on (a prompt
    longer than the model's context, a timeout) is recorded too, with its `error` and no reply, and
    counted in `failed`; it is neither kept nor served again, so the next asking reaches the engine.
    """

    def __init__(self, inner, path: str | Path, *, serve_repeats: bool = True, cache: ReplyCache | None = None):
        self.inner = inner
        self.path = Path(path)
        self.serve_repeats = serve_repeats
        self.cache = cache
        self.supported_params = getattr(inner, "supported_params", frozenset())
        self.narrows = getattr(inner, "narrows", False)
        self.calls = 0
        self.repeats = 0
        self.cached = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._replies: dict[str, Response] = {}
        # One lock per repeat key: a request waits for an identical one in flight and is then served
        # its reply, while different requests go on concurrently.
        self._key_locks: dict[str, threading.Lock] = {}

    @property
    def supports_response_schema(self) -> bool:
        # Read when a call is planned: a server engine finds what it takes on first use.
        return bool(getattr(self.inner, "supports_response_schema", False))

    def complete(self, request) -> Response:
        if not (self.serve_repeats and deterministic(request)):
            return self._call(request)
        key = repeat_key(request)
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            known = self._replies.get(key)
            if known is None:
                kept = self.cache.get(key) if self.cache else None
                if kept is not None:
                    self._replies[key] = kept
                    return self._serve(request, kept, "cached")
                self._replies[key] = response = self._call(request)
                if self.cache:
                    self.cache.put(key, response)
                return response
        return self._serve(request, known, "repeat")

    def _serve(self, request, known: Response, mark: str) -> Response:
        served = Response(id=None, model=known.model, message=known.message, finish_reason=known.finish_reason,
                          usage=Usage(input_tokens=0, output_tokens=0))
        self._write(request, served, seconds=0.0, mark=mark)
        return served

    def _call(self, request) -> Response:
        started = time.perf_counter()
        try:
            response = self.inner.complete(request)
        except Exception as exc:
            # As DSPy's boundary will see it: a transient failure is asked again, each asking recorded.
            transient = is_retryable_lm_error(wrap_error(exc, model=str(request.model)))
            self._write(request, None, seconds=round(time.perf_counter() - started, 3),
                        error=f"{type(exc).__name__}: {exc}", transient=transient)
            raise
        self._write(request, response, seconds=round(time.perf_counter() - started, 3))
        return response

    def _write(self, request, response: Response | None, *, seconds: float, mark: str | None = None,
               error: str | None = None, transient: bool = False) -> None:
        """`mark`: "repeat" or "cached" for a reply that did not come from the model, which the entry
        says; `error`: what the engine raised instead of replying (`response` None), `transient`
        when DSPy asks such a call again."""
        entry = {
            "key": request_key(request),
            "system": text_of(request.system),
            "messages": [{"role": m.role, "text": m.text or ""} for m in request.messages],
            "reply": (response.message.text or "") if response and response.message else "",
            "finish_reason": response.finish_reason if response else None,
            "prompt_tokens": response.usage.input_tokens if response and response.usage else None,
            "completion_tokens": response.usage.output_tokens if response and response.usage else None,
            "seconds": seconds,
            **({mark: True} if mark else {}),
            **({"error": error} if error else {}),
            **({"transient": True} if transient else {}),
        }
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry, ensure_ascii=False) + "\n")
            if mark == "repeat":
                self.repeats += 1
            elif mark == "cached":
                self.cached += 1
            elif error:
                self.failed += 1
            else:
                self.calls += 1

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close:
            close()


def inputs_key(messages: list[tuple[str, str]], names: tuple[str, ...]) -> str | None:
    """What identifies a request by the values of its input fields `names` in its last user
    message, whatever its instructions and demos; None when one of them is not there."""
    last = next((text for role, text in reversed(messages) if role == "user"), "")
    values = [field_value(last, name) for name in names]
    return json.dumps(values, ensure_ascii=False) if all(values) else None


class ReplayEngine:
    """Answers each request with the reply recorded for the same request, in recorded order, and
    fails it again (RecordedFailure) where the recorded call failed.
    `calls`, `repeats`, `cached` and `failed` count the replayed entries as the recording engine counted them.
    `narrows` and `supports_response_schema` say what the recorded LM's engine said, so that the
    program sends the requests it sent then (the embedded model narrows by its model string).

    `by_inputs`: a request is the same when these input fields have the same values, whatever else
    its prompt says: the recorded replies are read again by a program whose instructions or demos
    have changed since, each reply for the inputs it was written for."""

    supported_params = frozenset({"max_tokens", "temperature", "top_p", "top_k", "stop", "seed", "response_format"})

    def __init__(self, path: str | Path, *, narrows: bool = False, supports_response_schema: bool = True,
                 by_inputs: tuple[str, ...] = ()):
        self.narrows = narrows
        self.supports_response_schema = supports_response_schema
        self.by_inputs = by_inputs
        self.replies: dict[str | None, list[dict]] = {}
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                key = (inputs_key([(m["role"], m["text"]) for m in entry["messages"]], by_inputs) if by_inputs
                       else entry["key"])
                self.replies.setdefault(key, []).append(entry)
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number} is not a transcript entry: {exc}") from None
        self.calls = 0
        self.repeats = 0
        self.cached = 0
        self.failed = 0
        # Requests the recorded run never made: a replay whose verdict moves with these moved because
        # the program now asks something else, not because the same replies read differently.
        self.missing = 0
        self._lock = threading.Lock()

    @property
    def unused(self) -> int:
        """Recorded replies no request has asked for (yet)."""
        return sum(len(queue) for queue in self.replies.values())

    def complete(self, request) -> Response:
        key = (inputs_key([(m.role, m.text or "") for m in request.messages], self.by_inputs) if self.by_inputs
               else request_key(request))
        with self._lock:
            queue = self.replies.get(key) if key is not None else None
            if not queue:
                self.missing += 1
                asked = (f"request {key[:12]}" if not self.by_inputs else f"these values of {', '.join(self.by_inputs)}"
                         if key else f"a request without {', '.join(self.by_inputs)}")
                raise TranscriptMissing(f"no recorded reply for {asked} (the program or its inputs changed)")
            entry = queue.pop(0)
            if entry.get("repeat"):
                self.repeats += 1
            elif entry.get("cached"):
                self.cached += 1
            elif entry.get("error"):
                self.failed += 1
                if entry.get("transient"):
                    # No wait: the recorded run waited already.
                    raise RecordedTransientFailure(f"as recorded: {entry['error']}", retry_after=0)
                raise RecordedFailure(f"as recorded: {entry['error']}")
            else:
                self.calls += 1
        return Response(
            id=None, model="replay",
            message=Message.assistant([TextPart(entry["reply"])]),
            finish_reason=entry.get("finish_reason") or "stop",
            usage=Usage(input_tokens=entry.get("prompt_tokens"), output_tokens=entry.get("completion_tokens")),
        )

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass


def recording_lm(base: dspy.LM, path: str | Path, *, serve_repeats: bool = True,
                 cache: str | Path | None = None) -> dspy.LM:
    """The same model, with every request and reply appended to `path`, and DSPy's cache off so
    that every call reaches the transcript; under greedy decoding an exact repeat is answered from
    the run's own transcript (serve_repeats=False sends every call to the model), and with a `cache`
    folder a request answered in an earlier run from the reply kept there for this model. Its
    engine's `calls`, `repeats` and `cached` count the model's replies, the repeats served and the
    kept replies served; its `cache`'s `problems` say which kept replies could not be used."""
    engine = getattr(base, "engine", None)
    if engine is None:
        raise ValueError(f"{base.model}: this LM has no engine to record through")
    kept = ReplyCache(cache, model_identity(base)) if cache is not None else None
    return dspy.LM(base.model, engine=RecordingEngine(engine, path, serve_repeats=serve_repeats, cache=kept),
                   cache=False, **base.kwargs)


def model_identity(lm: dspy.LM) -> str:
    """What a kept reply is the model's for: for an embedded model its weights' sha256, the llama.cpp
    build, this CPU's flags and the context size, each of which can change a greedy reply (machines
    differ: another CPU takes other kernels); for any other LM its model string."""
    sha256 = lm_identity(lm).get("sha256")
    if not sha256:
        return str(lm.model)
    from program.lm import native

    return json.dumps({"sha256": sha256, "library": native.library_digest(), "cpu": native.cpu_signature(),
                       "n_ctx": getattr(getattr(lm, "engine", None), "n_ctx", None)}, sort_keys=True)


def replaying_lm(base: dspy.LM, path: str | Path, *, narrows: bool = False,
                 supports_response_schema: bool = True, by_inputs: tuple[str, ...] = ()) -> dspy.LM:
    """The same model string, so the program sends exactly the requests it recorded (prompt format
    and constraints follow the model and what its engine said); only the engine answers, from the
    transcript (`by_inputs`: see ReplayEngine)."""
    engine = ReplayEngine(path, narrows=narrows, supports_response_schema=supports_response_schema,
                          by_inputs=by_inputs)
    # Only the generation settings: a provider LM's client settings (num_retries, api_base) are refused
    # with an engine of one's own.
    settings = {key: base.kwargs[key] for key in ("temperature", "max_tokens") if key in base.kwargs}
    return dspy.LM(base.model, engine=engine, cache=False, **settings)

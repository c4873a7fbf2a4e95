"""LM transcripts: record every request and reply of a run, and replay them without the model.

A figure measured on a real model is only worth publishing if it can be re-scored: the recording
engine wraps any DSPy 3.4 engine and appends one JSON line per call (the request's key, its
messages, the reply text, tokens and seconds); the replay engine answers the same requests from
that file, so the whole pipeline, gatekeeper and metrics run again exactly as they did.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import dspy
from dspy.lm15 import Message, Response, TextPart, Usage

from program.lm.engine import text_of


class TranscriptMissing(LookupError):
    """The replayed run asked for something the recorded run never did."""


def request_key(request) -> str:
    """What identifies a request: its system text, messages and response schema."""
    payload = {
        "system": text_of(request.system),
        "messages": [[m.role, m.text or ""] for m in request.messages],
        "response_format": request.config.response_format,
    }
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str).encode()).hexdigest()


class RecordingEngine:
    """Wraps an engine; every call is appended to `path` as it completes."""

    def __init__(self, inner, path: str | Path):
        self.inner = inner
        self.path = Path(path)
        self.supports_response_schema = getattr(inner, "supports_response_schema", False)
        self.supported_params = getattr(inner, "supported_params", frozenset())
        self._lock = threading.Lock()

    def complete(self, request) -> Response:
        started = time.perf_counter()
        response = self.inner.complete(request)
        entry = {
            "key": request_key(request),
            "system": text_of(request.system),
            "messages": [{"role": m.role, "text": m.text or ""} for m in request.messages],
            "reply": (response.message.text or "") if response.message else "",
            "finish_reason": response.finish_reason,
            "prompt_tokens": response.usage.input_tokens if response.usage else None,
            "completion_tokens": response.usage.output_tokens if response.usage else None,
            "seconds": round(time.perf_counter() - started, 3),
        }
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry, ensure_ascii=False) + "\n")
        return response

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close:
            close()


class ReplayEngine:
    """Answers each request with the reply recorded for the same request, in recorded order."""

    supports_response_schema = True
    supported_params = frozenset({"max_tokens", "temperature", "top_p", "top_k", "stop", "seed", "response_format"})

    def __init__(self, path: str | Path):
        self.replies: dict[str, list[dict]] = {}
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                self.replies.setdefault(entry["key"], []).append(entry)
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number} is not a transcript entry: {exc}") from None
        self._lock = threading.Lock()

    def complete(self, request) -> Response:
        key = request_key(request)
        with self._lock:
            queue = self.replies.get(key)
            if not queue:
                raise TranscriptMissing(f"no recorded reply for request {key[:12]} (the program or its inputs changed)")
            entry = queue.pop(0)
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


def recording_lm(base: dspy.LM, path: str | Path) -> dspy.LM:
    """The same model, with every request and reply appended to `path`, and DSPy's cache off so
    that every call reaches the model and the transcript."""
    engine = getattr(base, "engine", None)
    if engine is None:
        raise ValueError(f"{base.model}: this LM has no engine to record through")
    return dspy.LM(base.model, engine=RecordingEngine(engine, path), cache=False, **base.kwargs)


def replaying_lm(base: dspy.LM, path: str | Path) -> dspy.LM:
    """The same model string, so the program sends exactly the requests it recorded (prompt format
    and constraints follow the model); only the engine answers, from the transcript."""
    return dspy.LM(base.model, engine=ReplayEngine(path), cache=False, **base.kwargs)

"""Replies kept across runs: under greedy decoding the same model answers the same request the same
way, so a reply the model gave in an earlier run can answer it again without the model.

Each reply is one JSON file in the cache folder, named by the hash of the model's identity and the
request's repeat key (the request and every generation setting). A file is written under another
name and renamed into place, so a run killed mid-write leaves no entry under a served name; each
entry also carries the digest of its contents, so a damaged one is found, ignored and said, never
served.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from dspy.lm15 import Message, Response, TextPart, Usage


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


class ReplyCache:
    """The replies one model gave, in `directory` (shared by every model: the key holds the model).

    `model` is the model's identity (`program.lm.transcript.model_identity`): for an embedded model
    its weights, llama.cpp build, CPU and context size, else its model string.
    `problems` says, for each entry that could not be read or written, which and why; `ignored`
    counts the entries found but not served."""

    def __init__(self, directory: str | Path, model: str):
        self.directory = Path(directory)
        self.model = model
        self.ignored = 0
        self.problems: list[str] = []

    def _path(self, repeat_key: str) -> Path:
        return self.directory / (hashlib.sha256(f"{self.model}\n{repeat_key}".encode()).hexdigest() + ".json")

    def get(self, repeat_key: str) -> Response | None:
        """The reply kept for this request, or None: none kept, or one that cannot be trusted."""
        path = self._path(repeat_key)
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            body = {k: entry[k] for k in ("model", "repeat_key", "reply", "finish_reason", "response_model")}
            if entry["digest"] != _digest(body):
                raise ValueError("its digest does not match its contents")
            if (body["model"], body["repeat_key"]) != (self.model, repeat_key):
                raise ValueError("it was written for another model or request")
            if not all(isinstance(body[k], str) for k in ("reply", "finish_reason")):
                raise ValueError("its reply is not text")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            self.ignored += 1
            self.problems.append(f"ignored {path}: {exc}")
            return None
        return Response(id=None, model=body["response_model"], message=Message.assistant([TextPart(body["reply"])]),
                        finish_reason=body["finish_reason"], usage=Usage(input_tokens=0, output_tokens=0))

    def put(self, repeat_key: str, response: Response) -> None:
        """Keep the model's reply. A reply that cannot be written is said, and the run goes on."""
        body = {"model": self.model, "repeat_key": repeat_key,
                "reply": (response.message.text or "") if response.message else "",
                "finish_reason": response.finish_reason or "stop", "response_model": response.model}
        path = self._path(repeat_key)
        written = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=self.directory, prefix=".", suffix=".part",
                                             delete=False) as out:
                written = Path(out.name)
                json.dump({**body, "digest": _digest(body)}, out, ensure_ascii=False)
                out.flush()
                os.fsync(out.fileno())
            os.replace(written, path)
        except OSError as exc:
            self.problems.append(f"not kept {path}: {exc}")
        finally:
            if written is not None and written.exists():
                written.unlink()

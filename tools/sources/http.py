"""One GET to a server the program reads (Prometheus, Alertmanager), whole within a deadline and a size.

httpx bounds each connect and read by its timeout, not the whole answer: a server that sends a few
bytes a second is never given up on. So the request runs in a thread of its own and is waited for
until the deadline; the thread stops at its next read. An answer over `max_bytes` is refused.
Every failure is a SourceError whose message names the server (`who`) and the path.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from tools.sources.errors import SourceError
from tools.sources.limits import MAX_NAME_CHARS, clip, size_text


def timed_out(who: str, path: str, timeout: float) -> str:
    return f"{who} timed out on {path}: the call had no whole answer within {timeout:g} s"


def whole_answer(client: httpx.Client, who: str, path: str, params: dict[str, Any], *, deadline: float,
                 timeout: float, max_bytes: int) -> tuple[int, bytes]:
    """The status and body of one GET, all of it before `deadline` (time.monotonic()); `timeout` is
    what a message says the limit was."""
    if deadline <= time.monotonic():
        raise SourceError(timed_out(who, path, timeout))
    answers: queue.SimpleQueue = queue.SimpleQueue()

    def fetch() -> None:
        try:
            answers.put(_read(client, who, path, params, deadline, timeout, max_bytes))
        except Exception as exc:  # raised again in the caller's thread below
            answers.put(exc)

    threading.Thread(target=fetch, name=f"{who} {path}", daemon=True).start()
    try:
        outcome = answers.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        raise SourceError(timed_out(who, path, timeout)) from None
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def _read(client: httpx.Client, who: str, path: str, params: dict[str, Any], deadline: float, timeout: float,
          max_bytes: int) -> tuple[int, bytes]:
    try:
        with client.stream("GET", path, params=params) as response:
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise SourceError(f"{who} answered {path} with more than {size_text(max_bytes)}, "
                                      "the most an answer may be")
                if time.monotonic() > deadline:
                    raise SourceError(timed_out(who, path, timeout))
            return response.status_code, bytes(body)
    except httpx.TimeoutException:
        raise SourceError(timed_out(who, path, timeout)) from None
    except httpx.HTTPError as exc:
        raise SourceError(f"{who} could not be reached on {path}: "
                          f"{type(exc).__name__}: {clip(str(exc), MAX_NAME_CHARS)}") from None


def first_problem(errors: Sequence[Mapping[str, Any]], root: str) -> str:
    """The first thing pydantic found wrong, where it was: `data.groups[0].rules: Input should be a valid list`.
    `errors` as a ValidationError (or FastAPI's RequestValidationError) lists them."""
    # A key or a tag in the answer can be as long as the answer: each part is cut to a name's length.
    where = (root + "".join(f"[{part}]" if isinstance(part, int) else f".{clip(str(part), MAX_NAME_CHARS)}"
                            for part in errors[0]["loc"])).lstrip(".")
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"{where}: {clip(errors[0]['msg'], MAX_NAME_CHARS)}{more}"

"""Usage accounting of the LM stages: LM calls (cache hits included), tokens (prompt tokens whose
state came from a saved prefix among them) and seconds, each under the usage key its stage carries
in the record; and the notes an engine leaves for the record of the run it serves."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar

import dspy
from dspy.utils.callback import BaseCallback

from contracts import Finding
from contracts.record import StageUsage

_current_stage: ContextVar[StageUsage | None] = ContextVar("diagnosis_stage", default=None)
_current_notes: ContextVar[list[Finding] | None] = ContextVar("diagnosis_notes", default=None)
log = logging.getLogger(__name__)


class _CallCounter(BaseCallback):
    """Counts LM calls for whichever stage is running in this context."""

    def on_lm_start(self, call_id, instance, inputs):
        usage = _current_stage.get()
        if usage is not None:
            usage.lm_calls += 1


CALL_COUNTER = _CallCounter()


def counting_calls():
    """The context a run's stages count their LM calls in; the counter is added once however deep."""
    if CALL_COUNTER in dspy.settings.callbacks:
        return nullcontext()
    return dspy.context(callbacks=[*dspy.settings.callbacks, CALL_COUNTER])


def note(rule: str, message: str) -> None:
    """A note for the record of the run whose stage is calling, and the log."""
    log.warning("%s: %s", rule, message)
    notes = _current_notes.get()
    if notes is not None:
        notes.append(Finding(rule=rule, message=message))


@contextmanager
def counted(usage: dict[str, StageUsage], key: str, notes: list[Finding] | None = None) -> Iterator[None]:
    """Adds what runs inside to `usage[key]`, whether it ends or raises; an engine's notes go to `notes`."""
    entry = usage.setdefault(key, StageUsage())
    tokens = _current_stage.set(entry), _current_notes.set(notes)
    started = time.perf_counter()
    try:
        with dspy.track_usage() as tracker:
            yield
    finally:
        for totals in tracker.get_total_tokens().values():
            entry.prompt_tokens += int(totals.get("prompt_tokens") or 0)
            entry.completion_tokens += int(totals.get("completion_tokens") or 0)
            entry.cached_prompt_tokens += int((totals.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        entry.seconds = round(entry.seconds + time.perf_counter() - started, 3)
        _current_stage.reset(tokens[0])
        _current_notes.reset(tokens[1])

"""Usage accounting of the LM stages: LM calls (cache hits included), tokens and seconds, each
under the usage key its stage carries in the record."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar

import dspy
from dspy.utils.callback import BaseCallback

from contracts import StageUsage

_current_stage: ContextVar[StageUsage | None] = ContextVar("diagnosis_stage", default=None)


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


@contextmanager
def counted(usage: dict[str, StageUsage], key: str) -> Iterator[None]:
    """Adds what runs inside to `usage[key]`, whether it ends or raises."""
    entry = usage.setdefault(key, StageUsage())
    token = _current_stage.set(entry)
    started = time.perf_counter()
    try:
        with dspy.track_usage() as tracker:
            yield
    finally:
        for totals in tracker.get_total_tokens().values():
            entry.prompt_tokens += int(totals.get("prompt_tokens") or 0)
            entry.completion_tokens += int(totals.get("completion_tokens") or 0)
        entry.seconds = round(entry.seconds + time.perf_counter() - started, 3)
        _current_stage.reset(token)

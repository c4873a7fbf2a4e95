"""What an LM stage's failure becomes: a finding whose rule says which stage failed and how."""

from __future__ import annotations

import dspy

from program.lm.native import EngineUnsupported
from signatures.contracts import Finding


def _is_connection_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return any(k in text for k in ("connection", "connect", "unreachable", "timed out", "timeout", "apiconnection",
                                   "name resolution", "refused"))


def stage_error(stage: str, exc: BaseException) -> Finding:
    if isinstance(exc, dspy.AdapterParseError):
        return Finding(rule=f"lm.{stage}.unparseable", message=f"{stage} output did not parse: {str(exc)[:300]}")
    if isinstance(exc, EngineUnsupported):
        return Finding(rule=exc.rule, message=str(exc))
    rule = "lm.unreachable" if _is_connection_error(exc) else f"lm.{stage}.error"
    return Finding(rule=rule, message=f"{stage} LM call failed: {type(exc).__name__}: {str(exc)[:300]}")

"""What an LM stage's failure becomes: a finding whose rule says which stage failed and how."""

from __future__ import annotations

import socket

import dspy
import httpx
import litellm
from dspy.utils.exceptions import LMTimeoutError, LMTransportError

from program.lm.native import EngineUnsupported
from contracts import Finding

# An endpoint that cannot be reached, by the type of what is raised: DSPy's, litellm's, httpx's for a
# client that calls it directly, and the operating system's.
UNREACHABLE = (LMTransportError, LMTimeoutError, litellm.APIConnectionError, litellm.Timeout, httpx.TransportError,
               ConnectionError, TimeoutError, socket.gaierror)


def _unreachable(exc: BaseException | None) -> bool:
    """Whether `exc`, or what it was raised from, says the endpoint cannot be reached: DSPy raises its
    own LMUnexpectedError from what an engine raised."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UNREACHABLE):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def stage_error(stage: str, exc: BaseException) -> Finding:
    if isinstance(exc, dspy.AdapterParseError):
        return Finding(rule=f"lm.{stage}.unparseable", message=f"{stage} output did not parse: {str(exc)[:300]}")
    if isinstance(exc, EngineUnsupported):
        return Finding(rule=exc.rule, message=str(exc))
    rule = "lm.unreachable" if _unreachable(exc) else f"lm.{stage}.error"
    return Finding(rule=rule, message=f"{stage} LM call failed: {type(exc).__name__}: {str(exc)[:300]}")

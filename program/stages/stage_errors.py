"""What an LM stage's failure becomes: a finding whose rule says which stage failed and how."""

from __future__ import annotations

import socket
import sys

import dspy
import httpx
from dspy.utils.exceptions import LMTimeoutError, LMTransportError

from program.lm.native import EngineUnsupported
from contracts import Finding

# An endpoint that cannot be reached, by the type of what is raised: DSPy's, httpx's for a client that
# calls it directly, the operating system's, and litellm's (unreachable_types).
UNREACHABLE = (LMTransportError, LMTimeoutError, httpx.TransportError, ConnectionError, TimeoutError, socket.gaierror)


def unreachable_types() -> tuple[type[BaseException], ...]:
    """UNREACHABLE, and litellm's connection errors once litellm is loaded: an LM that never loaded it
    cannot have raised them, and importing it costs a new process seconds (the embedded model and
    an OpenAI-compatible server never need it)."""
    litellm = sys.modules.get("litellm")
    return UNREACHABLE if litellm is None else (*UNREACHABLE, litellm.APIConnectionError, litellm.Timeout)


def _unreachable(exc: BaseException | None) -> bool:
    """Whether `exc`, or what it was raised from, says the endpoint cannot be reached: DSPy raises its
    own LMUnexpectedError from what an engine raised."""
    seen = set()
    types = unreachable_types()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, types):
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

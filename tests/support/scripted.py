"""A scripted LM for tests: a real dspy.LM whose engine answers from a Python function.

The responder gets the stage (the signature's first output field: plan, tool_calls, claims,
judgement, answer), the request's last user message and the texts of the demo messages before it
(empty when the prompt has no demos), and returns a dict (sent as JSON), a raw string, or an
exception to raise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import dspy
from dspy.lm15 import Message, Response, TextPart, Usage

from program.lm.adapter import field_value  # noqa: F401  (the tests read a prompt's fields through it)

STAGE = re.compile(r"Your output fields are:\s*\n1\. `(\w+)`")
# The citation step's first output field is its decision on each ref; the responders call it "claims".
STAGE_NAMES = {"ref_decisions": "claims"}


@dataclass
class ScriptedEngine:
    responder: Callable[[str, str, tuple[str, ...]], object]
    supports_response_schema: bool = True
    supported_params: frozenset = frozenset({"response_format", "max_tokens", "temperature"})
    calls: list[tuple[str, str]] = field(default_factory=list)
    # Each request's system message, in order: the instructions the stage was asked with.
    systems: list[str] = field(default_factory=list)

    def complete(self, request):
        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system or ())
        found = STAGE.search(system or "")
        stage = STAGE_NAMES.get(found.group(1), found.group(1)) if found else "unknown"
        user = request.messages[-1].text or ""
        self.calls.append((stage, user))
        self.systems.append(system or "")
        demos = tuple(m.text or "" for m in request.messages[:-1])
        reply = self.responder(stage, user, demos)
        if isinstance(reply, BaseException):
            raise reply
        text = reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)
        return Response(id=None, model="scripted", message=Message.assistant([TextPart(text)]), finish_reason="stop",
                        usage=Usage(input_tokens=len(user) // 4, output_tokens=len(text) // 4))

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self):
        pass


def scripted_lm(responder) -> dspy.LM:
    return dspy.LM("scripted/test", engine=ScriptedEngine(responder), cache=False)

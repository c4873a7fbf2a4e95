"""A scripted LM that diagnoses the question code builds for an alert (program.entry.alerts): it looks
the alert up, cites the alert it finds as firing, and judges that claim supported. `delay` seconds
pass in every LM call, so a test can keep a server busy."""

from __future__ import annotations

import json
import re
import time

from devset.gold import refs_in
from tests.support.scripted import field_value, scripted_lm

# The two JSON strings of an alert question: the service, then the alert name.
QUOTED_PAIR = re.compile(r'("(?:[^"\\]|\\.)*")[^"]*("(?:[^"\\]|\\.)*")')


def asked(user: str) -> tuple[str, str]:
    service, alert = QUOTED_PAIR.search(field_value(user, "question")).groups()
    return json.loads(service), json.loads(alert)


def claims(user: str) -> dict:
    service, alert = asked(user)
    refs = [r for r in refs_in(field_value(user, "observations")) if r.raw_path == "$.alerts[0]"]
    claim = {"claim_id": "claim-1", "claim_type": "observation",
             "claim_text": f"{service} 的 {alert} 告警正在 firing", "evidence_bindings": [r.label for r in refs]}
    return {"claims": [claim], "hypotheses": [], "missing_info": [], "recommended_actions": []}


def answer(stage: str, user: str) -> dict:
    """What a competent LM answers at each stage of an alert's diagnosis."""
    if stage == "plan":
        service, alert = asked(user)
        return {"plan": {"target_services": [service], "topics": [alert]},
                "tool_calls": [{"tool_name": "query_metrics", "service": service, "alert_name": alert}]}
    if stage == "tool_calls":
        return {"tool_calls": []}
    if stage == "claims":
        return claims(user)
    if stage == "judgement":
        return {"judgement": "supported", "reason": "the alert is shown firing"}
    raise AssertionError(f"unexpected stage {stage}")


def alert_lm(delay: float = 0.0):
    def respond(stage: str, user: str, demos: tuple[str, ...]):
        time.sleep(delay)
        return answer(stage, user)

    return scripted_lm(respond)

"""Script a competent LM for a devset case; any stage can be overridden to model a bad LM."""

from __future__ import annotations

import json

from devset.gold import gold_executor_output, gold_plan, gold_tool_calls
from tests.support.scripted import field_value, scripted_lm


def claim_ids(verifier_user_message: str) -> list[str]:
    data = json.loads(field_value(verifier_user_message, "verifier_input"))
    return [c["claim_id"] for c in data["executor_structured_output"]["claims"]]


def pass_all(user: str) -> dict:
    return {"verdict": "PASS", "groundedness_score": 1.0, "reason": "every claim is stated by its checked excerpts",
            "claim_judgements": [{"claim_id": i, "verdict": "PASS", "reason": "the excerpts state it"}
                                 for i in claim_ids(user)]}


def good_lm(case: dict, *, planner=None, gather=None, executor=None, verifier=None, composer=None):
    """executor(observations, attempt, user) / gather(user, round) / others (user) return replies."""
    state = {"gather": 0, "executor": 0}

    def respond(stage: str, user: str, demos: int):
        if stage == "plan":
            return planner(user) if planner else {"plan": gold_plan(case)}
        if stage == "tool_calls":
            state["gather"] += 1
            if gather:
                return gather(user, state["gather"])
            return {"tool_calls": gold_tool_calls(case) if state["gather"] == 1 else []}
        if stage == "claims":
            state["executor"] += 1
            observations = field_value(user, "observations")
            if executor:
                return executor(observations, state["executor"], user)
            return gold_executor_output(case, observations)
        if stage == "verdict":
            return verifier(user) if verifier else pass_all(user)
        if stage == "answer":
            return composer(user) if composer else {"answer": case["gold"]["answer"]}
        raise AssertionError(f"unexpected stage {stage}")

    return scripted_lm(respond)

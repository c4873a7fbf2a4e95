"""Script a competent LM for a devset case; any stage can be overridden to model a bad LM."""

from __future__ import annotations

from devset.gold import gold_executor_output, gold_plan, gold_tool_calls
from tests.support.scripted import field_value, scripted_lm


def pass_all(user: str) -> dict:
    return {"judgement": "supported", "reason": "the excerpts state it"}


def good_lm(case: dict, *, planner=None, gather=None, executor=None, verifier=None, composer=None):
    """planner(user) / gather(user, round) / executor(observations, attempt, user) / verifier(user) /
    composer(user) return replies (a dict, a raw string, or an exception to raise)."""
    state = {"gather": 0, "executor": 0}

    def respond(stage: str, user: str, demos: tuple[str, ...]):
        if stage == "plan":
            return planner(user) if planner else {"plan": gold_plan(case), "tool_calls": gold_tool_calls(case)}
        if stage == "tool_calls":
            state["gather"] += 1
            return gather(user, state["gather"]) if gather else {"tool_calls": []}
        if stage == "claims":
            state["executor"] += 1
            observations = field_value(user, "observations")
            if executor:
                return executor(observations, state["executor"], user)
            # A good LM points at its citations, as the shipped demos show it.
            return gold_executor_output(case, observations, point=True)
        if stage == "judgement":
            return verifier(user) if verifier else pass_all(user)
        if stage == "answer":
            return composer(user) if composer else {"answer": case["gold"]["answer"]}
        raise AssertionError(f"unexpected stage {stage}")

    return scripted_lm(respond)


def broad(case: dict, question: str) -> dict:
    """The same case asked as a broad question, so the composer LM is asked to phrase the answer."""
    return {**case, "question": question}

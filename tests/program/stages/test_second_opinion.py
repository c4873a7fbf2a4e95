"""A verifier's "contradicted" of a claim whose every fact code finds in its excerpts is judged once
more against the excerpts alone, and that judgement stands; any other judgement is asked once."""

import pytest

from devset.gold import find_ref
from program.entry.api import diagnose
from tests.support.good_lm import good_lm
from tests.support.scripted import field_value

QUESTION = "order-service 的 HighMemoryUsage 告警已经恢复了吧？只确认。"


def claim_on(text):
    def executor(observations, attempt, user):
        ref = find_ref(observations, "HighMemoryUsage firing", "query_metrics")
        return {"claims": [{"claim_id": "claim-1", "claim_type": "observation", "claim_text": text,
                            "evidence_bindings": [{"tool_name": ref.tool_name, "source_invocation_id": ref.invocation_id,
                                                   "raw_path": ref.raw_path, "evidence_excerpt": ref.text}]}],
                "missing_info": []}
    return executor


def run(cases, store, text, verifier):
    asked = []

    def judge(user):
        asked.append("[[ ## question ## ]]" in user)
        return verifier(user)

    case = {**cases["high_memory_positive"], "question": QUESTION}
    result = diagnose(QUESTION, lm=good_lm(case, executor=claim_on(text), verifier=judge), db=store)
    return result, store.get_session(result.session_id), asked


def presumption_reader(user):
    """Shown the question, it reads the claim against what the question presumes."""
    if "[[ ## question ## ]]" in user:
        return {"judgement": "contradicted", "reason": "the question says it recovered"}
    return {"judgement": "supported", "reason": "the excerpt shows it firing"}


FIRING = "order-service 的 HighMemoryUsage 告警仍在触发，current=91%"


def test_a_disputed_contradiction_is_judged_again_without_the_question_and_that_stands(cases, store):
    result, record, asked = run(cases, store, FIRING, presumption_reader)
    assert asked == [True, False]
    assert result.verdict == "PASS"
    notes = [n for n in record.notes if n.rule == "verifier.second_opinion"]
    assert len(notes) == 1 and "the question says it recovered" in notes[0].message
    assert "supported (the excerpt shows it firing)" in notes[0].message


def test_a_contradiction_the_second_opinion_keeps_stays_a_disagreement(cases, store):
    result, record, asked = run(cases, store, FIRING, lambda user: {"judgement": "contradicted", "reason": "no"})
    assert asked == [True, False]
    assert result.verdict == "LOW_CONFID"
    overrides = record.self_evaluation.verifier_evaluation.code_overrides
    assert [o.rule for o in overrides] == ["verdict.verifier_disagreement"]


@pytest.mark.parametrize("judgement", ["supported", "over-reaches"])
def test_a_judgement_that_is_not_disputed_is_asked_once(cases, store, judgement):
    result, record, asked = run(cases, store, FIRING, lambda user: {"judgement": judgement, "reason": "r"})
    assert asked == [True]
    assert not [n for n in record.notes if n.rule == "verifier.second_opinion"]
    assert result.verdict == ("PASS" if judgement == "supported" else "LOW_CONFID")


def test_a_contradiction_code_does_not_refute_is_asked_once(cases, store):
    # "并非误报" is a negation the excerpt does not hold: code cannot say the claim agrees with it.
    result, record, asked = run(cases, store, "order-service 的 HighMemoryUsage 告警仍在触发，current=91%，并非误报",
                                presumption_reader)
    assert asked == [True]
    assert result.verdict == "REJECT"


def test_a_second_opinion_that_fails_keeps_the_first_and_fails_closed(cases, store):
    def verifier(user):
        if "[[ ## question ## ]]" in user:
            return {"judgement": "contradicted", "reason": "the question says it recovered"}
        raise RuntimeError("the LM went away")

    result, record, asked = run(cases, store, FIRING, verifier)
    assert asked == [True, False]
    assert result.verdict == "LOW_CONFID"
    assert any("no judgement" in n.message for n in record.notes if n.rule == "verifier.second_opinion")
    assert any(e.rule.startswith("lm.verifier") for e in result.errors)


@pytest.mark.parametrize("text", [
    # What code cannot read: a word of the metric's health, or a comparison, beside no alert state.
    "order-service memory usage is healthy, current=91%",
    "order-service 的 HighMemoryUsage current=91% 低于 threshold=85%",
])
def test_a_disputed_claim_that_states_no_alert_state_is_not_asked_again(cases, store, text):
    result, record, asked = run(cases, store, text, presumption_reader)
    assert asked == [True]
    assert result.verdict == "LOW_CONFID"
    overrides = record.self_evaluation.verifier_evaluation.code_overrides
    assert [o.rule for o in overrides] == ["verdict.verifier_disagreement"]

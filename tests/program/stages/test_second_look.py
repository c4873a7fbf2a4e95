"""A verified "nothing found" is only as good as the search behind it. Before a negative observation
may make a run PASS, code searches the target's own lines again with the question's words; a
plausible match blocks the all-clear and the answer shows it (issue: a search worded differently
became "verified: nothing found")."""

from dataclasses import replace

from devset.gold import gold_plan, refs_in
from program.entry.api import diagnose
from program.stages.pipeline import Diagnosis
from tests.support.good_lm import good_lm
from tools.declaration import Toolbox
from tools.functions import QUERY_LOGS, TOOLBOX

QUESTION = "Only confirm whether payment-service logged payment callback failures."


def worded_differently(case, query):
    """A planner that searches with its own words, and an executor that reports the no-hit."""
    def planner(user):
        return {"plan": gold_plan(case),
                "tool_calls": [{"tool_name": "query_logs", "query": query, "service": "payment-service"}]}

    def nothing_found(observations, attempt, user):
        (ref,) = [r for r in refs_in(observations) if r.raw_path is None]
        return {"claims": [{"claim_id": "claim-1", "claim_type": "negative_observation",
                            "claim_text": "payment-service 的日志中未检索到支付回调失败记录",
                            "evidence_bindings": [{"tool_name": ref.tool_name, "source_invocation_id": ref.invocation_id,
                                                   "raw_path": None, "evidence_excerpt": ref.text}]}],
                "hypotheses": [], "missing_info": [], "recommended_actions": []}

    return good_lm({**case, "question": QUESTION}, planner=planner, executor=nothing_found)


def test_a_no_hit_worded_differently_from_the_logs_is_not_an_all_clear(cases, store):
    case = cases["hikaricp_negative"]
    result = diagnose(QUESTION, lm=worded_differently(case, "payment notification exception"), db=store)
    assert result.verdict == "LOW_CONFID"
    (claim,) = result.claims
    assert claim.verification_status == "downgraded" and "payment callback failed" in claim.reason
    record = store.get_session(result.session_id)
    overrides = record.self_evaluation.verifier_evaluation.code_overrides
    assert [o.rule for o in overrides] == ["verdict.second_look"]
    assert "payment callback failed" in overrides[0].message
    # The answer shows the line that may be the answer, and never says "nothing found" as verified.
    assert "Order 123 payment callback failed: upstream acquirer returned 502" in result.answer
    assert "may be what was asked about" in result.answer
    first, second = store.list_invocations(result.session_id)
    assert first.retrieval_details.evidence_status == "no_evidence"
    assert second.input == {"query": "Only confirm whether logged payment callback failures.",
                            "min_share": 0.5, "service": "payment-service"}
    assert any(n.rule == "verdict.second_look_search" for n in record.notes)


def test_an_honest_negative_still_passes_after_the_second_look(cases, store):
    case = cases["hikaricp_negative"]
    result = diagnose(case["question"], lm=good_lm(case), db=store)
    assert result.verdict == "PASS"
    record = store.get_session(result.session_id)
    assert any(n.rule == "verdict.second_look_search" and "no_evidence" in n.message for n in record.notes)


def test_a_second_look_that_cannot_run_blocks_the_all_clear(cases, store):
    def failing_second_look(*, min_share=1.0, **arguments):
        if min_share < 1.0:
            return {"success": False, "error": "log source went away", "logs": [], "total": 0}
        return QUERY_LOGS.function(**arguments)

    toolbox = Toolbox([replace(QUERY_LOGS, stand_in=failing_second_look) if d.name == "query_logs" else d
                       for d in TOOLBOX])
    case = cases["hikaricp_negative"]
    result = diagnose(case["question"], lm=good_lm(case), db=store, program=Diagnosis(store=store, toolbox=toolbox))
    assert result.verdict == "LOW_CONFID"
    overrides = store.get_session(result.session_id).self_evaluation.verifier_evaluation.code_overrides
    assert [o.rule for o in overrides] == ["verdict.second_look"]
    assert "could not look again" in overrides[0].message and "log source went away" in overrides[0].message

"""The metric on predictions of known quality: good, fabricated, forbidden-topic, over-claiming, empty."""

import dspy
import pytest

from devset.gold import (
    find_ref,
    fixture_executor_output,
    gold_executor_output,
    gold_tool_calls,
)
from devset.metric import check_fixture, score_run
from program.entry.api import diagnose
from signatures.contracts import DiagnosisResult, GatekeeperResult
from tests.support.good_lm import good_lm
from tools.calls import ToolCall
from tools.functions import TOOLBOX
from tools.recorder import ToolInvocationRecorder


def scored(case, store, **overrides):
    result = diagnose(case["question"], lm=good_lm(case, **overrides), db=store, compiled=False)
    breakdown = score_run(case, result, store.list_invocations(result.session_id))
    return dspy.Prediction(score=breakdown.score, feedback="; ".join(breakdown.feedback) or "all checks passed"), result


@pytest.mark.parametrize("case_id", ["high_memory_positive", "slow_response_positive", "hikaricp_positive",
                                     "hikaricp_negative", "narrow_forbidden"])
def test_a_good_run_scores_one(cases, store, case_id):
    metric, _ = scored(cases[case_id], store)
    assert metric.score == 1.0 and metric.feedback == "all checks passed"


def test_fabricated_citation_scores_low_and_names_the_rule(cases, store):
    case = cases["high_memory_positive"]

    def fabricate(observations, attempt, user):
        output = gold_executor_output(case, observations)
        output["claims"][0]["evidence_bindings"][0]["raw_path"] = "$.alerts[7]"
        return output

    metric, _ = scored(case, store, executor=fabricate)
    assert metric.score == pytest.approx(0.15)  # only recall: its other two citations of the alert are real
    assert "verdict REJECT, expected PASS" in metric.feedback and "evidence.raw_path" in metric.feedback


def test_forbidden_topic_costs_its_share(cases, store):
    case = cases["narrow_forbidden"]

    def mention(observations, attempt, user):
        output = gold_executor_output(case, observations)
        output["claims"][0]["claim_text"] += " user-service 未受影响。"
        return output

    metric, result = scored(case, store, executor=mention)
    # Code blocks a claim that names an excluded topic, so the run also loses its verdict and facts.
    assert result.verdict == "LOW_CONFID"
    assert metric.score == pytest.approx(0.45)
    assert "forbidden terms in claims or answer: user-service" in metric.feedback


def test_over_claiming_on_a_narrow_question(cases, store):
    case = cases["high_memory_positive"]

    def overclaim(observations, attempt, user):
        output = gold_executor_output(case, observations)
        ref = find_ref(observations, "Full GC 次数: 15")
        for n in (2, 3):
            output["claims"].append({"claim_id": f"claim-{n}", "claim_type": "root_cause",
                                     "claim_text": "内存泄漏已确认", "evidence_bindings": [
                                         {"tool_name": "query_logs", "source_invocation_id": ref.invocation_id,
                                          "raw_path": ref.raw_path, "evidence_excerpt": ref.text}]})
        return output

    metric, _ = scored(case, store, executor=overclaim)
    assert "3 claims for a narrow question" in metric.feedback
    assert "narrow question answered with claim types root_cause" in metric.feedback
    assert "forbidden terms in claims or answer: 内存泄漏已确认" in metric.feedback
    assert metric.score <= 0.75


def test_empty_prediction_scores_nothing(cases):
    case = cases["high_memory_positive"]
    empty = DiagnosisResult(session_id="s", verdict="LOW_CONFID", answer="",
                            gatekeeper_result=GatekeeperResult(status="fail", severity="low_confid",
                                                               failed_rules=["evidence.no_claims"]))
    breakdown = score_run(case, empty, [])
    assert breakdown.parts == {"verdict": 0.0, "gatekeeper": 0.0, "forbidden": 0.0, "scope": 0.0, "recall": 0.0,
                               "facts": 0.0}
    assert breakdown.score == 0.0 and "earn nothing" in " ".join(breakdown.feedback)


def test_offline_fixture_is_rejected_with_the_expected_rules(cases, store):
    case = cases["gatekeeper_reject"]
    recorder = ToolInvocationRecorder(store, "fixture", TOOLBOX)
    for call in gold_tool_calls(case):
        tool_call = ToolCall(**call)
        recorder.call(tool_call.tool_name, **tool_call.arguments())
    output = fixture_executor_output(case, [inv.id for inv in recorder.invocations])
    checked = check_fixture(case, output, recorder.invocations, "fixture", TOOLBOX)
    assert checked.ok and checked.severity == "reject"
    nothing = {"claims": [], "hypotheses": [], "missing_info": [], "recommended_actions": []}
    assert not check_fixture(case, nothing, recorder.invocations, "fixture", TOOLBOX).ok

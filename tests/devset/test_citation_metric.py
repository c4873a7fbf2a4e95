"""The optimizer's metric, part by part: each part moves on what it measures and on nothing else."""

import pytest

from devset import devset_world, load_devset
from devset.gold import find_ref, gold_executor_output
from devset.recorded import WEIGHTS, Recording, record, score_output
from program.lm.adapter import TEXT_MAX_CHARS
from contracts import ExecutorOutput
from tools.functions import TOOLBOX


WANTED = {"state_pair_checkout_en", "near_miss_checkout_zh", "some_lines_checkout_en", "negative_checkout_en"}


@pytest.fixture(scope="module")
def evidence():
    """Every ref offered, so that an output may cite what a diagnosis's screen would set aside: each
    part of the metric is measured alone."""
    with devset_world():
        yield record([c for c in load_devset() if c["case_id"] in WANTED], TOOLBOX, Recording(screened_refs=False))


def gold(recorded) -> dict:
    return gold_executor_output(recorded.case, recorded.observations)


def score(recorded, output: dict):
    return score_output(recorded, ExecutorOutput.model_validate(output))


def lost(scored) -> set[str]:
    return {name for name, value in scored.parts.items() if value < 1}


def test_the_gold_output_earns_every_part(evidence):
    for recorded in evidence.values():
        scored = score(recorded, gold(recorded))
        assert set(scored.parts) == set(WEIGHTS) and not lost(scored), scored.feedback


def test_citing_the_earlier_resolved_alert_costs_the_refs_part(evidence):
    recorded = evidence["state_pair_checkout_en"]
    output = gold(recorded)
    resolved = find_ref(recorded.observations, "HighErrorRate resolved, service=checkout-service", "query_metrics")
    output["claims"][0]["evidence_bindings"].append({"tool_name": "query_metrics", "source_invocation_id": resolved.invocation_id,
                                                     "raw_path": resolved.raw_path, "evidence_excerpt": resolved.text})
    scored = score(recorded, output)
    assert lost(scored) == {"refs"}
    assert any("does not answer the question" in f for f in scored.feedback)


def test_where_code_set_the_earlier_alert_aside_citing_it_blocks_the_claim():
    with devset_world():
        (recorded,) = record([c for c in load_devset() if c["case_id"] == "state_pair_checkout_en"], TOOLBOX).values()
    invocation = next(inv for inv in recorded.invocations if inv.tool_name == "query_metrics")
    resolved = next(r for r in invocation.retrieval_details.evidence_refs if "HighErrorRate resolved" in r.text)
    assert "HighErrorRate resolved" not in recorded.observations
    output = gold(recorded)
    output["claims"][0]["evidence_bindings"].append({"tool_name": "query_metrics", "source_invocation_id": invocation.id,
                                                     "raw_path": resolved.raw_path, "evidence_excerpt": resolved.text})
    scored = score(recorded, output)
    assert "verdict.set_aside" in scored.blocked_rules and {"refs", "verdict"} <= lost(scored)


def test_a_claim_that_says_no_while_the_evidence_says_yes_costs_polarity(evidence):
    recorded = evidence["some_lines_checkout_en"]
    output = gold(recorded)
    output["claims"][0]["claim_text"] = ("checkout-service logs show no slow requests on /api/v1/checkout/confirm "
                                         "(GET /api/v1/checkout/confirm took 3900ms).")
    assert "polarity" in lost(score(recorded, output))


def test_a_no_answer_read_from_a_healthy_pool_is_right_and_a_yes_is_not(evidence):
    recorded = evidence["near_miss_checkout_zh"]
    assert not lost(score(recorded, gold(recorded)))
    output = gold(recorded)
    output["claims"][0]["claim_text"] = "checkout-service 的日志显示连接池：HikariCP pool stats active=6/30。"
    assert "polarity" in lost(score(recorded, output))


def test_facts_must_be_in_the_claim_text_not_only_in_the_excerpt(evidence):
    recorded = evidence["state_pair_checkout_en"]
    output = gold(recorded)
    output["claims"][0]["claim_text"] = "checkout-service's HighErrorRate alert is firing."
    scored = score(recorded, output)
    assert lost(scored) == {"facts"}
    assert any("7.4%" in f for f in scored.feedback)


def test_missing_info_that_contradicts_a_claim_costs_consistency(evidence):
    recorded = evidence["state_pair_checkout_en"]
    output = gold(recorded)
    output["missing_info"] = [{"info_id": "m1", "description": "No HighErrorRate alert was found for checkout-service."}]
    assert lost(score(recorded, output)) == {"consistent"}
    # Something the claim does not name is no contradiction.
    output["missing_info"] = [{"info_id": "m1", "description": "No deploy log was available to explain the errors."}]
    assert not lost(score(recorded, output))


def test_a_claim_cut_at_the_length_cap_is_refused_as_the_pipeline_refuses_it(evidence):
    recorded = evidence["negative_checkout_en"]
    output = gold(recorded)
    text = output["claims"][0]["claim_text"]
    output["claims"][0]["claim_text"] = (text + " " + "and the search covered every line of the service" * 10)[:TEXT_MAX_CHARS]
    capped = score_output(recorded, ExecutorOutput.model_validate(output), text_cap=TEXT_MAX_CHARS)
    assert {"whole", "verdict"} <= lost(capped) and capped.verdict == "LOW_CONFID"
    assert "verdict.cut_off" in capped.blocked_rules
    # The same length written under no cap (a schema that was not narrowed) was not cut.
    assert "whole" not in lost(score(recorded, output))


def test_a_blocked_claim_loses_the_verdict_and_everything_it_would_have_shown(evidence):
    recorded = evidence["negative_checkout_en"]
    output = gold(recorded)
    output["claims"][0]["evidence_bindings"][0]["source_invocation_id"] = 999
    scored = score(recorded, output)
    assert {"gatekeeper", "verdict"} <= lost(scored) and scored.verdict == "REJECT"


def test_a_third_claim_on_a_narrow_question_costs_the_verdict(evidence):
    recorded = evidence["some_lines_checkout_en"]
    output = gold(recorded)
    output["claims"] = [dict(output["claims"][0], claim_id=f"claim-{n}") for n in (1, 2, 3)]
    scored = score(recorded, output)
    assert lost(scored) == {"verdict"} and any("3 claims for a narrow question" in f for f in scored.feedback)


def test_the_expected_verdict_for_the_opposite_answer_earns_no_verdict_credit(evidence):
    """The committed run's near_miss_shipping_zh: a PASS for "the pool is exhausted" where the
    evidence shows a healthy pool is the wrong answer passed."""
    recorded = evidence["near_miss_checkout_zh"]
    output = gold(recorded)
    output["claims"][0]["claim_text"] = "checkout-service 的连接池告急：HikariCP pool stats active=6/30。"
    scored = score(recorded, output)
    assert scored.verdict == recorded.case["expected_verdict"] == "PASS"
    assert {"polarity", "verdict"} <= lost(scored)


def test_a_wrong_answer_passed_scores_below_a_refusal_that_cites_the_same_line(evidence):
    """A pool "in crisis" (告急) passed on a healthy pool line earns nothing for the line it cites or
    the figures it copies: it scores below a claim that code refuses (LOW_CONFID) citing the same
    line. ("耗尽" with the line's figures code refuses itself: verdict.below_limit.)"""
    recorded = evidence["near_miss_checkout_zh"]
    wrong = gold(recorded)
    wrong["claims"][0]["claim_text"] = "checkout-service 的连接池告急：HikariCP pool stats active=6/30。"
    refused = gold(recorded)
    refused["claims"][0]["claim_text"] += " 等待 999ms。"
    passed, blocked = score(recorded, wrong), score(recorded, refused)
    assert (passed.verdict, blocked.verdict) == ("PASS", "LOW_CONFID")
    assert "verdict.ungrounded_number" in blocked.blocked_rules
    assert {"refs", "facts", "polarity", "verdict"} <= lost(passed) and "refs" not in lost(blocked)
    assert passed.score < blocked.score


def test_a_score_is_normalised_between_no_claim_and_the_gold(evidence):
    nothing = {"claims": [], "hypotheses": [], "missing_info": [], "recommended_actions": []}
    for recorded in evidence.values():
        # No claim breaks only what a claim can break right: it is consistent, and nothing of it was cut.
        assert recorded.floor == pytest.approx(WEIGHTS["consistent"] + WEIGHTS["whole"])
        assert recorded.floor == score(recorded, nothing).score and recorded.ceiling == score(recorded, gold(recorded)).score
        assert (recorded.normalised(recorded.floor), recorded.normalised(recorded.ceiling)) == (0.0, 1.0)
    recorded = evidence["state_pair_checkout_en"]
    output = gold(recorded)
    output["claims"][0]["claim_text"] = "checkout-service's HighErrorRate alert is firing."
    raw = score(recorded, output).score
    assert raw == pytest.approx(1 - WEIGHTS["facts"] / 3, abs=1e-4)  # one of its three facts, 7.4%, left out
    assert recorded.normalised(raw) == pytest.approx((raw - recorded.floor) / (1 - recorded.floor), abs=1e-4)

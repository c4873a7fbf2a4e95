"""Diagnoses over logs the real programs wrote (tests/support/real_logs.py), with a scripted LM: an
outage in the logs is found and verified, a true negative is stated, and a search worded so that it
misses the lines never becomes a verified "nothing found"."""

import pytest

from devset.gold import refs_in
from program.entry.api import diagnose
from tests.support.good_lm import good_lm


@pytest.fixture
def logs(real_logs, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(real_logs.root))
    return real_logs


def _planner(query, service):
    def plan(user):
        return {"plan": {"target_services": [service], "topics": [query]},
                "tool_calls": [{"tool_name": "query_logs", "query": query, "service": service}]}
    return plan


def _first_ref(claim_type, text, needle=""):
    """An executor that cites the first log ref holding `needle` (or the no-hit)."""
    def executor(observations, attempt, user):
        ref = next(r for r in refs_in(observations) if r.tool_name == "query_logs" and needle in r.text)
        binding = {"tool_name": ref.tool_name, "source_invocation_id": ref.invocation_id, "raw_path": ref.raw_path,
                   "evidence_excerpt": ref.text}
        return {"claims": [{"claim_id": "claim-1", "claim_type": claim_type, "claim_text": text,
                            "evidence_bindings": [binding]}],
                "hypotheses": [], "missing_info": [], "recommended_actions": []}
    return executor


def test_nginx_returning_502s_from_a_dead_upstream_is_verified(logs, cases, store):
    lm = good_lm(cases["hikaricp_positive"], planner=_planner("502", "api-gateway"),
                 executor=_first_ref("observation", "api-gateway returned 502", '" 502 '))
    result = diagnose("Is api-gateway returning 502 errors? Only check its logs.", lm=lm, db=store, compiled=False)
    assert result.verdict == "PASS" and result.gatekeeper_result.status == "pass"
    (claim,) = [c for c in result.claims if c.verification_status == "verified"]
    assert '" 502 ' in claim.claim.evidence_bindings[0].evidence_excerpt
    assert "api-gateway" in result.answer and "502" in result.answer


def test_postgresql_refusing_clients_is_verified(logs, cases, store):
    lm = good_lm(cases["hikaricp_positive"], planner=_planner("too many clients", "orders-db"),
                 executor=_first_ref("observation", "orders-db refused clients: FATAL: sorry, too many clients already"))
    result = diagnose("Did orders-db run out of connections? Only check its logs.", lm=lm, db=store, compiled=False)
    assert result.verdict == "PASS"
    assert "too many clients already" in result.answer


def test_a_true_negative_over_logs_that_were_all_read_is_stated(logs, cases, store):
    lm = good_lm(cases["hikaricp_negative"], planner=_planner("502", "static-site"),
                 executor=_first_ref("negative_observation", "static-site 的日志中未找到 502"))
    result = diagnose("Is static-site returning 502 errors? Only check its logs.", lm=lm, db=store, compiled=False)
    assert result.verdict == "PASS"
    (invocation,) = [inv for inv in store.list_invocations(result.session_id) if inv.input.get("query") == "502"]
    assert invocation.retrieval_details.evidence_status == "no_evidence" and invocation.retrieval_details.unread == []


def test_a_search_worded_to_miss_the_502s_never_verifies_nothing_found(logs, cases, store):
    lm = good_lm(cases["hikaricp_negative"], planner=_planner("bad gateway upstream unavailable", "api-gateway"),
                 executor=_first_ref("negative_observation", "No bad gateway was found in api-gateway's logs."))
    result = diagnose("Is api-gateway returning 502 errors? Only check its logs.", lm=lm, db=store, compiled=False)
    assert result.verdict == "LOW_CONFID"
    overrides = store.get_session(result.session_id).self_evaluation.verifier_evaluation.code_overrides
    assert "verdict.second_look" in [o.rule for o in overrides]
    assert '" 502 ' in result.answer  # the lines the second look found are shown, not verified

"""One real run of the embedded Gemma model through the whole pipeline (no network, CPU only).

It checks that the run completes and that the stored record is consistent; it says nothing about
answer quality, which the devset evaluation measures.
"""

import pytest

from program.api import diagnose

pytestmark = pytest.mark.embedded


def test_embedded_model_runs_the_whole_pipeline(store):
    result = diagnose("只确认 order-service 是否存在 HighMemoryUsage 告警", lm="embedded", db=store)
    record = store.get_session(result.session_id)
    assert record is not None and record.status == "completed"
    assert record.lm_model == "embedded/gemma-3-270m-q4_k_m"
    assert result.verdict in ("PASS", "LOW_CONFID", "REJECT")
    gate = record.self_evaluation.verifier_evaluation.gatekeeper_result
    assert gate == result.gatekeeper_result
    if gate.status == "fail":
        assert result.verdict != "PASS"
    if gate.severity == "reject":
        assert result.verdict == "REJECT"
    assert record.usage["planner"].lm_calls >= 1 and record.usage["executor"].lm_calls >= 1
    assert sum(u.completion_tokens for u in record.usage.values()) > 0
    for invocation in store.list_invocations(result.session_id):
        assert invocation.session_id == result.session_id
    assert result.answer.strip()

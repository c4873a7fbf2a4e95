"""Diagnoses against a live Prometheus (Debian's binary, started by the `prometheus` fixture), with a
scripted LM: a citation into a Prometheus alert passes the gatekeeper, a tampered one is rejected, a
server that goes away mid-run fails the call and the verdict, and the CLI answers from the server."""

import pytest

from devset.gold import refs_in
from program.entry import cli
from program.entry.api import diagnose
from program.store.audit import AuditStore
from contracts.record import DiagnosisResult
from tests.support.good_lm import good_lm
from tests.support.prometheus_server import firing_in_fixture, running_prometheus
from tools import query_metrics

QUESTION = "只确认 order-service 是否存在 HighMemoryUsage 告警"
PLAN = {"plan": {"target_services": ["order-service"], "topics": ["HighMemoryUsage"]},
        "tool_calls": [{"tool_name": "query_metrics", "service": "order-service", "alert_name": "HighMemoryUsage"}]}
CLAIM = "order-service 的 HighMemoryUsage 告警正在 firing，current=91，threshold=85"


def cite_the_alert(excerpt=None):
    def executor(observations, attempt, user):
        refs = [r for r in refs_in(observations) if r.raw_path == "$.alerts[0]"]
        bindings = [{"tool_name": r.tool_name, "source_invocation_id": r.invocation_id, "raw_path": r.raw_path,
                     "evidence_excerpt": excerpt or r.text} for r in refs]
        return {"claims": [{"claim_id": "claim-1", "claim_type": "observation", "claim_text": CLAIM,
                            "evidence_bindings": bindings}],
                "hypotheses": [], "missing_info": [], "recommended_actions": []}

    return executor


@pytest.fixture
def live(prometheus, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_URL", prometheus.url)
    return prometheus


def test_query_metrics_reads_the_servers_alerts(live):
    found = query_metrics(service="order-service", alert_name="HighMemoryUsage")
    (alert,) = found["alerts"]
    assert (alert["state"], alert["current"], alert["threshold"]) == ("firing", "91", "85")
    assert alert["annotations"] == {"summary": "JVM heap usage 91% on order-service"}
    assert alert["samples"] and alert["samples"][-1] == "91" and alert["active_since"].endswith("Z")
    assert found["source"] == f"prometheus {live.url}"
    fired = {(a["name"], a["service"]) for a in query_metrics(state="firing")["alerts"]}
    assert fired == firing_in_fixture()
    quiet = query_metrics(service="payment-service", alert_name="HighMemoryUsage")
    assert quiet["success"] and quiet["alerts"] == [] and "未找到匹配的告警" in quiet["message"]
    # A no-hit names what was searched, not the catalog (which could name what the user excluded).
    assert "alert_name='HighMemoryUsage'" in quiet["message"] and "HighCPUUsage" not in quiet["message"]


def test_a_citation_into_a_prometheus_alert_passes_the_gatekeeper(live, cases, store):
    lm = good_lm(cases["high_memory_positive"], planner=lambda user: PLAN, executor=cite_the_alert())
    result = diagnose(QUESTION, lm=lm, db=store, compiled=False)
    assert result.verdict == "PASS" and result.gatekeeper_result.status == "pass"
    (invocation,) = store.list_invocations(result.session_id)
    assert invocation.source == f"prometheus {live.url}"
    assert invocation.retrieval_details.evidence_refs[0].text.startswith(
        "HighMemoryUsage firing, service=order-service, current=91, threshold=85, active_since=")
    assert "current=91" in result.answer


def test_a_tampered_citation_into_a_prometheus_alert_is_rejected(live, cases, store):
    lm = good_lm(cases["high_memory_positive"], planner=lambda user: PLAN,
                 executor=cite_the_alert("HighMemoryUsage firing, service=order-service, current=95, threshold=85"))
    result = diagnose(QUESTION, lm=lm, db=store, compiled=False)
    assert result.verdict == "REJECT"
    assert "evidence.excerpt_mismatch" in result.gatekeeper_result.failed_rules


def test_a_server_that_goes_away_mid_run_fails_the_call_and_the_verdict(cases, store, monkeypatch):
    with running_prometheus() as server:
        monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_URL", server.url)

        def plan_then_lose_the_server(user):
            server.stop()  # the catalog was read; the tool call that follows finds nobody
            return PLAN

        lm = good_lm(cases["high_memory_positive"], planner=plan_then_lose_the_server, executor=cite_the_alert())
        result = diagnose(QUESTION, lm=lm, db=store, compiled=False)
    (invocation,) = store.list_invocations(result.session_id)
    assert not invocation.success and invocation.retrieval_details.evidence_status == "failed"
    assert "could not be reached" in invocation.retrieval_details.message
    assert result.verdict != "PASS"


def test_the_cli_answers_from_a_live_prometheus(live, cases, tmp_path, monkeypatch, capsys):
    lm = good_lm(cases["high_memory_positive"], planner=lambda user: PLAN, executor=cite_the_alert())
    monkeypatch.setattr("program.entry.api.resolve_lm", lambda spec: lm)
    monkeypatch.setenv("COLUMNS", "240")  # one audit line per call, not folded at 80 columns
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    assert cli.main(["--db", db, "ask", QUESTION, "--json", "--no-compiled"]) == 0
    result = DiagnosisResult.model_validate_json(capsys.readouterr().out)
    assert result.verdict == "PASS" and "current=91" in result.answer
    assert cli.main(["--db", db, "audit", result.session_id]) == 0
    assert f"from prometheus {live.url}" in capsys.readouterr().out
    assert AuditStore(db, read_only=True).list_invocations(result.session_id)[0].source == f"prometheus {live.url}"

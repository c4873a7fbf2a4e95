"""A Prometheus that misbehaves, served on loopback (tests/support/servers.py): an answer that
drips in is given up on at the timeout, and `ask` against a server whose answers are not the
API's stores a session with the failure, exits as documented (0: done) and never passes."""

import gzip
import json
import time
from types import SimpleNamespace

import httpx
import pytest

from program.entry import cli
from program.store.audit import AuditStore
from contracts.record import DiagnosisResult
from tests.program.test_prometheus_end_to_end import PLAN, QUESTION, cite_the_alert
from tests.support.good_lm import good_lm
from tests.support.servers import Loopback, answer, drip
from tools import query_metrics
from tools.catalog import active_catalog
from tools.functions import alert_text
from tools.sources.errors import SourceError
from tools.sources.limits import MAX_ITEM_CHARS, MAX_NAME_CHARS, MAX_REF_CHARS
from tools.sources.prometheus import Prometheus

ALERT = {"labels": {"alertname": "HighMemoryUsage", "service": "order-service"},
         "annotations": {"summary": "heap 91%"}, "state": "firing", "activeAt": "2026-11-30T10:00:00Z",
         "value": "9.1e+01"}
RULE = {"type": "alerting", "name": "HighMemoryUsage", "query": "memory_usage_percent >= 85", "alerts": [ALERT]}
LABELS = answer(200, {"status": "success", "data": ["order-service", "payment-service"]})
MATRIX = answer(200, {"status": "success", "data": {"resultType": "matrix", "result": []}})


def rules(*rule_list) -> dict:
    return {"status": "success", "data": {"groups": [{"name": "g", "rules": list(rule_list)}]}}


def with_alert(**changes) -> dict:
    return rules({**RULE, "alerts": [{**ALERT, **changes}]})


def prometheus(rules_route) -> Loopback:
    return Loopback({"/api/v1/rules": rules_route, "/api/v1/label/service/values": LABELS,
                     "/api/v1/query_range": MATRIX})


def test_an_answer_that_drips_in_is_given_up_on_at_the_timeout():
    # Each read of the drip takes 50 ms, far within httpx's timeout; the whole answer takes 30 s.
    with prometheus(drip(rules(RULE))) as server:
        source = Prometheus(server.url, timeout=0.5)
        with pytest.raises(SourceError, match=r"timed out on /api/v1/rules: the call had no whole answer within 0\.5 s"):
            source.alerts()
        assert source.services() == ("order-service", "payment-service")  # the next request is its own


def test_one_tool_call_ends_within_the_timeout_however_many_requests_it_makes():
    # Twenty alerts, and each range query answered just within the timeout: request by request
    # the call would take about 20 x 0.4 s; it is given up on at the call's deadline instead.
    def slow(handler):
        time.sleep(0.4)
        MATRIX(handler)

    many = rules({**RULE, "alerts": [{**ALERT, "labels": {**ALERT["labels"], "pod": f"p{n}"}} for n in range(20)]})
    with Loopback({"/api/v1/rules": answer(200, many), "/api/v1/label/service/values": LABELS,
                   "/api/v1/query_range": slow}) as server:
        source = Prometheus(server.url, timeout=1)
        with pytest.raises(SourceError, match="the call had no whole answer within 1 s"), source.call():
            source.with_samples(source.alerts())
        with source.call():
            assert source.services() == ("order-service", "payment-service")  # the next call has its own deadline


def test_a_server_that_answers_well_on_loopback_is_read():
    with prometheus(answer(200, rules(RULE))) as server:
        (alert,) = Prometheus(server.url, timeout=2).alerts()
    assert (alert["name"], alert["service"], alert["current"], alert["threshold"]) == (
        "HighMemoryUsage", "order-service", "91", "85")


HOSTILE = {
    "rules not a list": (answer(200, {"status": "success", "data": {"groups": [{"rules": 5}]}}),
                         "data.groups[0].rules: Input should be a valid list"),
    "a rule without a name": (answer(200, rules({k: v for k, v in RULE.items() if k != "name"})),
                              "data.groups[0].rules[0].alerting.name: Field required"),
    "labels not an object": (answer(200, with_alert(labels=["order-service"])),
                             "alerts[0].labels: Input should be a valid dictionary"),
    "a value that is not a number": (answer(200, with_alert(value="lots")), "alerts[0].value: Value error, not a number"),
    "a huge annotation": (answer(200, with_alert(annotations={"summary": "x" * 9_000_000})),
                          "with more than 8 MiB, the most an answer may be"),
    "a body that is not JSON": (answer(200, "<html>gateway</html>", "text/html"), "a body that is not JSON"),
    "an answer that drips in": (drip(rules(RULE)), "no whole answer within 1 s"),
}


def mocked(rules_body=None, *, labels=None, matrix=None) -> Prometheus:
    """A Prometheus behind httpx's mock transport: each endpoint answers the body given, or a good one."""
    good = {"/api/v1/rules": rules(RULE), "/api/v1/label/service/values": {"status": "success", "data": ["order-service"]},
            "/api/v1/query_range": {"status": "success", "data": {"resultType": "matrix", "result": []}}}
    given = {"/api/v1/rules": rules_body, "/api/v1/label/service/values": labels, "/api/v1/query_range": matrix}
    bodies = {path: good[path] if given[path] is None else given[path] for path in good}

    def handler(request):
        body = bodies[request.url.path]
        return body if isinstance(body, httpx.Response) else httpx.Response(200, json=body)

    return Prometheus("http://prometheus.test:9090", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(("body", "problem"), [
    ({"status": "success", "data": {}}, "data.groups: Field required"),
    ({"status": "success", "data": {"groups": [{"rules": None}]}}, "data.groups[0].rules: Input should be a valid list"),
    (rules({**RULE, "type": "silencing"}), "data.groups[0].rules[0]: Input tag 'silencing' found using 'type'"),
    (rules({**RULE, "name": "x" * (MAX_NAME_CHARS + 1)}),
     f"rules[0].alerting.name: String should have at most {MAX_NAME_CHARS} characters"),
    (rules({**RULE, "query": 7}), "rules[0].alerting.query: Input should be a valid string"),
    (rules({**RULE, "alerts": {"0": ALERT}}), "rules[0].alerting.alerts: Input should be a valid list"),
    (with_alert(state="resolved"), "alerts[0].state: Input should be 'firing' or 'pending'"),
    (with_alert(value=91), "alerts[0].value: Input should be a valid string"),
    (with_alert(value="9" * 5000 + "x"), "alerts[0].value: Value error, not a number"),
    (with_alert(labels={"service": 5}), "alerts[0].labels.service: Input should be a valid string"),
    (with_alert(annotations="heap 91%"), "alerts[0].annotations: Input should be a valid dictionary"),
    (with_alert(activeAt=["yesterday"]), "alerts[0].activeAt: Input should be a valid string"),
    ({"status": "maybe", "data": None}, "a body that is not the API's: body.status: Input should be 'success' or 'error'"),
    ([1, 2], "a body that is not the API's: body: Input should be an object"),
    (httpx.Response(200, text="[" * 100_000), "HTTP 200 and a body that is not JSON"),
    (httpx.Response(200, text=""), "HTTP 200 and a body that is not JSON"),
    (httpx.Response(500, json={"status": "error", "error": "e" * 10_000}), "refused /api/v1/rules: HTTP 500: eee"),
    (httpx.Response(502, json={"unexpected": True}), "refused /api/v1/rules: HTTP 502"),
    (httpx.Response(200, content=gzip.compress(b" " * 20 * 2**20), headers={"Content-Encoding": "gzip"}),
     "with more than 8 MiB, the most an answer may be"),
])
def test_a_rules_answer_that_is_not_the_apis_is_a_source_error_naming_what_was_wrong(body, problem):
    with pytest.raises(SourceError) as raised:
        mocked(body).alerts()
    assert problem in str(raised.value) and len(str(raised.value)) < 2 * MAX_NAME_CHARS + 200


@pytest.mark.parametrize(("labels", "problem"), [
    ({"status": "success", "data": {"order-service": 1}}, "data: Input should be a valid list"),
    ({"status": "success", "data": ["order-service", 5]}, "data[1]: Input should be a valid string"),
    ({"status": "success", "data": [""]}, "data[0]: String should have at least 1 character"),
    ({"status": "success", "data": ["s" * (MAX_NAME_CHARS + 1)]}, "data[0]: String should have at most"),
])
def test_label_values_that_are_not_names_are_a_source_error(labels, problem):
    with pytest.raises(SourceError) as raised:
        mocked(labels=labels).services()
    assert f"/api/v1/label/service/values with data that is not the API's: {problem}" in str(raised.value)


@pytest.mark.parametrize(("matrix", "problem"), [
    ({"status": "success", "data": {"resultType": "vector", "result": []}}, "data.resultType: Input should be 'matrix'"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1]]}]}},
     "data.result[0].values[0][1]: Field required"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "high"]]}]}},
     "data.result[0].values[0][1]: Value error, not a number"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": [], "values": []}]}},
     "data.result[0].metric: Input should be a valid dictionary"),
])
def test_a_range_answer_that_is_not_the_apis_is_a_source_error(matrix, problem):
    source = mocked(matrix=matrix)
    with pytest.raises(SourceError) as raised:
        source.with_samples(source.alerts())
    assert problem in str(raised.value)


def test_the_issues_rules_of_five_fail_the_call_and_the_catalog_names_it(monkeypatch):
    source = mocked({"status": "success", "data": {"groups": [{"name": "g", "rules": 5}]}})
    monkeypatch.setattr("tools.functions.active_sources", lambda: SimpleNamespace(metrics=source))
    monkeypatch.setattr("tools.catalog.active_sources", lambda: SimpleNamespace(
        metrics=source, logs=SimpleNamespace(services=frozenset), synonyms={}))
    result = query_metrics(service="order-service")
    assert result["success"] is False and "data.groups[0].rules: Input should be a valid list" in result["error"]
    assert active_catalog().problems == (f"metrics: {result['error']}",)


def test_an_answer_over_the_cap_is_a_source_error(monkeypatch):
    monkeypatch.setattr("tools.sources.prometheus.MAX_BODY_BYTES", 1000)
    with pytest.raises(SourceError, match="answered /api/v1/rules with more than 1000 bytes, the most an answer may be"):
        mocked(with_alert(annotations={"summary": "x" * 2000})).alerts()


def test_a_long_annotation_is_cut_where_marked_and_the_message_names_it(monkeypatch):
    source = mocked(with_alert(annotations={"summary": "heap " * 20_000, "runbook": "see the wiki"}))
    monkeypatch.setattr("tools.functions.active_sources", lambda: SimpleNamespace(metrics=source))
    found = query_metrics(service="order-service")
    (alert,) = found["alerts"]
    assert alert["annotations"]["summary"].endswith(f" …[cut: {5 * 20_000 - MAX_ITEM_CHARS} more characters]")
    assert alert["annotations"]["runbook"] == "see the wiki" and alert["cut"] == ["annotations.summary"]
    assert "was cut where marked: #0 annotations.summary" in found["message"]


def test_an_alert_whose_ref_would_be_too_long_is_cut_where_marked_and_the_message_says_so(monkeypatch):
    source = mocked(with_alert(annotations={f"note{n}": "heap " * 700 for n in range(4)}))
    monkeypatch.setattr("tools.functions.active_sources", lambda: SimpleNamespace(metrics=source))
    found = query_metrics(service="order-service")
    (alert,) = found["alerts"]
    assert "cut" not in alert and "was cut where marked: #0" in found["message"]
    text = alert_text(alert)
    assert len(text) < MAX_REF_CHARS + 50 and text.endswith(" more characters]")


@pytest.mark.parametrize("case", HOSTILE)
def test_ask_against_a_hostile_prometheus_stores_the_failure_and_never_passes(case, cases, tmp_path, monkeypatch,
                                                                              capsys):
    route, problem = HOSTILE[case]
    lm = good_lm(cases["high_memory_positive"], planner=lambda user: PLAN, executor=cite_the_alert())
    monkeypatch.setattr("program.entry.api.resolve_lm", lambda spec: lm)
    monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_TIMEOUT", "1")
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    with prometheus(route) as server:
        monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_URL", server.url)
        assert cli.main(["--db", db, "ask", QUESTION, "--json", "--no-compiled"]) == 0
    result = DiagnosisResult.model_validate_json(capsys.readouterr().out)
    assert result.verdict in ("LOW_CONFID", "REJECT")
    store = AuditStore(db, read_only=True)
    record = store.get_session(result.session_id)
    assert record.status == "completed"
    unavailable = [n.message for n in record.notes if n.rule == "source.unavailable"]
    assert unavailable and unavailable[0].startswith("metrics: ") and problem in unavailable[0]
    metrics_calls = [i for i in store.list_invocations(result.session_id) if i.tool_name == "query_metrics"]
    assert metrics_calls and all(not i.success and i.retrieval_details.evidence_status == "failed"
                                 for i in metrics_calls)
    assert problem in metrics_calls[0].retrieval_details.message
    assert "未找到" not in json.dumps([i.output for i in metrics_calls], ensure_ascii=False)


def test_a_source_that_breaks_while_the_run_is_set_up_ends_in_a_stored_failed_session(cases, tmp_path, monkeypatch,
                                                                                    capsys):
    def broken(self):
        raise RuntimeError("a bug in a source")

    monkeypatch.setattr("tools.sources.prometheus.Prometheus.services", broken)
    monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_URL", "http://127.0.0.1:9")
    lm = good_lm(cases["high_memory_positive"], planner=lambda user: PLAN, executor=cite_the_alert())
    monkeypatch.setattr("program.entry.api.resolve_lm", lambda spec: lm)
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    # A bug is a failed run (exit 1, one line on stderr), and the JSON result is still printed.
    assert cli.main(["--db", db, "ask", QUESTION, "--json", "--no-compiled"]) == 1
    result = DiagnosisResult.model_validate_json(capsys.readouterr().out)
    assert result.verdict == "LOW_CONFID"
    record = AuditStore(db, read_only=True).get_session(result.session_id)
    assert record.status == "failed"
    assert [(e.rule, e.message) for e in record.errors] == [("pipeline.internal_error", "RuntimeError: a bug in a source")]


@pytest.mark.parametrize(("labels", "problem"), [
    ({"alertname": "HighMemoryUsage", "service": "s" * (MAX_NAME_CHARS + 1)}, "a name may have at most"),
    ({"alertname": "HighMemoryUsage", "service": "order-service", "k" * (MAX_NAME_CHARS + 1): "v"}, "labels"),
    ({"alertname": "HighMemoryUsage", "service": "order-service", "note": "x" * (MAX_ITEM_CHARS + 1)}, "labels"),
])
def test_alert_labels_are_bounded_like_every_name_and_field(labels, problem):
    with prometheus(answer(200, with_alert(labels=labels))) as server:
        with pytest.raises(SourceError, match=problem):
            Prometheus(server.url, timeout=2).alerts()

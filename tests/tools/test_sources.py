"""The sources behind the tools: a log directory, a runbook directory, Prometheus's API without a
server (httpx's mock transport), and settings that cannot be used."""

import json
from types import SimpleNamespace

import httpx
import pytest

from tools import lookup_knowledge, query_logs, query_metrics
from tools.catalog import active_catalog
from tools.sources.errors import SourceError
from tools.sources.prometheus import Prometheus


@pytest.fixture
def log_dir(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    (logs / "order").mkdir(parents=True)
    (logs / "order" / "app.log").write_text(
        "[2026-11-30 10:01:02][ERROR][order-service] HikariPool-1 - Connection is not available, request timed out\n"
        "[2026-11-30 10:01:05][WARNING][order-service] HikariCP pool stats: active=50/50, waiting=12\n"
        "this line is in neither form\n"
        "[2026-11-30 10:02:00][LOUD][order-service] a level nobody uses\n", encoding="utf-8")
    (logs / "billing.jsonl").write_text(
        json.dumps({"time": "2026-11-30T10:03:00Z", "level": "info", "service": "billing-service",
                    "message": "invoice batch 42 done in 8.1s"}) + "\n"
        + json.dumps({"timestamp": "2026-11-30T10:04:00Z", "level": "ERROR", "service": "billing-service",
                      "message": "java.lang.OutOfMemoryError: Java heap space"}) + "\n"
        + "{not json\n", encoding="utf-8")
    (logs / "notes.txt").write_text("[10:00][ERROR][order-service] not a log file by name\n", encoding="utf-8")
    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(logs))
    return logs


def test_a_log_directory_is_searched_with_the_fixtures_synonyms(log_dir):
    result = query_logs("连接池", service="order-service")
    assert result["success"] and [log["level"] for log in result["logs"]] == ["ERROR", "WARN"]
    assert result["source"] == f"log directory {log_dir}"
    assert query_logs("OOM")["logs"][0]["service"] == "billing-service"
    assert query_logs("invoice", level="info")["total"] == 1


def test_every_line_is_searched_whatever_its_form(log_dir):
    # A line in no known form continues the record before it in a file whose records have times.
    (joined,) = query_logs("neither form")["logs"]
    assert joined["message"] == "HikariCP pool stats: active=50/50, waiting=12 | this line is in neither form"
    # A line whose level no format uses is text; its service is then its file's place.
    (loud,) = query_logs("nobody uses")["logs"]
    assert (loud["level"], loud["service"]) == (None, "order")
    assert loud["message"] == "[2026-11-30 10:02:00][LOUD][order-service] a level nobody uses"
    assert query_logs("not json")["total"] == 1
    assert query_logs("not a log file by name")["logs"][0]["source"] == "notes.txt:1"
    assert all(query_logs(q)["unread"] == [] for q in ("HikariCP", "OOM", "nobody uses"))


def test_lines_written_after_a_search_are_found_by_the_next(log_dir):
    assert query_logs("disk full", service="order-service")["total"] == 0
    with (log_dir / "order" / "app.log").open("a", encoding="utf-8") as handle:
        handle.write("[2026-11-30 10:09:00][ERROR][order-service] disk full on /var/log\n")
    assert query_logs("disk full", service="order-service")["total"] == 1


def test_the_catalog_takes_its_services_from_the_log_directory(log_dir):
    assert {"order-service", "billing-service", "order", "notes"} <= set(active_catalog().services)
    unknown = query_logs("HikariCP", service="ghost-service")
    assert unknown["success"] and "'ghost-service' is not a known service" in unknown["message"]
    assert "billing-service" in unknown["message"]


def test_a_missing_log_directory_is_a_failure_not_a_no_hit(tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(tmp_path / "nowhere"))
    result = query_logs("HikariCP")
    assert result["success"] is False and "does not exist" in result["error"]
    assert "logs: log directory" in active_catalog().problems[0]


def test_a_runbook_directory_is_indexed_and_reindexed_when_it_changes(tmp_path, monkeypatch):
    books = tmp_path / "runbooks"
    books.mkdir()
    (books / "kafka.md").write_text("# Kafka\n\n## Consumer lag\nCheck consumer group lag per partition.\n",
                                    encoding="utf-8")
    monkeypatch.setenv("DIAGNOSIS_RUNBOOKS_DIR", str(books))
    found = lookup_knowledge("consumer lag")
    assert found["evidence_blocks"][0]["source"] == "runbooks/kafka.md#consumer-lag"
    assert found["source"] == f"runbook directory {books}"
    assert lookup_knowledge("HikariCP")["evidence_blocks"] == []
    (books / "pool.md").write_text("# Pools\n\n## HikariCP exhausted\nRaise maximumPoolSize only after checking "
                                   "for leaks.\n", encoding="utf-8")
    assert lookup_knowledge("HikariCP")["evidence_blocks"][0]["title"] == "Pools / HikariCP exhausted"


@pytest.mark.parametrize(("setup", "error"), [
    (lambda d: None, "does not exist"),
    (lambda d: d.mkdir(), "no runbooks"),
    (lambda d: (d.mkdir(), (d / "empty.md").write_text("# nothing here\n", encoding="utf-8")), "no '## ' sections"),
])
def test_an_unusable_runbook_directory_is_a_failure(tmp_path, monkeypatch, setup, error):
    books = tmp_path / "runbooks"
    setup(books)
    monkeypatch.setenv("DIAGNOSIS_RUNBOOKS_DIR", str(books))
    result = lookup_knowledge("HikariCP")
    assert result["success"] is False and error in result["error"]


RULES = {"status": "success", "data": {"groups": [{"name": "g", "rules": [
    {"type": "alerting", "name": "HighMemoryUsage", "query": "memory_usage_percent{job=\"app\"} >= 85",
     "alerts": [{"labels": {"alertname": "HighMemoryUsage", "svc": "order-service", "job": "app"},
                 "annotations": {"summary": "heap 91%"}, "state": "firing",
                 "activeAt": "2026-11-30T10:00:00.123456789Z", "value": "9.1e+01"}]},
    {"type": "alerting", "name": "Absent", "query": "absent(up{job=\"app\"})", "alerts": [
        {"labels": {"svc": "order-service"}, "annotations": {}, "state": "pending",
         "activeAt": "2026-11-30T10:05:00Z", "value": "1e+00"}]},
    {"type": "recording", "name": "job:rate", "query": "rate(x[5m])"},
]}]}}
SERIES = {"status": "success", "data": {"resultType": "matrix", "result": [
    {"metric": {"__name__": "memory_usage_percent", "svc": "payment-service", "job": "app"},
     "values": [[1, "40"], [2, "41"]]},
    {"metric": {"__name__": "memory_usage_percent", "svc": "order-service", "job": "app"},
     "values": [[1, "86.2"], [2, "88.6"], [3, "91"]]},
]}}


def _server(handler):
    return Prometheus("http://prometheus.test:9090", service_label="svc", transport=httpx.MockTransport(handler))


def _api(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/api/v1/rules":
        return httpx.Response(200, json=RULES)
    if request.url.path == "/api/v1/query_range":
        assert request.url.params["query"] == 'memory_usage_percent{job="app"}'
        return httpx.Response(200, json=SERIES)
    if request.url.path == "/api/v1/label/svc/values":
        return httpx.Response(200, json={"status": "success", "data": ["order-service", "payment-service"]})
    return httpx.Response(404, json={"status": "error", "error": "not found"})


def test_prometheus_alerts_keep_the_fixture_shape_with_threshold_samples_and_annotations():
    server = _server(_api)
    alerts = server.with_samples([a for a in server.alerts() if a["name"] == "HighMemoryUsage"])
    assert alerts == [{
        "name": "HighMemoryUsage", "state": "firing", "service": "order-service", "current": "91", "threshold": "85",
        "active_since": "2026-11-30T10:00:00Z", "annotations": {"summary": "heap 91%"},
        "expression": 'memory_usage_percent{job="app"} >= 85',
        "labels": {"alertname": "HighMemoryUsage", "job": "app", "svc": "order-service"},
        "samples": ["86.2", "88.6", "91"]}]
    absent = next(a for a in server.alerts() if a["name"] == "Absent")
    assert "threshold" not in absent and absent["state"] == "pending"
    assert server.alert_names() == ("Absent", "HighMemoryUsage")
    assert server.services() == ("order-service", "payment-service")


@pytest.mark.parametrize(("handler", "error"), [
    (lambda r: httpx.Response(503, text="upstream down"), "HTTP 503 and a body that is not JSON"),
    (lambda r: httpx.Response(400, json={"status": "error", "error": "bad query"}), "refused /api/v1/rules: HTTP 400: bad query"),
    (lambda r: httpx.Response(200, json={"status": "success", "data": {"groups": "x"}}),
     "answered /api/v1/rules with data that is not the API's: data.groups: Input should be a valid list"),
    (lambda r: (_ for _ in ()).throw(httpx.ConnectError("connection refused")), "could not be reached"),
    (lambda r: (_ for _ in ()).throw(httpx.ReadTimeout("slow")), "timed out"),
])
def test_a_prometheus_that_cannot_answer_raises_a_clear_source_error(handler, error):
    with pytest.raises(SourceError, match=error.replace("(", r"\(")):
        _server(handler).alerts()


def test_query_metrics_on_an_unreachable_prometheus_fails_and_never_says_no_hit(monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_TIMEOUT", "2")
    result = query_metrics(service="order-service")
    assert result["success"] is False and "could not be reached" in result["error"]
    assert result["source"] == "prometheus http://127.0.0.1:9" and "未找到" not in json.dumps(result, ensure_ascii=False)
    catalog = active_catalog()
    assert catalog.alert_names == () and catalog.problems and catalog.problems[0].startswith("metrics: ")


@pytest.mark.parametrize(("name", "value", "error"), [
    ("DIAGNOSIS_PROMETHEUS_TIMEOUT", "soon", "must be a positive number of seconds"),
    ("DIAGNOSIS_PROMETHEUS_TIMEOUT", "-1", "must be a positive number of seconds"),
    ("DIAGNOSIS_PROMETHEUS_URL", "127.0.0.1:9090", "must be an http:// or https:// URL"),
])
def test_a_bad_setting_fails_every_tool_with_its_name(monkeypatch, name, value, error):
    if name != "DIAGNOSIS_PROMETHEUS_URL":
        monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_URL", "http://127.0.0.1:9")
    monkeypatch.setenv(name, value)
    for result in (query_metrics(), query_logs("HikariCP"), lookup_knowledge("HikariCP")):
        assert result["success"] is False and name in result["error"] and error in result["error"]
    assert active_catalog().problems


def test_the_fixture_state_names_are_refused_by_prometheus(monkeypatch):
    monkeypatch.setattr("tools.sources.prometheus.Prometheus.alerts", lambda self: pytest.fail("must not be asked"))
    monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_URL", "http://127.0.0.1:9")
    result = query_metrics(state="resolved")
    assert result["success"] is False and "'firing' or 'pending'" in result["error"]


def test_a_busy_prometheus_returns_at_most_fifty_alerts_and_says_how_many_matched(monkeypatch):
    many = [{"type": "alerting", "name": "Busy", "query": "x > 1", "alerts": [
        {"labels": {"service": f"svc-{n:03d}"}, "annotations": {}, "state": "firing",
         "activeAt": "2026-11-30T10:00:00Z", "value": "2"} for n in range(120)]}]

    def api(request):
        if request.url.path == "/api/v1/rules":
            return httpx.Response(200, json={"status": "success", "data": {"groups": [{"rules": many}]}})
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": []}})

    server = _server(api)
    server.service_label = "service"
    monkeypatch.setattr("tools.functions.active_sources", lambda: SimpleNamespace(metrics=server))
    result = query_metrics(alert_name="Busy")
    assert len(result["alerts"]) == 50 and result["total"] == 120
    assert result["message"] == "120 alert(s) found, the first 50 returned"

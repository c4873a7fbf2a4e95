"""query_logs over logs the real programs wrote (tests/support/real_logs.py: nginx, PostgreSQL,
rsyslog, logrotate, Java, CPython, Prometheus, and the documented Docker, Kubernetes and JSON
logger formats): every fact the writers recorded is found under the service it belongs to, with
its level on the one scale, and a search over this directory reads everything in its scope."""

import pytest

from tools import query_logs
from tools.catalog import active_catalog


@pytest.fixture
def logs(real_logs, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(real_logs.root))
    return real_logs


def facts(logs, *paths):
    return [logs.entry(path)["facts"] for path in paths]


def found(query, service, level=None):
    result = query_logs(query, service=service, level=level, limit=200)
    assert result["success"] and result["unread"] == [], result
    return result


ACCESS = ("api-gateway/access.log", "api-gateway/access.log.1", "api-gateway/access.log.2.gz")
ERRORS = ("api-gateway/error.log", "api-gateway/error.log.1", "api-gateway/error.log.2.gz")


def test_every_502_nginx_wrote_is_found_as_an_error_of_api_gateway_rotated_files_included(logs):
    expected = sum(f["statuses"].get("502", 0) for f in facts(logs, *ACCESS))
    result = found("502", "api-gateway")
    assert expected == 7 and result["total"] == expected
    assert {r["level"] for r in result["logs"]} == {"ERROR"}
    assert logs.entry("api-gateway/access.log")["facts"]["lines"]["502"] in [r["message"] for r in result["logs"]]
    assert found("", "api-gateway", level="ERROR")["total"] >= expected


def test_every_refused_upstream_connection_is_found(logs):
    expected = sum(f["connection_refused"] for f in facts(logs, *ERRORS))
    result = found("connection refused", "api-gateway")
    assert result["total"] == expected == 7
    refused = logs.entry("api-gateway/error.log")["facts"]["refused_line"]
    assert any(refused.endswith(r["message"]) for r in result["logs"])


def test_postgresql_refusing_clients_over_max_connections_is_found_in_orders_db(logs):
    (fact,) = facts(logs, "orders-db/postgresql.log")
    result = found("too many clients", "orders-db")
    assert result["total"] == fact["too_many_clients_lines"] == fact["refused"] == 3
    assert all(r["message"] == "FATAL:  sorry, too many clients already" and r["level"] == "ERROR"
               for r in result["logs"])


def test_postgresql_detail_and_statement_lines_are_one_record(logs):
    (record,) = found("duplicate key", "orders-db")["logs"]
    assert "DETAIL:" in record["message"] and "STATEMENT:" in record["message"]


def test_a_deadlock_is_found_in_each_of_postgresqls_three_log_forms(logs):
    result = found("deadlock detected", "inventory-db")
    assert sorted(r["format"] for r in result["logs"]) == ["json", "postgresql", "postgresql csvlog"]
    assert all(r["level"] == "ERROR" for r in result["logs"])


def test_syslog_lines_belong_to_the_service_their_tag_names(logs):
    sent = [m for f in facts(logs, "syslog", "syslog.1", "syslog.2.gz", "syslog5424.log") for m in f["messages"]
            if m["tag"] == "payment-service"]
    result = found("charge", "payment-service")
    messages = " | ".join(r["message"] for r in result["logs"])
    assert all(m["text"].split(":")[0] in messages for m in sent)
    errors = [r for r in result["logs"] if r["format"] == "syslog rfc5424" and r["level"] == "ERROR"]
    assert errors, "RFC 5424 lines carry their priority"


@pytest.mark.parametrize(("service", "query", "fact"), [
    ("inventory-service", "SQLTransientConnectionException", "severe_line"),
    ("notification-service", "ConnectionRefusedError", "error_line"),
])
def test_a_stack_trace_is_found_with_the_line_it_follows(logs, service, query, fact):
    path = {"inventory-service": "inventory-service/inventory.log",
            "notification-service": "notification-service/worker.log"}[service]
    (record,) = found(query, service)["logs"]
    assert record["message"].startswith(logs.entry(path)["facts"][fact]) and record["level"] == "ERROR"


def test_container_logs_are_their_workloads_with_partial_entries_joined(logs):
    (panic,) = found("nil pointer dereference", "orders")["logs"]
    assert panic["format"] == "kubernetes cri" and panic["message"].startswith("panic: runtime error")
    # Each line a runtime stamps is a record; an indented one (a stack frame) joins the line it follows.
    (frame,) = [r for r in found("Reserve", "orders")["logs"] if r["message"].startswith("main.(*Store).Reserve")]
    assert "/app/store.go:42" in frame["message"]
    stock = [r for r in found("too many clients", "orders")["logs"] if "could not reserve stock" in r["message"]]
    assert stock and stock[0]["level"] == "ERROR"
    docker = found("card-processor returned 503", "payment-service")["logs"]
    assert [r["format"] for r in docker] == ["docker json-file"] and docker[0]["level"] == "ERROR"


@pytest.mark.parametrize(("service", "path"), [
    ("user-service", "user-service/app.json"), ("cart-service", "cart-service/cart.json"),
    ("pricing", "pricing/pricing.json"), ("recommendations", "recommendations/app.json"),
    ("search-service", "search-service/search.json"),
])
def test_each_json_loggers_error_is_an_error_of_its_service(logs, service, path):
    message = logs.entry(path)["facts"]["error_message"]
    (record,) = [r for r in found(message, service)["logs"] if r["message"] == message]
    assert record["level"] == "ERROR"


def test_prometheus_logfmt_error_is_found(logs):
    (record,) = found("Error reloading config", "prometheus")["logs"]
    assert (record["format"], record["level"]) == ("logfmt", "ERROR")


def test_true_negatives_read_everything_they_say_nothing_about(logs):
    assert found("502", "static-site")["total"] == 0
    assert found("too many clients", "inventory-db")["total"] == 0


def test_the_catalog_knows_the_services_of_lines_and_places(logs):
    services = set(active_catalog().services)
    assert {"api-gateway", "orders-db", "inventory-db", "orders", "payment-service", "static-site",
            "order-service", "sshd", "prometheus"} <= services

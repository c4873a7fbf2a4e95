import pytest

from tools import lookup_knowledge, query_logs, query_metrics

HIKARI_SYNONYMS = [
    "HikariCP", "HikariPool", "connection pool", "数据库连接池", "连接池耗尽", "active=50/50", "waiting",
    "request timed out after 30000ms",
]


@pytest.mark.parametrize("term", HIKARI_SYNONYMS)
@pytest.mark.parametrize("case", [str, str.upper, str.lower])
def test_every_hikari_synonym_hits_the_order_service_pool_logs(term, case):
    result = query_logs(case(term), service="order-service")
    assert result["success"] is True
    messages = [log["message"] for log in result["logs"]]
    assert any(m.startswith("HikariPool-1 - Connection is not available") for m in messages)
    assert any(m.startswith("HikariCP pool stats: active=50/50") for m in messages)
    assert {log["service"] for log in result["logs"]} == {"order-service"}


def test_service_name_in_the_query_also_hits_the_pool_logs():
    result = query_logs("order-service HikariCP")
    assert [log["service"] for log in result["logs"]] == ["order-service", "order-service"]


def test_no_hit_is_a_success_with_an_echo_and_no_placeholder():
    result = query_logs("HikariCP", service="inventory-service")
    assert result["success"] is True and result["logs"] == [] and result["total"] == 0
    assert "HikariCP" in result["message"] and "inventory-service" in result["message"]
    assert "generic-service" not in str(result)


def test_service_filter_is_exact():
    assert query_logs("内存", service="order-service")["total"] == 6
    prefix = query_logs("内存", service="order")
    assert prefix["success"] is True and prefix["logs"] == [] and prefix["total"] == 0
    assert "'order' is not a known service" in prefix["message"] and "order-service" in prefix["message"]


def test_a_service_that_does_not_exist_is_a_no_hit_not_a_failure(recorder):
    for tool, kwargs in (("query_logs", {"query": "HikariCP"}), ("query_metrics", {})):
        invocation = recorder.call(tool, service="ghost-service", **kwargs)
        assert invocation.success and invocation.retrieval_details.evidence_status == "no_evidence"
        assert "ghost-service" in invocation.retrieval_details.message


def test_level_filter_and_alias():
    result = query_logs("HikariCP", level="warning")
    assert [log["level"] for log in result["logs"]] == ["WARN"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"query": 5}, "query must be a string"),
        ({"query": "x", "limit": 0}, "limit must be an integer"),
        ({"query": "x", "limit": True}, "limit must be an integer"),
        ({"query": "x", "level": "LOUD"}, "level must be one of"),
        ({"query": "日志"}, "names nothing to search for"),
    ],
)
def test_bad_log_arguments_fail_clearly(kwargs, error):
    result = query_logs(**kwargs)
    assert result["success"] is False and error in result["error"] and result["logs"] == []


def test_limit_keeps_the_best_matches():
    result = query_logs("order 123", limit=2)
    assert result["total"] >= 4 and len(result["logs"]) == 2
    assert all("123" in log["message"] for log in result["logs"])


def test_query_metrics_filters_and_no_hit():
    alerts = query_metrics(service="payment-service")["alerts"]
    assert [a["name"] for a in alerts] == ["HighCPUUsage"]
    both = query_metrics(alert_name="highmemoryusage")
    assert {a["service"] for a in both["alerts"]} == {"order-service", "user-service"}
    firing = query_metrics(alert_name="HighMemoryUsage", state="firing")
    assert [a["service"] for a in firing["alerts"]] == ["order-service"]
    none = query_metrics(service="inventory-service", alert_name="HighCPUUsage")
    assert none["success"] is True and none["alerts"] == [] and "HighCPUUsage" in none["message"]
    assert query_metrics(state="pending")["success"] is False


@pytest.mark.parametrize(
    ("query", "source"),
    [
        ("HikariCP 连接池耗尽", "connection_pool.md"),
        ("JVM 堆内存 Full GC", "high_memory.md"),
        ("P99 slow request", "slow_response.md"),
        ("CPU load average", "high_cpu.md"),
    ],
)
def test_lookup_knowledge_ranks_the_matching_runbook_first(query, source):
    blocks = lookup_knowledge(query)["evidence_blocks"]
    assert blocks and blocks[0]["source"].startswith(f"runbooks/{source}")
    assert blocks == sorted(blocks, key=lambda b: -b["score"])


def test_lookup_knowledge_no_hit_and_bad_arguments():
    assert lookup_knowledge("kubernetes etcd quorum")["evidence_blocks"] == []
    assert lookup_knowledge("")["success"] is False
    assert lookup_knowledge("cpu", top_k=0)["success"] is False

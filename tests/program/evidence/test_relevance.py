"""What a question asks about, read against the active catalog."""

import pytest

from program.evidence.relevance import off_topic, question_target
from tools.catalog import active_catalog


@pytest.mark.parametrize(("question", "services", "topic", "alerts"), [
    ("确认 notification-service 是否出现 OutOfMemoryError 日志", ("notification-service",), "oom", ()),
    ("只确认 order-service 是否存在 HighMemoryUsage 告警", ("order-service",), "highmemoryusage", ("HighMemoryUsage",)),
    ("只确认 payment-service 的 CPU，不要分析内存、OOM 或 user-service。", ("payment-service",), "highcpuusage", ()),
])
def test_the_target_leaves_out_exclusions_and_terms_inside_longer_terms(question, services, topic, alerts):
    target = question_target(question, active_catalog())
    assert target.services == services and [g[0] for g in target.topics] == [topic] and target.alerts == alerts


def test_a_claim_beside_the_question_is_off_topic():
    target = question_target("确认 order-service 是否存在 HikariCP 连接池耗尽。", active_catalog())
    slow_query = "SlowQuery firing, service=inventory-service, current=2300ms"
    assert "does not concern hikaricp" in off_topic("order-service 存在 SlowQuery 告警", [slow_query], target)
    assert "does not name order-service" in off_topic("order-service 连接池耗尽", [slow_query], target)
    pool = "[11:20][WARN][order-service] HikariCP pool stats: active=50/50, idle=0, waiting=32"
    assert off_topic("order-service 存在 HikariCP 连接池耗尽日志", [pool], target) is None
    assert "does not concern" in off_topic("order-service 存在慢查询", [pool], target)

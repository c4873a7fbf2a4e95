"""What a question asks about, read against the active catalog."""

import pytest

from program.evidence.relevance import off_topic, question_target, unanswered
from contracts import RetrievalDetails, ToolInvocation
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


def test_an_alert_name_belongs_to_the_topic_whose_terms_it_spells():
    groups = active_catalog().topic_groups()
    (oom,) = [g for g in groups if "podoomkilled" in g]
    assert {"oom", "oomkilled", "outofmemoryerror"} <= set(oom)
    assert not any(g == ("podoomkilled",) for g in groups)


def test_a_weaker_citation_beside_the_strongest_does_not_sink_the_claim():
    target = question_target("只确认 notification-service 是否存在 PodOOMKilled 告警", active_catalog())
    alert = ("PodOOMKilled firing, service=notification-service, current=3; Container OOMKilled 3 times: "
             "java.lang.OutOfMemoryError: Java heap space (limit 1GB)")
    heap = "[10:58][ERROR][notification-service] java.lang.OutOfMemoryError: Java heap space at TemplateRenderer.render"
    restart = "[11:17][WARN][notification-service] Container notification-service OOMKilled, restart count 3"
    deploy = "[09:00][INFO][notification-service] deploy v1.2.0 finished"
    claim = "notification-service 存在 PodOOMKilled 告警（firing），重启次数 3 次"
    assert off_topic(claim, [alert, heap, restart], target) is None
    assert off_topic(claim, [alert, deploy], target) is None  # the alert proves it; the deploy line adds nothing
    assert "no cited evidence concerns" in off_topic(claim, [deploy], target)
    other = "[11:20][WARN][order-service] Container order-service OOMKilled, restart count 1"
    assert "does not name notification-service" in off_topic(claim, [alert, other], target)


@pytest.mark.parametrize("question", [
    "只确认 order-service 是否有 HikariCP 连接池耗尽日志，不要看连接池告警",
    "Only confirm whether order-service logged OutOfMemoryError; do not analyse memory.",
])
def test_an_exclusion_that_would_empty_the_target_leaves_it_whole_so_an_off_topic_claim_is_still_off_topic(question):
    """Both exclusions spell out terms of the very topic asked about. Read into the target, they
    would leave no topic, and a claim about anything on the service would be on topic."""
    from program.evidence.scope import read_scope

    catalog = active_catalog()
    asked = question_target(question, catalog)
    target = asked.without(read_scope(question, catalog).exclusion)
    assert asked.topics and target.topics == asked.topics
    slow = "[10:01][WARN][order-service] Slow query on orders table: 2300ms"
    assert "does not concern" in off_topic("order-service 存在慢查询日志：Slow query 2300ms", [slow], target)


def test_a_quoted_value_names_a_name_only_whole():
    catalog = active_catalog()
    whole = question_target('Only confirm whether "order-service" has the "HighMemoryUsage" alert', catalog)
    assert (whole.services, whole.alerts, whole.unknown) == (("order-service",), ("HighMemoryUsage",), ())
    assert [g[0] for g in whole.topics] == ["highmemoryusage"]
    spelled = question_target('Only confirm whether "order-service\\\\" has the "HighMemoryUsage" alert', catalog)
    assert (spelled.services, spelled.unknown) == ((), ("order-service\\",))
    # Outside quotes the asker's words are read as before.
    assert question_target("只确认 order-service 是否存在 HighMemoryUsage 告警", catalog).services == ("order-service",)


def test_a_quoted_value_that_names_nothing_must_be_held_whole_by_the_evidence():
    target = question_target('order-service 的日志里有没有 "connect to orders-db refused"', active_catalog())
    assert target.services == ("order-service",) and target.unknown == ("connect to orders-db refused",)
    line = "[11:20][ERROR][order-service] connect to orders-db refused (attempt 3)"
    assert off_topic("order-service 有 connect to orders-db refused 的日志", [line], target) is None
    other = "[11:20][ERROR][order-service] connect to orders-db timed out"
    assert "no cited evidence holds it whole" in off_topic("order-service 有 connect to orders-db 的日志", [other], target)


def _call(number: int, tool: str, found: bool, unread: tuple[str, ...] = (), **arguments) -> ToolInvocation:
    details = RetrievalDetails(evidence_status="supported" if found else "no_evidence", unread=list(unread),
                               message="" if found else "未找到匹配的日志")
    return ToolInvocation(id=number, session_id="s", tool_name=tool, input=arguments, retrieval_details=details)


MIXED = "只确认 cart-service 是否有 HighErrorRate 告警在触发，以及日志中是否有 OutOfMemoryError。"
ALERT = "HighErrorRate firing, service=cart-service, current=6.8%"
CALLS = [_call(1, "query_metrics", True, service="cart-service", alert_name="HighErrorRate"),
         _call(2, "query_logs", False, query="OutOfMemoryError", service="cart-service")]


def test_an_asked_thing_a_search_found_nothing_of_is_unanswered_until_a_claim_speaks_of_it():
    target = question_target(MIXED, active_catalog())
    (left,) = unanswered(["cart-service 的 HighErrorRate 告警正在触发：current=6.8%。", ALERT], CALLS, target)
    assert (left.label, left.call) == ("#2 no-hit", "query_logs(query='OutOfMemoryError', service='cart-service')")
    assert left.asked.casefold() in {t.casefold() for group in target.topics for t in group}
    # Said in the claims' own words, or by citing the no-hit (its call names what it searched).
    assert unanswered(["cart-service 日志中没有 OutOfMemoryError。", ALERT], CALLS, target) == []
    assert unanswered([ALERT, "未找到匹配的日志", "query_logs(query='OutOfMemoryError', service='cart-service')"],
                      CALLS, target) == []


def test_no_unanswered_search_where_the_no_hit_is_set_aside_left_lines_unread_or_searched_for_nothing_asked():
    target = question_target(MIXED, active_catalog())
    assert unanswered([ALERT], CALLS, target, frozenset({"#2 no-hit"})) == []
    unread = [CALLS[0], _call(2, "query_logs", False, unread=("/var/log/app.log.gz",), query="OutOfMemoryError",
                              service="cart-service")]
    assert unanswered([ALERT], unread, target) == []
    other = [CALLS[0], _call(2, "query_logs", False, query="disk full", service="cart-service")]
    assert unanswered([ALERT], other, target) == []
    # An alert the question names, looked up and not found, is asked about as much as a topic.
    absent = [_call(1, "query_metrics", False, service="cart-service", alert_name="HighErrorRate"), CALLS[1]]
    assert [u.asked for u in unanswered(["cart-service 日志中没有 OutOfMemoryError。"], absent, target)] == ["HighErrorRate"]

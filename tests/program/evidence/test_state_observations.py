"""A state is an observation: "X is not firing", "X has recovered", "X is still firing", citing the
alert whose state says so, observe that state. No rule that reads a negation takes a denied state
for "nothing was found" or for a claim's opposite; the state itself is checked against the alert
(verdict.state_conflict). Issue: the checks as DSPy assertions."""

import pytest

from program.evidence.answer import contradicting_sentences
from program.evidence.relevance import Target
from program.evidence.numbers import misbound_numbers, quantities, ungrounded_numbers
from program.evidence.statements import NEGATION, outside_state_denials
from program.evidence.absence import ABSENCE
from program.evidence.verdict import CitedRef, claim_blockers, code_sees_support
from contracts import Claim

RESOLVED = "HighErrorRate resolved, service=api-gateway, current=0.4%, threshold=5%, duration=5m"
FIRING = "HighCPUUsage firing, service=payment-service, current=92%, threshold=80%, duration=12m"
NAMES = ("api-gateway", "payment-service", "HighErrorRate", "HighCPUUsage", "firing", "resolved")


def claim(text: str, excerpt: str) -> Claim:
    return Claim(claim_id="c1", claim_type="observation", claim_text=text, evidence_bindings=[
        {"tool_name": "query_metrics", "source_invocation_id": 1, "raw_path": "$.alerts[0]", "evidence_excerpt": excerpt}])


def cited(text: str, state: str) -> dict[str, list[CitedRef]]:
    return {"c1": [CitedRef(tool_name="query_metrics", text=text, context=text, state=state, no_hit=False,
                            searched="query_metrics()", backfilled=False, indirect=False)]}


def rules(text: str, ref: str, state: str, service: str, alert: str) -> set[str]:
    target = Target(services=(service,), topics=((alert.casefold(),),), alerts=(alert,))
    found = claim_blockers([claim(text, ref)], cited(ref, state), target, names=NAMES)
    return {f.rule for f in found.get("c1", [])}


@pytest.mark.parametrize("text", [
    "api-gateway 现在没有 HighErrorRate 告警在触发。",
    "api-gateway 的 HighErrorRate 告警已经不再触发",
    "api-gateway 的 HighErrorRate 告警没有在触发，已恢复",
    "HighErrorRate on api-gateway is not firing",
    "There is no firing HighErrorRate alert on api-gateway",
    "api-gateway's HighErrorRate alert is no longer firing; it has recovered",
    "api-gateway has not had a HighErrorRate alert firing since it resolved",
])
def test_a_denied_state_of_a_resolved_alert_is_an_observation(text):
    assert rules(text, RESOLVED, "resolved", "api-gateway", "HighErrorRate") == set()


@pytest.mark.parametrize("text", [
    "payment-service 的 HighCPUUsage 告警没有恢复，仍在触发",
    "payment-service 的 HighCPUUsage 告警尚未恢复",
    "HighCPUUsage on payment-service has not recovered and is still firing",
    "payment-service 的 HighCPUUsage 告警仍在触发",
])
def test_a_firing_alert_said_to_fire_or_not_to_have_recovered_is_an_observation(text):
    assert rules(text, FIRING, "firing", "payment-service", "HighCPUUsage") == set()


@pytest.mark.parametrize("text", [
    "payment-service 现在没有 HighCPUUsage 告警在触发",
    "HighCPUUsage on payment-service is not firing any more",
    "payment-service 的 HighCPUUsage 告警已经恢复了",
])
def test_a_state_the_alert_does_not_show_is_a_state_conflict_not_an_absence(text):
    assert rules(text, FIRING, "firing", "payment-service", "HighCPUUsage") == {"verdict.state_conflict"}


@pytest.mark.parametrize("text", [
    "未找到 api-gateway 的 HighErrorRate 告警",
    "No HighErrorRate alert was found for api-gateway",
    "api-gateway 的 HighErrorRate 告警已恢复，未发现相关错误日志",
])
def test_nothing_found_beside_what_was_found_is_still_an_absence(text):
    assert "verdict.absence_on_hit" in rules(text, RESOLVED, "resolved", "api-gateway", "HighErrorRate")


def test_only_the_negation_of_a_state_is_set_aside():
    assert not outside_state_denials(ABSENCE, "api-gateway 现在没有 HighErrorRate 告警在触发", NAMES)
    assert outside_state_denials(ABSENCE, "没有找到日志，api-gateway 的 HighErrorRate 告警没有在触发", NAMES)
    assert outside_state_denials(NEGATION, "Connection is not available", NAMES)
    # A state word in a sentence that speaks of no alert is not read as one.
    assert outside_state_denials(NEGATION, "the job is not pending", ())


def test_code_sees_support_for_a_denied_state_as_for_the_state_itself():
    """A verifier's "contradicted" on "not firing" of a resolved alert is a disagreement, not a REJECT."""
    assert code_sees_support(claim("api-gateway 的 HighErrorRate 告警没有在触发，current=0.4%", RESOLVED), [RESOLVED],
                             NAMES)
    assert not code_sees_support(claim("api-gateway 的 HighErrorRate 告警没有 current=0.4%", RESOLVED), [RESOLVED],
                                 NAMES)


def test_a_composed_answer_that_says_a_resolved_alert_is_not_firing_is_not_a_contradiction():
    verified = [claim("api-gateway 的 HighErrorRate 告警已恢复（resolved）", RESOLVED)]
    answer = "api-gateway 的 HighErrorRate 告警目前没有在触发，错误率为 0.4%。"
    assert contradicting_sentences(answer, verified, NAMES, cited(RESOLVED, "resolved")) == []
    firing = [claim("payment-service 的 HighCPUUsage 告警正在触发", FIRING)]
    said = "payment-service 的 HighCPUUsage 告警目前没有在触发。"
    assert contradicting_sentences(said, firing, NAMES, cited(FIRING, "firing")) == [said.rstrip("。")]


SLOW = ("SlowResponse firing, service=user-service, current=P99=4.2s, threshold=P99>2s, duration=10m; "
        "P99 latency 4.2s on /api/v1/users/profile and /api/v1/users/orders")
POOL = "[11:20][ERROR][order-service] HikariPool-1 - Connection is not available, request timed out after 30000ms"


def test_a_value_reads_through_the_comparison_inside_it():
    """The 1.5B's honest "阈值为 2s" of threshold=P99>2s (results/bench-20261201T235956Z) was read as
    said of "P99", the value cut at ">"; "current 2s" stays a number said of another field."""
    assert misbound_numbers("user-service 的 SlowResponse 未清除，当前 P99 为 4.2s，阈值为 2s，持续时间为 10m。", [SLOW]) == []
    assert misbound_numbers("user-service 的 SlowResponse 告警当前 2s", [SLOW]) == ["2s (the evidence gives current as P99=4.2s)"]


def test_a_unit_before_a_chinese_word_is_a_unit():
    """"30 秒内" is 30 seconds, which 30000ms grounds (results/bench-20261201T235956Z, pool_ran_dry_en)."""
    assert ungrounded_numbers("order-service 的连接池在 30 秒内未获取到连接，请求超时。", [POOL]) == []
    assert ungrounded_numbers("order-service 的连接池在 20 秒内未获取到连接", [POOL]) == ["20 秒"]
    assert [q.unit for q in quantities("15 minutes, 5 mins, 3MB")] == ["minutes", "mins", "MB"]


HEALTHY_POOL = "[11:20][INFO][checkout-service] HikariCP pool stats: active=6/30, idle=24, waiting=0"


@pytest.mark.parametrize("text", [
    "checkout-service 的连接池没有耗尽：active=6/30, waiting=0。",
    "checkout-service 的 HikariCP 连接池未耗尽，active=6/30, waiting=0",
    "checkout-service's connection pool is not exhausted: active=6/30, waiting=0.",
    # The negation reaches its own predicate, not a verb of finding further on.
    "checkout-service's connection pool is not exhausted: HikariCP pool stats show active=6/30, waiting=0.",
    "checkout-service's connection pool is not exhausted as seen from active=6/30, waiting=0",
    "checkout-service 的连接池未耗尽，但发现 active=6/30",
    "checkout-service's connection pool does not appear to be exhausted: active=6/30, waiting=0",
])
def test_a_denied_state_that_a_found_line_shows_is_an_observation_not_an_absence(text):
    """The healthy pool line answers "is the pool exhausted?" with "no": what the line shows, which the
    verifier judges against it; no absence of anything is claimed."""
    target = Target(services=("checkout-service",), topics=(("hikaricp", "连接池", "connection pool"),))
    found = claim_blockers([claim(text, HEALTHY_POOL)], {"c1": [CitedRef(
        tool_name="query_logs", text=HEALTHY_POOL, context=HEALTHY_POOL, state=None, no_hit=False, searched="query_logs()",
        backfilled=False, indirect=False)]}, target, names=("checkout-service",))
    assert "verdict.absence_on_hit" not in {f.rule for f in found.get("c1", [])}


@pytest.mark.parametrize("text", [
    "checkout-service 没有连接池耗尽的日志",
    "checkout-service 没有 5xx 错误",
    "checkout-service 日志中没有任何连接池错误",
    "checkout-service has no 5xx errors",
    "No pool exhaustion was found in checkout-service logs",
    # Whatever stands between the negation and its verb of finding: a place, an auxiliary, or the
    # negation inside the verb (a potential form).
    "未在 checkout-service 的日志中找到连接池耗尽",
    "checkout-service 的日志里找不到连接池耗尽",
    "checkout-service 查不到相关记录",
    "We could not find any pool exhaustion in checkout-service logs",
    "Pool exhaustion has not been found in checkout-service logs",
    "Pool exhaustion did not occur in checkout-service",
    "Failed to find pool exhaustion in checkout-service logs",
    "checkout-service was not able to find any pool exhaustion",
    # An adverb between the negation and its verb; a record as the place of what is denied.
    "checkout-service 的日志没有再发现连接池耗尽",
    "checkout-service 未曾出现连接池耗尽",
    "checkout-service 的日志中没有连接池耗尽",
    "None of the checkout-service log lines mention pool exhaustion",
    "There were no pool exhaustion lines in checkout-service",
    "There aren't any pool exhaustion lines in checkout-service",
])
def test_a_denied_existence_resting_on_a_found_line_is_still_an_absence(text):
    assert outside_state_denials(ABSENCE, text, ("checkout-service",))


@pytest.mark.parametrize(("text", "line"), [
    ("checkout-service 的 GET /api/cart returned 404 Not Found", "[11:20][WARN][checkout-service] GET /api/cart 404 Not Found"),
    ("checkout-service DNS 解析失败：找不到主机 db-01", "[11:20][ERROR][checkout-service] DNS 解析失败：找不到主机 db-01"),
    ("HikariPool-1 could not find an idle connection in checkout-service",
     "[11:20][ERROR][checkout-service] HikariPool-1 could not find an idle connection"),
])
def test_words_of_absence_the_cited_line_says_too_are_quoted_not_the_claim_s_own(text, line):
    target = Target(services=("checkout-service",), topics=())
    ref = CitedRef(tool_name="query_logs", text=line, context=line, state=None, no_hit=False, searched="query_logs()",
                   backfilled=False, indirect=False)
    found = claim_blockers([claim(text, line)], {"c1": [ref]}, target, names=("checkout-service",))
    assert "verdict.absence_on_hit" not in {f.rule for f in found.get("c1", [])}
    # The same words, not in the line it cites, are the claim's own "nothing found".
    other = "[11:20][INFO][checkout-service] HikariCP pool stats: active=6/30, idle=24, waiting=0"
    found = claim_blockers([claim(text, other)], {"c1": [CitedRef(
        tool_name="query_logs", text=other, context=other, state=None, no_hit=False, searched="query_logs()",
        backfilled=False, indirect=False)]}, target, names=("checkout-service",))
    assert "verdict.absence_on_hit" in {f.rule for f in found.get("c1", [])}


@pytest.mark.parametrize(("text", "line"), [
    # The cited line holds the words of absence, but not as the claim says them.
    ("Connection pool exhaustion was not found in checkout-service logs", "GET /api/cart/999 404 Not Found"),
    ("checkout-service 日志中未发现连接池耗尽", "[11:20][INFO][checkout-service] 自检完成，未发现异常"),
    ("There is no connection pool exhaustion in checkout-service", "there is no pending migration"),
])
def test_a_line_that_holds_the_words_elsewhere_quotes_nothing(text, line):
    target = Target(services=("checkout-service",), topics=())
    ref = CitedRef(tool_name="query_logs", text=line, context=line, state=None, no_hit=False, searched="query_logs()",
                   backfilled=False, indirect=False)
    found = claim_blockers([claim(text, line)], {"c1": [ref]}, target, names=("checkout-service",))
    assert "verdict.absence_on_hit" in {f.rule for f in found.get("c1", [])}


@pytest.mark.parametrize("text", [
    "checkout-service 的错误没有减少，error_rate=12%",
    "checkout-service 缓存未命中率为 40%",
    "None of the checkout-service requests succeeded: 503",
    "checkout-service requests with no token returned 401",
])
def test_what_a_found_line_shows_of_a_count_or_an_outcome_is_no_absence(text):
    assert not outside_state_denials(ABSENCE, text, ("checkout-service",))

"""The verdict table of the design document, and the code checks that no verifier can override."""

import pytest

from program.evidence.relevance import Target
from program.evidence.scope import Exclusion
from program.evidence.verdict import (
    CitedRef,
    claim_blockers,
    code_sees_support,
    enforce,
)
from contracts import (
    CheckedBinding,
    Claim,
    ClaimJudgement,
    Finding,
    GatekeeperResult,
)

ALERT = "HighMemoryUsage firing, service=order-service, current=91%, threshold=85%, duration=15m"
CLAIM = Claim(claim_id="c1", claim_type="observation", claim_text="order-service 存在 HighMemoryUsage 告警，current=91%",
              evidence_bindings=[{"tool_name": "query_metrics", "source_invocation_id": 1, "raw_path": "$.alerts[0]",
                                  "evidence_excerpt": ALERT}])
TARGET = Target(services=("order-service",), topics=(("highmemoryusage", "memory", "内存"),))


def gate(severity: str) -> GatekeeperResult:
    status = "pass" if severity == "none" else "fail"
    binding_status = "fail" if severity == "reject" else "pass"
    errors = [] if severity == "none" else [Finding(rule="evidence.x", message="m")]
    return GatekeeperResult(status=status, severity=severity, errors=errors, failed_rules=[e.rule for e in errors],
                            checked_bindings=[CheckedBinding(claim_id="c1", binding_index=0, tool_name="query_metrics",
                                                             status=binding_status, context=ALERT, severity="reject" if severity == "reject" else "none")])


def judged(judgement):
    if judgement is None:
        return {}
    return {"c1": ClaimJudgement(claim_id="c1", verdict="PASS", judgement=judgement, reason="r")}


CONTRADICTED_CLAIM = CLAIM.model_copy(update={"claim_text": "order-service 内存 current=50%，正常"})


@pytest.mark.parametrize(("severity", "judgement", "claim", "stage_error", "expected"), [
    ("reject", "supported", CLAIM, False, "REJECT"),
    ("reject", None, CLAIM, False, "REJECT"),
    ("low_confid", "contradicted", CONTRADICTED_CLAIM, False, "LOW_CONFID"),  # the table, not the verifier
    ("low_confid", "supported", CLAIM, False, "LOW_CONFID"),
    ("low_confid", None, CLAIM, False, "LOW_CONFID"),
    ("none", "supported", CLAIM, True, "LOW_CONFID"),
    ("none", "contradicted", CONTRADICTED_CLAIM, False, "REJECT"),
    ("none", "contradicted", CLAIM, False, "LOW_CONFID"),  # every fact is in the excerpt: a disagreement
    ("none", "over-reaches", CLAIM, False, "LOW_CONFID"),
    ("none", "supported", CLAIM, False, "PASS"),
    ("none", None, CLAIM, False, "LOW_CONFID"),
])
def test_verdict_table(severity, judgement, claim, stage_error, expected):
    errors = [Finding(rule="lm.executor.error", message="down")] if stage_error else []
    evaluation, results = enforce(gate(severity), [claim], judged(judgement), {}, errors, verifier_ran=judgement is not None)
    assert evaluation.verdict == expected
    if expected == "PASS" or severity != "none":
        assert (results[0].verification_status == "verified") == (expected == "PASS")


def test_a_disagreement_is_recorded_and_never_upgraded():
    evaluation, results = enforce(gate("none"), [CLAIM], judged("contradicted"), {}, [], verifier_ran=True)
    assert [o.rule for o in evaluation.code_overrides] == ["verdict.verifier_disagreement"]
    assert results[0].verification_status == "downgraded" and evaluation.verdict == "LOW_CONFID"


def test_code_sees_support_only_with_every_name_and_the_same_polarity():
    assert code_sees_support(CLAIM, [ALERT])
    assert not code_sees_support(CLAIM.model_copy(update={"claim_text": "order-service 没有 HighMemoryUsage 告警"}), [ALERT])
    assert not code_sees_support(CLAIM.model_copy(update={"claim_text": "user-service 存在 HighMemoryUsage 告警"}), [ALERT])
    assert not code_sees_support(CLAIM.model_copy(update={"claim_text": "order-service current=95%"}), [ALERT])


def refs(text=ALERT, **flags):
    return {"c1": [CitedRef(tool_name=flags.get("tool", "query_metrics"), text=text, context=flags.get("context", text),
                            state=flags.get("state"), no_hit=flags.get("no_hit", False), searched="query_metrics()",
                            backfilled=flags.get("backfilled", False), indirect=flags.get("indirect", False))]}


NO_HIT = "未找到匹配的日志 (no log lines matched query='connection pool exhausted active=30/30', service='order-service')"


@pytest.mark.parametrize(("claim_update", "cited", "rule"), [
    ({}, refs(backfilled=True), "verdict.backfill_only"),
    ({}, refs(tool="lookup_knowledge", indirect=True), "verdict.runbook_only"),
    ({"claim_type": "negative_observation", "claim_text": "order-service connection pool exhausted active=30/30"},
     refs(NO_HIT, no_hit=True), "verdict.no_hit_positive"),
    ({"claim_type": "observation", "claim_text": "order-service 内存 HighMemoryUsage 未检索到"}, refs(),
     "verdict.absence_on_hit"),
    # However much the clause names between "no" and "found".
    ({"claim_type": "observation", "claim_text": "No order-service HighMemoryUsage memory pressure log lines were found"},
     refs(), "verdict.absence_on_hit"),
    ({"claim_text": "order-service 存在 HighMemoryUsage 告警，current=95%"}, refs(), "verdict.ungrounded_number"),
    # A number in words is read, and checked like one in digits.
    ({"claim_text": "order-service HighMemoryUsage 告警，内存使用率为百分之九十九"}, refs(), "verdict.ungrounded_number"),
    ({"claim_text": "order-service HighMemoryUsage at ninety nine percent"}, refs(), "verdict.ungrounded_number"),
    # The value is there, but not with that unit, sign or case.
    ({"claim_text": "order-service HighMemoryUsage 告警持续 15M"}, refs(), "verdict.ungrounded_number"),
    ({"claim_text": "order-service HighMemoryUsage current=91ms"}, refs(), "verdict.ungrounded_number"),
    ({"claim_text": "order-service HighMemoryUsage, current -91%"}, refs(), "verdict.ungrounded_number"),
    # The number is in the evidence, said of another quantity.
    ({"claim_text": "order-service HighMemoryUsage 告警，current 85%"}, refs(), "verdict.misbound_number"),
    ({"claim_text": "order-service 内存告警 HighMemoryUsage，GC次数为 91"},
     refs("[11:17][WARN][order-service] 内存使用率过高: 91.0%, GC次数: 128"), "verdict.misbound_number"),
    # A state the cited alert does not have, named or not.
    ({"claim_text": "order-service HighMemoryUsage 告警未触发，内存正常"}, refs(state="firing"), "verdict.state_conflict"),
    ({"claim_text": "order-service HighMemoryUsage is no longer firing"}, refs(state="firing"), "verdict.state_conflict"),
    ({"claim_text": "order-service HighMemoryUsage 告警正在触发"},
     refs(ALERT.replace("firing", "resolved"), state="resolved"), "verdict.state_conflict"),
    # A state named against the alert's own is the state check's, as in words of either language.
    ({"claim_text": "order-service HighMemoryUsage 仍在 firing"},
     refs(ALERT.replace("firing", "resolved"), state="resolved"), "verdict.state_conflict"),
    ({"claim_text": "order-service HighMemoryUsage: the replica is healthy"},
     refs(ALERT + ", healthy=false"), "verdict.state_conflict"),
    # A measure or a comparison the evidence does not give, or a number that cannot be read.
    ({"claim_text": "order-service HighMemoryUsage 告警已持续 15 hours"}, refs(), "verdict.ungrounded_number"),
    ({"claim_text": "order-service HighMemoryUsage current≠91%"}, refs(), "verdict.ungrounded_number"),
    ({"claim_text": "order-service HighMemoryUsage current 91\u0338%"}, refs(), "verdict.ungrounded_number"),
    ({"claim_text": "order-service HighMemoryUsage current \u201391%"}, refs(), "verdict.ungrounded_number"),
    # A bound in words that no measured value satisfies.
    ({"claim_text": "order-service HighMemoryUsage 内存使用率超过 95%"}, refs(), "verdict.ungrounded_number"),
    ({"claim_text": "order-service HighMemoryUsage: memory below 85%"}, refs(), "verdict.ungrounded_number"),
    # A number said of another quantity: in the words code gives the field, or before its name.
    ({"claim_text": "order-service HighMemoryUsage 告警，阈值 91%，当前 85%"}, refs(), "verdict.misbound_number"),
    ({"claim_text": "order-service HighMemoryUsage at 91% threshold"}, refs(), "verdict.misbound_number"),
    # That an alert is over, against a firing one, whatever else the claim says.
    ({"claim_text": "order-service HighMemoryUsage 告警曾触发，现已恢复"}, refs(state="firing"), "verdict.state_conflict"),
    ({"claim_text": "order-service HighMemoryUsage 目前没有告警"}, refs(state="firing"), "verdict.state_conflict"),
    ({"claim_text": "order-service HighMemoryUsage stopped firing"}, refs(state="firing"), "verdict.state_conflict"),
    ({"claim_text": "order-service HighMemoryUsage: the replica is healthy"},
     refs(ALERT + '; status: {"healthy": false}'), "verdict.state_conflict"),
    ({"claim_text": "order-service HighMemoryUsage: TLS enabled"}, refs(ALERT + ", tls_enabled=false"),
     "verdict.state_conflict"),
    # A topic none of its evidence concerns.
    ({"claim_text": "order-service HighMemoryUsage 告警，且连接池已耗尽导致内存上涨"}, refs(), "verdict.ungrounded_topic"),
    ({"claim_text": "order-service HighMemoryUsage current=\u202e91\u202c%"}, refs(), "verdict.bidi_control"),
    ({"claim_text": "order-service 存在 HighMemoryUsage 告警，OrderCache 泄漏"}, refs(), "verdict.ungrounded_name"),
    ({"claim_text": "order-service 的 HighMemoryUsage 告警已 resolved"}, refs(), "verdict.ungrounded_name"),
    # A name written as a name (capitalised inside a sentence) that no cited ref holds: the 1.5B's
    # "Redis" of HikariCP lines, taken from a worked example.
    ({"claim_text": "order-service HighMemoryUsage: the Redis connection pool is not available, current=91%"},
     refs(), "verdict.ungrounded_name"),
    ({"claim_text": "order-service 的 Redis 连接池耗尽，HighMemoryUsage current=91%"}, refs(), "verdict.ungrounded_name"),
    ({"claim_text": "order-service HighMemoryUsage at 91%, caused by Elasticsearch"}, refs(), "verdict.ungrounded_name"),
    ({"claim_text": "order-service 存在 HighMemoryUsage 告警和 HikariCP 问题"}, refs(), "verdict.excluded_topic"),
    ({"claim_text": "#1 query_metrics(service='order-service') -> supported"}, refs(), "verdict.off_topic"),
    ({"claim_text": "payment-service 存在 HighMemoryUsage 告警"}, refs(), "verdict.off_topic"),
])
def test_code_blocks_what_no_verifier_may_wave_through(claim_update, cited, rule):
    claim = CLAIM.model_copy(update=claim_update)
    target = TARGET if rule == "verdict.off_topic" else Target(services=("order-service",), topics=())
    blockers = claim_blockers([claim], cited, target, Exclusion(("hikaricp",)), ("order-service", "payment-service",
                                                                         "HighMemoryUsage", "firing", "resolved"),
                              [("highmemoryusage", "内存"), ("hikaricp", "连接池")])
    assert rule in [finding.rule for finding in blockers["c1"]]


@pytest.mark.parametrize(("claim_text", "cited"), [
    ("order-service 存在 HighMemoryUsage 告警，current=91%", refs(state="firing")),
    ("order-service HighMemoryUsage 告警正在触发，current 91%，threshold 85%，持续 15m", refs(state="firing")),
    ("order-service 的 HighMemoryUsage 告警已恢复", refs(ALERT.replace("firing", "resolved"), state="resolved")),
    # Denying a state the cited alert does not have is no ungrounded name.
    ("order-service 的 HighMemoryUsage 未 firing，current=91%", refs(ALERT.replace("firing", "resolved"), state="resolved")),
    ("order-service HighMemoryUsage: the replica is not healthy", refs(ALERT + ", healthy=false")),
    ("order-service HighMemoryUsage: replica failed its healthy check, healthy is false", refs(ALERT + ", healthy=false")),
    ("order-service HighMemoryUsage 告警触发，内存高于正常水平，持续 15 min", refs(state="firing")),
    ("order-service HighMemoryUsage 告警正在触发，尚未恢复", refs(state="firing")),
    # A state word of something else than the alert says nothing of the alert.
    ("order-service HighMemoryUsage 告警触发，自动恢复失败", refs(state="firing")),
    ("order-service HighMemoryUsage 告警触发，需要修复内存泄漏", refs(state="firing")),
    ("order-service HighMemoryUsage 告警曾触发，现已恢复", refs(ALERT.replace("firing", "resolved"), state="resolved")),
    ("order-service HighMemoryUsage: 91% is above the 85% threshold", refs(state="firing")),
    # A "no" whose clause ends before the word of finding says no absence.
    ("order-service HighMemoryUsage 告警触发, no restart; 91% found by the last sample", refs(state="firing")),
    # A bound in words that the measured values satisfy.
    ("order-service HighMemoryUsage 告警，内存使用率超过 90%，持续超过 10 分钟", refs(state="firing")),
    ("order-service OOMKilled: 因内存不足被杀", refs("PodOOMKilled firing, service=order-service; java.lang.OutOfMemoryError")),
    ("order-service 内存告警，内存使用率 91%，GC 128 次",
     refs("[11:17][WARN][order-service] 内存使用率过高: 91.0%, GC次数: 128")),
    # A capitalised word that opens a sentence, a quote or a list item is no name; one inside a
    # sentence is, and its ref holds it.
    ("Memory on order-service is high. The HighMemoryUsage alert is firing: Current is 91%", refs(state="firing")),
    ("order-service 内存告警: 15 次 Full GC, 91%",
     refs("[11:15][WARN][order-service] 内存使用率过高: 91%, Full GC 次数: 15")),
    ("The evidence shows: [11:15][WARN][order-service] Java heap space, memory at 91%",
     refs("[11:15][WARN][order-service] java.lang.OutOfMemoryError: Java heap space, memory at 91%")),
])
def test_honest_claims_pass_the_same_checks(claim_text, cited):
    claim = CLAIM.model_copy(update={"claim_text": claim_text})
    assert claim_blockers([claim], cited, TARGET, Exclusion(), ("order-service", "HighMemoryUsage", "firing", "resolved"),
                          [("highmemoryusage", "memory", "内存"), ("hikaricp", "连接池")]) == {}


def test_a_negative_observation_on_a_no_hit_is_allowed():
    claim = CLAIM.model_copy(update={"claim_type": "negative_observation",
                                     "claim_text": "order-service 的日志中未检索到连接池耗尽记录"})
    target = Target(services=("order-service",), topics=(("connection pool", "连接池"),))
    assert claim_blockers([claim], refs(NO_HIT, no_hit=True), target) == {}

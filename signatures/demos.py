"""Hand-written demos that ship with the uncompiled program (the optimizer may replace them).

They use a service and alerts outside the fixture world, so they teach the judgement, not the
answers of any devset case.
"""

from __future__ import annotations

import dspy

from program.evidence.checks import retry_text
from program.evidence.verdict import SECOND_LOOK_SHARE, second_look_blocker
from contracts import (
    Claim,
    ClaimDraft,
    EvidenceBinding,
    Finding,
    MissingInfo,
    PlanDraft,
    PlannerOutput,
    RetryContext,
    ToolInvocation,
)
from tools.calls import ToolCall
from tools.functions import TOOLBOX
from tools.recorder import citation_label, extract_retrieval_details, render_observations

# Excerpts are quoted tool output, delimited as data like every other tool text the LM sees.
_JUDGE_CASES = (
    ("只确认 checkout-service 是否存在 DiskPressure 告警",
     "observation: checkout-service 存在 DiskPressure 告警（firing），磁盘使用率 93%。",
     ["DiskPressure firing, service=checkout-service, current=93%, threshold=85%, duration=6m"],
     "supported", "the alert excerpt states the alert, its state and 93%"),
    ("只确认 checkout-service 是否存在 DiskPressure 告警",
     "observation: checkout-service 的磁盘被日志文件写满，根因是日志轮转失效。",
     ["DiskPressure firing, service=checkout-service, current=93%, threshold=85%, duration=6m"],
     "over-reaches", "the excerpt shows disk usage, not its cause"),
    ("Is checkout-service returning 5xx errors?",
     "observation: checkout-service has no 5xx errors.",
     ["[10:42][ERROR][checkout-service] POST /cart returned 503 upstream timeout"],
     "contradicted", "the log line shows a 503 error"),
    ("确认 search-service 是否存在 Elasticsearch 超时",
     "negative_observation: search-service 的日志中未检索到 Elasticsearch 超时记录。",
     ["未找到匹配的日志 (no log lines matched query='Elasticsearch timeout', service='search-service', level=None)"],
     "supported", "the search found nothing, which is what the claim says"),
    ("Does checkout-service have a CertificateExpiry alert? Only confirm.",
     "negative_observation: No CertificateExpiry alert was found for checkout-service.",
     ["未找到匹配的告警 (no alerts matched service='checkout-service', alert_name='CertificateExpiry', state=None)"],
     "supported", "the alert lookup found nothing, which is what the claim says"),
)


def judge_demos() -> list[dspy.Example]:
    return [
        dspy.Example(question=q, claim=claim, excerpts=excerpts, judgement=judgement, reason=reason)
        .with_inputs("question", "claim", "excerpts")
        for q, claim, excerpts, judgement, reason in _JUDGE_CASES
    ]


def _call(inv_id: int, tool: str, arguments: dict, items: list[dict] = (), message: str = "") -> ToolInvocation:
    """A recorded call whose output holds `items`: its refs are extracted as the recorder extracts them."""
    declaration = TOOLBOX.get(tool)
    output = {"success": True, declaration.items: list(items), "message": message}
    return ToolInvocation(id=inv_id, session_id="demo", tool_name=tool, input=arguments,
                          retrieval_details=extract_retrieval_details(declaration, output))


def _labels(calls: list[ToolInvocation]) -> list[str]:
    """What a demo claim cites: every ref of these calls, and the no-hit of a call that found nothing."""
    labels = []
    for inv in calls:
        refs = inv.retrieval_details.evidence_refs
        labels += [citation_label(inv.id, ref.raw_path) for ref in refs] if refs else [citation_label(inv.id, None)]
    return labels


def _log(clock: str, level: str, service: str, message: str) -> dict:
    return {"timestamp": f"2026-01-01T{clock}:00", "level": level, "service": service, "message": message}


_DISK = [_call(7, "query_metrics", {"service": "checkout-service", "alert_name": "DiskPressure"}, [
             {"name": "DiskPressure", "state": "firing", "service": "checkout-service", "current": "93%",
              "threshold": "85%", "duration": "6m", "description": "volume /var/log 40GB",
              "samples": [88.1, 90.4, 93.0]}]),
         _call(8, "query_logs", {"query": "disk", "service": "checkout-service"}, [
             _log("10:40", "WARN", "checkout-service", "disk usage 93% on /var/log")])]
_POOL = [_call(4, "query_logs", {"query": "Redis 连接池", "service": "cart-service"}, [
             _log("09:12", "ERROR", "cart-service", "Redis pool exhausted: could not get a resource from the pool (max 64)"),
             _log("09:12", "WARN", "cart-service", "Redis pool stats: active=64/64, idle=0")])]
_SEARCH = [_call(3, "query_logs", {"query": "Elasticsearch timeout", "service": "search-service"}, message=(
    "未找到匹配的日志 (no log lines matched query='Elasticsearch timeout', service='search-service', level=None)"))]


def executor_demos() -> list[dspy.Example]:
    """An alert, a log event that was found, and a search that found nothing, in the output shape
    the grammar allows: bindings point at labels. Numbers in a claim are copied from what it cites.
    Each demo carries the calls it was shown (`invocations`) beside their rendering."""
    disk = ClaimDraft(claim_type="observation", evidence_bindings=_labels(_DISK),
                      claim_text="checkout-service 存在 DiskPressure 告警（firing），磁盘使用率 93%。")
    pool = ClaimDraft(claim_type="observation", evidence_bindings=_labels(_POOL),
                      claim_text="cart-service 存在 Redis 连接池耗尽日志：Redis pool exhausted，active=64/64。")
    search = ClaimDraft(claim_type="negative_observation", evidence_bindings=_labels(_SEARCH),
                        claim_text="No Elasticsearch timeout log lines were found for search-service.")
    cases = [
        ("只确认 checkout-service 是否存在 DiskPressure 告警", ["checkout-service"], ["DiskPressure"], _DISK, disk,
         [MissingInfo(info_id="missing-1", description="磁盘增长的原因未知，需要查看 /var/log 下的文件。")]),
        ("确认 cart-service 是否存在 Redis 连接池耗尽。", ["cart-service"], ["Redis 连接池耗尽"], _POOL, pool, []),
        ("Does search-service log Elasticsearch timeouts?", ["search-service"], ["Elasticsearch 超时"], _SEARCH, search,
         []),
    ]
    return [
        dspy.Example(question=question, retry_context="none", invocations=calls,
                     plan=PlannerOutput(scope="narrow", target_services=services, topics=topics),
                     observations=render_observations(calls), claims=[claim], hypotheses=[], missing_info=missing,
                     recommended_actions=[]).with_inputs("question", "plan", "observations", "retry_context")
        for question, services, topics, calls, claim, missing in cases
    ]


_DISK_RESOLVED = [_call(9, "query_metrics", {"service": "checkout-service", "alert_name": "DiskPressure"}, [
    {"name": "DiskPressure", "state": "resolved", "service": "checkout-service", "current": "61%", "threshold": "85%",
     "duration": "6m", "description": "volume /var/log 26GB after log rotation", "samples": [93.0, 74.2, 61.0]}])]
_CART_LINE = _log("09:14", "ERROR", "cart-service", "Redis connection refused: 10.0.3.7:6379")
_CART = [_call(5, "query_logs", {"query": "Redis connection error", "service": "cart-service"}, message=(
             "未找到匹配的日志 (no log lines matched query='Redis connection error', service='cart-service', level=None)")),
         _call(6, "query_logs", {"query": "Did log any Redis connection errors?", "min_share": SECOND_LOOK_SHARE,
                                 "service": "cart-service"}, [_CART_LINE])]
# The findings of the checks as they word them (a test holds each to its check).
STILL_FIRING = "the statement says the alert is firing, but the alert it cites is resolved"
UNNAMED = "the claim does not name checkout-service, which the question asks about"
STATE_CONFLICT = "the statement says the alert is not firing, but the alert it cites is firing"
# Each worked revision: the question, the plan's target and topic, the calls shown, the refused
# claim's type and text, its findings (None: the second look's), the labels code found, the revision.
_REVISIONS = (
    ("Only confirm that checkout-service's DiskPressure alert is still firing.", "checkout-service", "DiskPressure",
     _DISK_RESOLVED, "observation", "DiskPressure 告警仍在触发，磁盘使用率 61%。",
     [("verdict.off_topic", UNNAMED), ("verdict.state_conflict", STILL_FIRING)], False,
     "checkout-service's DiskPressure alert is resolved, current=61%."),
    ("checkout-service 的 DiskPressure 告警已经恢复了吧？只确认。", "checkout-service", "DiskPressure", _DISK[:1],
     "observation", "checkout-service 的 DiskPressure 告警已经恢复了，磁盘使用率 93%。",
     [("verdict.state_conflict", STATE_CONFLICT)], False, "checkout-service 的 DiskPressure 告警仍在触发（firing），磁盘使用率 93%。"),
    ("Did cart-service log any Redis connection errors?", "cart-service", "Redis connection errors", _CART,
     "negative_observation", "No Redis connection error log lines were found for cart-service.", None, True,
     "cart-service logged a Redis connection error: Redis connection refused: 10.0.3.7:6379."),
)


def _refused(calls: list[ToolInvocation], claim_type: str, text: str) -> Claim:
    """A refused first attempt's claim, bound to the first call's refs as code expands its labels."""
    inv = calls[0]
    refs = inv.retrieval_details.evidence_refs
    bindings = [EvidenceBinding(tool_name=inv.tool_name, source_invocation_id=inv.id, raw_path=ref.raw_path,
                                evidence_excerpt=ref.text) for ref in refs] or [
        EvidenceBinding(tool_name=inv.tool_name, source_invocation_id=inv.id, raw_path=None,
                        evidence_excerpt=inv.retrieval_details.message)]
    return Claim(claim_id="claim-1", claim_type=claim_type, claim_text=text, evidence_bindings=bindings)


def retry_demos() -> list[dspy.Example]:
    """The attempt after a refusal, in the shape the retry is asked in (signatures.retry_citation):
    claims that said another state than the alert shows (one way and the other, one without its
    service), each written again from the alert, and an all-clear a second look contradicted, written
    again as what the line it found shows. Both directions, so that no state word is the lesson."""
    demos = []
    for question, service, topic, calls, claim_type, text, findings, looked, revision in _REVISIONS:
        shown = calls[1:] if looked else calls
        if findings is None:
            lines = [ref.text for ref in calls[1].retrieval_details.evidence_refs]
            errors = [second_look_blocker("claim-1", lines, None)]
        else:
            errors = [Finding(rule=rule, claim_id="claim-1", message=message) for rule, message in findings]
        context = RetryContext(attempt=1, failed_rules=[f.rule for f in errors], errors=errors)
        answer = ClaimDraft(claim_type="observation", evidence_bindings=_labels(shown), claim_text=revision)
        demos.append(dspy.Example(
            question=question, invocations=calls,
            plan=PlannerOutput(scope="narrow", target_services=[service], topics=[topic]),
            observations=render_observations(calls),
            retry_context=retry_text(context, [_refused(calls, claim_type, text)], _labels(shown) if looked else []),
            claims=[answer], hypotheses=[], missing_info=[], recommended_actions=[],
        ).with_inputs("question", "plan", "observations", "retry_context"))
    return demos


def planner_demos() -> list[dspy.Example]:
    """An alert name goes to query_metrics, a log event (here a pool exhaustion) to query_logs."""
    return [
        dspy.Example(question="只确认 checkout-service 是否存在 DiskPressure 告警和磁盘写满日志，不要分析 search-service。",
                     plan=PlanDraft(target_services=["checkout-service"], topics=["DiskPressure", "磁盘写满"],
                                    excluded_topics=["search-service"]),
                     tool_calls=[ToolCall(tool_name="query_metrics", service="checkout-service", alert_name="DiskPressure"),
                                 ToolCall(tool_name="query_logs", query="disk full", service="checkout-service")],
                     ).with_inputs("question"),
        dspy.Example(question="确认 cart-service 是否存在 Redis 连接池耗尽。",
                     plan=PlanDraft(target_services=["cart-service"], topics=["Redis 连接池耗尽"]),
                     tool_calls=[ToolCall(tool_name="query_logs", query="Redis 连接池", service="cart-service")],
                     ).with_inputs("question"),
    ]

"""Hand-written demos that ship with the uncompiled program (the optimizer may replace them).

They use a service and alerts outside the fixture world, so they teach the judgement, not the
answers of any devset case. Each is written in both languages: the same case, its question, claim
texts, missing_info and reasons translated, its evidence, labels and judgement the same. A stage is
shown the demos in the answer's language (each demo's `language`), so that a small model, which
follows its demos' language over its instruction, is never shown an example of writing in the
other one.
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
    Language,
    MissingInfo,
    PlanDraft,
    PlannerOutput,
    RetryContext,
    ToolInvocation,
)
from tools.calls import ToolCall
from tools.functions import TOOLBOX
from tools.recorder import citation_label, extract_retrieval_details, render_observations

# Excerpts are quoted tool output, delimited as data like every other tool text the LM sees. Each
# case: ({language: (question, claim, reason)}, excerpts, judgement).
_DISK_ALERT = "DiskPressure firing, service=checkout-service, current=93%, threshold=85%, duration=6m"
_JUDGE_CASES = (
    ({"zh": ("只确认 checkout-service 是否存在 DiskPressure 告警",
             "observation: checkout-service 存在 DiskPressure 告警（firing），磁盘使用率 93%。",
             "告警摘录写明了该告警、它的状态和 93%"),
      "en": ("Only confirm whether checkout-service has a DiskPressure alert.",
             "observation: checkout-service has a DiskPressure alert (firing), disk usage 93%.",
             "the alert excerpt states the alert, its state and 93%")},
     [_DISK_ALERT], "supported"),
    ({"zh": ("只确认 checkout-service 是否存在 DiskPressure 告警",
             "observation: checkout-service 的磁盘被日志文件写满，根因是日志轮转失效。",
             "摘录只显示磁盘使用率，没有说明原因"),
      "en": ("Only confirm whether checkout-service has a DiskPressure alert.",
             "observation: checkout-service's disk was filled by log files because log rotation failed.",
             "the excerpt shows disk usage, not its cause")},
     [_DISK_ALERT], "over-reaches"),
    ({"zh": ("checkout-service 是否返回 5xx 错误？",
             "observation: checkout-service 没有 5xx 错误。",
             "日志行显示了一个 503 错误"),
      "en": ("Is checkout-service returning 5xx errors?",
             "observation: checkout-service has no 5xx errors.",
             "the log line shows a 503 error")},
     ["[10:42][ERROR][checkout-service] POST /cart returned 503 upstream timeout"], "contradicted"),
    ({"zh": ("确认 search-service 是否存在 Elasticsearch 超时",
             "negative_observation: search-service 的日志中未检索到 Elasticsearch 超时记录。",
             "检索没有找到任何内容，这正是该结论所说的"),
      "en": ("Confirm whether search-service logs Elasticsearch timeouts.",
             "negative_observation: No Elasticsearch timeout was found in search-service logs.",
             "the search found nothing, which is what the claim says")},
     ["未找到匹配的日志 (no log lines matched query='Elasticsearch timeout', service='search-service', level=None)"],
     "supported"),
    ({"zh": ("checkout-service 是否有 CertificateExpiry 告警？只确认这一点。",
             "negative_observation: 未找到 checkout-service 的 CertificateExpiry 告警。",
             "告警查询没有找到任何内容，这正是该结论所说的"),
      "en": ("Does checkout-service have a CertificateExpiry alert? Only confirm.",
             "negative_observation: No CertificateExpiry alert was found for checkout-service.",
             "the alert lookup found nothing, which is what the claim says")},
     ["未找到匹配的告警 (no alerts matched service='checkout-service', alert_name='CertificateExpiry', state=None)"],
     "supported"),
)


def judge_demos() -> list[dspy.Example]:
    """Each case in both languages: its excerpts and judgement the same, its question, claim and reason translated."""
    return [
        dspy.Example(language=language, question=question, claim=claim, excerpts=excerpts, judgement=judgement,
                     reason=reason).with_inputs("language", "question", "claim", "excerpts")
        for texts, excerpts, judgement in _JUDGE_CASES for language, (question, claim, reason) in texts.items()
    ]


def for_language(demos: list, language: Language) -> list:
    """The demos written in `language`; a demo that names no language (one saved before demos had
    one) is shown in both."""
    return [d for d in demos if d.get("language") in (language, None)]


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


# Each case: ({language: (question, topics, claim text, missing_info)}, service, calls, claim type).
_EXECUTOR_CASES = (
    ({"zh": ("只确认 checkout-service 是否存在 DiskPressure 告警", ["DiskPressure"],
             "checkout-service 存在 DiskPressure 告警（firing），磁盘使用率 93%。",
             ["磁盘增长的原因未知，需要查看 /var/log 下的文件。"]),
      "en": ("Only confirm whether checkout-service has a DiskPressure alert.", ["DiskPressure"],
             "checkout-service has a DiskPressure alert (firing), disk usage 93%.",
             ["Why the disk filled up is unknown; the files under /var/log would tell."])},
     "checkout-service", _DISK, "observation"),
    ({"zh": ("确认 cart-service 是否存在 Redis 连接池耗尽。", ["Redis 连接池耗尽"],
             "cart-service 存在 Redis 连接池耗尽日志：Redis pool exhausted，active=64/64。", []),
      "en": ("Confirm whether cart-service has Redis connection pool exhaustion.", ["Redis pool exhaustion"],
             "cart-service logs show the Redis connection pool exhausted: Redis pool exhausted, active=64/64.", [])},
     "cart-service", _POOL, "observation"),
    ({"zh": ("search-service 的日志中是否有 Elasticsearch 超时？", ["Elasticsearch 超时"],
             "search-service 的日志中未检索到 Elasticsearch 超时记录。", []),
      "en": ("Does search-service log Elasticsearch timeouts?", ["Elasticsearch timeout"],
             "No Elasticsearch timeout log lines were found for search-service.", [])},
     "search-service", _SEARCH, "negative_observation"),
)


def executor_demos() -> list[dspy.Example]:
    """An alert, a log event that was found, and a search that found nothing, each in both
    languages, in the output shape the grammar allows: bindings point at labels, the same in both.
    Numbers in a claim are copied from what it cites. Each demo carries the calls it was shown
    (`invocations`) beside their rendering."""
    return [
        dspy.Example(language=language, question=question, retry_context="none", invocations=calls,
                     plan=PlannerOutput(scope="narrow", target_services=[service], topics=topics),
                     observations=render_observations(calls),
                     claims=[ClaimDraft(claim_type=kind, evidence_bindings=_labels(calls), claim_text=claim)],
                     hypotheses=[], recommended_actions=[],
                     missing_info=[MissingInfo(info_id=f"missing-{n}", description=text)
                                   for n, text in enumerate(missing, start=1)])
        .with_inputs("language", "question", "plan", "observations", "retry_context")
        for texts, service, calls, kind in _EXECUTOR_CASES for language, (question, topics, claim, missing) in texts.items()
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
# Each worked revision, in both languages: per language the question and the refused claim's text;
# then the plan's target and topic, the calls shown, the refused claim's type, its findings (None:
# the second look's) and whether code found labels. The revision points at what answers and writes
# nothing: code quotes it.
REVISIONS = (
    ({"en": ("Only confirm that checkout-service's DiskPressure alert is still firing.",
             "The DiskPressure alert is still firing, disk usage 61%."),
      "zh": ("只确认 checkout-service 的 DiskPressure 告警是否仍在触发。",
             "DiskPressure 告警仍在触发，磁盘使用率 61%。")},
     "checkout-service", "DiskPressure", _DISK_RESOLVED, "observation",
     [("verdict.off_topic", UNNAMED), ("verdict.state_conflict", STILL_FIRING)], False),
    ({"en": ("checkout-service's DiskPressure alert has recovered, right? Only confirm.",
             "checkout-service's DiskPressure alert has recovered, disk usage 93%."),
      "zh": ("checkout-service 的 DiskPressure 告警已经恢复了吧？只确认。",
             "checkout-service 的 DiskPressure 告警已经恢复了，磁盘使用率 93%。")},
     "checkout-service", "DiskPressure", _DISK[:1], "observation",
     [("verdict.state_conflict", STATE_CONFLICT)], False),
    ({"en": ("Did cart-service log any Redis connection errors?",
             "No Redis connection error log lines were found for cart-service."),
      "zh": ("cart-service 有没有记录 Redis 连接错误的日志？",
             "未找到 cart-service 的 Redis 连接错误日志。")},
     "cart-service", "Redis connection errors", _CART, "negative_observation", None, True),
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
    service), each answered again by pointing at the alert, and an all-clear a second look
    contradicted, answered by pointing at the line it found. Both directions, so that no state word
    is the lesson."""
    demos = []
    for texts, service, topic, calls, claim_type, findings, looked in REVISIONS:
        shown = calls[1:] if looked else calls
        if findings is None:
            lines = [ref.text for ref in calls[1].retrieval_details.evidence_refs]
            errors = [second_look_blocker("claim-1", lines, None)]
        else:
            errors = [Finding(rule=rule, claim_id="claim-1", message=message) for rule, message in findings]
        context = RetryContext(attempt=1, failed_rules=[f.rule for f in errors], errors=errors)
        for language, (question, text) in texts.items():
            answer = ClaimDraft(claim_type="observation", evidence_bindings=_labels(shown), claim_text="")
            demos.append(dspy.Example(
                language=language, question=question, invocations=calls,
                plan=PlannerOutput(scope="narrow", target_services=[service], topics=[topic]),
                observations=render_observations(calls),
                retry_context=retry_text(context, [_refused(calls, claim_type, text)], _labels(shown) if looked else []),
                claims=[answer], hypotheses=[], missing_info=[], recommended_actions=[],
            ).with_inputs("language", "question", "plan", "observations", "retry_context"))
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

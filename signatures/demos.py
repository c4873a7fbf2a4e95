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
from program.evidence.relevance import Target
from program.evidence.scope import Exclusion
from program.evidence.screen import Screen, Screening
from program.evidence.verdict import SECOND_LOOK_SHARE, second_look_blocker
from contracts import (
    ANSWERS,
    Claim,
    ClaimDraft,
    EvidenceBinding,
    Finding,
    Language,
    MissingInfo,
    PlanDraft,
    PlannerOutput,
    RefJudgement,
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
    return ToolInvocation(id=inv_id, session_id="demo", tool_name=tool, input=arguments, output=output,
                          retrieval_details=extract_retrieval_details(declaration, output))


def _labels(calls: list[ToolInvocation]) -> list[str]:
    """What a worked revision cites: every ref of these calls, and the no-hit of a call that found nothing."""
    labels = []
    for inv in calls:
        refs = inv.retrieval_details.evidence_refs
        labels += [citation_label(inv.id, ref.raw_path) for ref in refs] if refs else [citation_label(inv.id, None)]
    return labels


def _log(clock: str, level: str, service: str, message: str) -> dict:
    return {"timestamp": f"2026-01-01T{clock}:00", "level": level, "service": service, "message": message}


def _alert(name: str, state: str, service: str, current: str, threshold: str, description: str) -> dict:
    return {"name": name, "state": state, "service": service, "current": current, "threshold": threshold,
            "duration": "6m", "description": description}


def _decided(calls: list[ToolInvocation], decisions: list[list[str]], screening: Screening) -> list[RefJudgement]:
    """Each ref's decision (or a no-hit's) that code did not set aside, call by call in the order shown."""
    decided = []
    for inv, chosen in zip(calls, decisions, strict=True):
        labels = [label for ref in inv.retrieval_details.evidence_refs
                  if (label := citation_label(inv.id, ref.raw_path)) not in screening.refs]
        decided += [RefJudgement(ref=label, decision=decision)
                    for label, decision in zip(labels or [citation_label(inv.id, None)], chosen, strict=True)]
    return decided


# Each demo holds refs that do not answer: ones no field tells apart (a request that was not slow,
# an unrelated line), which the executor decides on, and ones code sets aside before it is asked
# (another service's alert, an alert's earlier state, another endpoint, an excluded topic), as the
# observations say it. Each cites only what answers, so that neither citing every ref nor a
# position is the lesson; the answering ref sits at another index in each.
_DISK = [_call(7, "query_metrics", {"alert_name": "DiskPressure"}, [
    _alert("DiskPressure", "firing", "payment-service", "88%", "85%", "shares volume /data with checkout-service"),
    _alert("DiskPressure", "firing", "checkout-service", "93%", "85%", "volume /var/log 40GB"),
    _alert("DiskPressure", "resolved", "checkout-service", "61%", "85%", "volume /var/log 26GB after rotation")])]
_SLOW = [_call(4, "query_logs", {"query": "slow request", "service": "cart-service"}, [
    _log("09:12", "WARN", "cart-service", "GC pause 1200ms during POST /api/cart/submit"),
    _log("09:12", "WARN", "cart-service", "Slow request: GET /api/cart/view took 2100ms"),
    _log("09:12", "INFO", "cart-service", "POST /api/cart/submit 200 in 35ms"),
    _log("09:13", "WARN", "cart-service", "Slow request: POST /api/cart/submit took 3400ms")])]
_POOL = [_call(5, "query_logs", {"query": "connection pool exhausted", "service": "inventory-service"}, [
    _log("08:02", "INFO", "inventory-service", "connection pool stats: active=7/50, idle=43, waiting=0"),
    _log("08:03", "INFO", "inventory-service", "request id=8812 served in 40ms")])]
_POOL_FULL = [_call(6, "query_logs", {"query": "connection pool exhausted", "service": "billing-service"}, [
    _log("10:41", "INFO", "billing-service", "invoice batch 77 queued"),
    _log("10:42", "WARN", "billing-service", "connection pool stats: active=20/20, idle=0, waiting=14")])]
_SEARCH = [_call(2, "query_metrics", {"service": "search-service", "alert_name": "HighLatency"}, [
               _alert("HighLatency", "resolved", "search-service", "P99=0.8s", "P99>1s", "query latency"),
               _alert("HighLatency", "firing", "search-service", "P99=2.4s", "P99>1s", "query latency")]),
           _call(3, "query_logs", {"query": "Elasticsearch timeout", "service": "search-service"}, message=(
               "未找到匹配的日志 (no log lines matched query='Elasticsearch timeout', service='search-service', level=None)"))]


# Each case: ({language: (question, topics, excluded, [claim texts], missing_info)}, service, calls,
# each call's decisions per ref code did not set aside, and each claim's type and labels.
_EXECUTOR_CASES = (
    ({"zh": ("只确认 checkout-service 是否存在 DiskPressure 告警", ["DiskPressure"], [],
             ["checkout-service 存在 DiskPressure 告警（firing），磁盘使用率 93%。"],
             ["磁盘增长的原因未知，需要查看 /var/log 下的文件。"]),
      "en": ("Only confirm whether checkout-service has a DiskPressure alert.", ["DiskPressure"], [],
             ["checkout-service has a DiskPressure alert (firing), disk usage 93%."],
             ["Why the disk filled up is unknown; the files under /var/log would tell."])},
     "checkout-service", _DISK, [["answers"]],
     [("observation", ["#7 $.alerts[1]"])]),
    ({"zh": ("只确认 cart-service 的 POST /api/cart/submit 是否有慢请求日志，不要看 GC。", ["慢请求"], ["GC"],
             ["cart-service 的 POST /api/cart/submit 有慢请求：took 3400ms。"], []),
      "en": ("Only confirm whether cart-service logs slow requests on POST /api/cart/submit; leave GC out.",
             ["slow request"], ["GC"], ["cart-service logs a slow request on POST /api/cart/submit: took 3400ms."], [])},
     "cart-service", _SLOW, [["irrelevant", "answers"]], [("observation", ["#4 $.logs[3]"])]),
    ({"zh": ("确认 inventory-service 的连接池是否耗尽。", ["连接池耗尽"], [],
             ["inventory-service 的连接池没有耗尽：active=7/50, waiting=0。"], []),
      "en": ("Confirm whether inventory-service's connection pool is exhausted.", ["connection pool exhaustion"], [],
             ["inventory-service's connection pool is not exhausted: active=7/50, waiting=0."], [])},
     "inventory-service", _POOL, [["answers", "irrelevant"]], [("observation", ["#5 $.logs[0]"])]),
    # The same question of a pool that is exhausted, so that neither answer is the lesson, only the line.
    ({"zh": ("确认 billing-service 的连接池是否耗尽。", ["连接池耗尽"], [],
             ["billing-service 的连接池已耗尽：active=20/20, waiting=14。"], []),
      "en": ("Confirm whether billing-service's connection pool is exhausted.", ["connection pool exhaustion"], [],
             ["billing-service's connection pool is exhausted: active=20/20, waiting=14."], [])},
     "billing-service", _POOL_FULL, [["irrelevant", "answers"]], [("observation", ["#6 $.logs[1]"])]),
    ({"zh": ("只确认 search-service 是否有 HighLatency 告警，以及日志中是否有 Elasticsearch 超时。",
             ["HighLatency", "Elasticsearch 超时"], [],
             ["search-service 存在 HighLatency 告警（firing），P99=2.4s。", "search-service 的日志中未检索到 Elasticsearch 超时记录。"], []),
      "en": ("Only confirm whether search-service has a HighLatency alert, and whether its logs show Elasticsearch timeouts.",
             ["HighLatency", "Elasticsearch timeout"], [],
             ["search-service has a HighLatency alert (firing), P99=2.4s.", "No Elasticsearch timeout log lines were found for search-service."], [])},
     "search-service", _SEARCH, [["answers"], ["answers"]],
     [("observation", ["#2 $.alerts[1]"]), ("negative_observation", ["#3 no-hit"])]),
)


def _screened(calls: list[ToolInvocation], service: str, question: str, excluded: list[str]) -> Screening:
    """What code sets aside of a demo's calls, as it would for its question: the alerts it names are
    its topics' names written as alerts are (DiskPressure)."""
    alerts = tuple(ref.name for inv in calls for ref in inv.retrieval_details.evidence_refs
                   if ref.name and ref.name in question)
    asked = question
    for topic in excluded:
        asked = asked.replace(topic, " ")
    screen = Screen(target=Target(services=(service,), topics=(), alerts=alerts),
                    excluded=Exclusion(tuple(term.casefold() for term in excluded)), narrow=True, asked=asked)
    return screen(calls)


def executor_demos() -> list[dspy.Example]:
    """An alert (its earlier state and another service's set aside by code), a slow line beside a
    fast one of the same endpoint (another endpoint's and an excluded topic's set aside by code), a
    healthy pool that answers "no" and an exhausted one that answers "yes", and an alert found
    beside a search that found nothing (two claims), each in both languages, in the output shape the grammar allows: a decision on every
    ref shown first, then bindings that point at the refs decided answers, the same in both. Numbers
    in a claim are copied from what it cites. Each demo carries the calls it was shown
    (`invocations`) beside their rendering."""
    demos = []
    for cases, service, calls, decisions, claims in _EXECUTOR_CASES:
        for language, (question, topics, excluded, texts, missing) in cases.items():
            screening = _screened(calls, service, question, excluded)
            demos.append(dspy.Example(
                language=language, question=question, retry_context="none", invocations=calls,
                plan=PlannerOutput(scope="narrow", target_services=[service], topics=topics, excluded_topics=excluded),
                observations=render_observations(calls, screening.hidden()),
                ref_decisions=_decided(calls, decisions, screening),
                claims=[ClaimDraft(claim_type=kind, evidence_bindings=labels, claim_text=text)
                        for (kind, labels), text in zip(claims, texts, strict=True)],
                hypotheses=[], recommended_actions=[],
                missing_info=[MissingInfo(info_id=f"missing-{n}", description=text)
                              for n, text in enumerate(missing, start=1)],
            ).with_inputs("language", "question", "plan", "observations", "retry_context"))
    return demos


_DISK_FIRING = [_call(7, "query_metrics", {"service": "checkout-service", "alert_name": "DiskPressure"}, [
    _alert("DiskPressure", "firing", "checkout-service", "93%", "85%", "volume /var/log 40GB")])]
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
     "checkout-service", "DiskPressure", _DISK_FIRING, "observation",
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
                ref_decisions=[RefJudgement(ref=label, decision=ANSWERS) for label in _labels(shown)], claims=[answer], hypotheses=[], missing_info=[], recommended_actions=[],
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

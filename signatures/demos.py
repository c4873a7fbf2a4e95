"""Hand-written demos that ship with the uncompiled program (the optimizer may replace them).

They use a service and alerts outside the fixture world, so they teach the judgement, not the
answers of any devset case.
"""

from __future__ import annotations

import dspy

from signatures.contracts import Claim, MissingInfo, PlannerOutput, ToolCall
from tools.recorder import spotlight

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
)


def judge_demos() -> list[dspy.Example]:
    return [
        dspy.Example(question=q, claim=claim, excerpts=excerpts, judgement=judgement, reason=reason)
        .with_inputs("question", "claim", "excerpts")
        for q, claim, excerpts, judgement, reason in _JUDGE_CASES
    ]


_DISK_OBSERVATIONS = spotlight("""#7 query_metrics(service='checkout-service', alert_name='DiskPressure') -> supported
  $.alerts[0]: DiskPressure firing, service=checkout-service, current=93%, threshold=85%, duration=6m; volume /var/log 40GB; samples: 88.1 -> 90.4 -> 93.0
#8 query_logs(query='disk', service='checkout-service') -> supported
  $.logs[0]: [10:40][WARN][checkout-service] disk usage 93% on /var/log""")
_POOL_OBSERVATIONS = spotlight("""#4 query_logs(query='Redis 连接池', service='cart-service') -> supported
  $.logs[0]: [09:12][ERROR][cart-service] Redis pool exhausted: could not get a resource from the pool (max 64)
  $.logs[1]: [09:12][WARN][cart-service] Redis pool stats: active=64/64, idle=0""")
_SEARCH_OBSERVATIONS = spotlight("""#3 query_logs(query='Elasticsearch timeout', service='search-service') -> no_evidence
  no-hit message: 未找到匹配的日志 (no log lines matched query='Elasticsearch timeout', service='search-service', level=None)""")


def executor_demos() -> list[dspy.Example]:
    """An alert, a log event that was found, and a search that found nothing, in the output shape
    the grammar allows. Numbers in a claim are copied from its excerpts."""
    disk = Claim(claim_id="claim-1", claim_type="observation",
                 claim_text="checkout-service 存在 DiskPressure 告警（firing），磁盘使用率 93%。",
                 evidence_bindings=[
                     {"tool_name": "query_metrics", "source_invocation_id": 7, "raw_path": "$.alerts[0]",
                      "evidence_excerpt": "DiskPressure firing, service=checkout-service, current=93%, threshold=85%, "
                                          "duration=6m"},
                     {"tool_name": "query_logs", "source_invocation_id": 8, "raw_path": "$.logs[0]",
                      "evidence_excerpt": "[10:40][WARN][checkout-service] disk usage 93% on /var/log"}])
    pool = Claim(claim_id="claim-1", claim_type="observation",
                 claim_text="cart-service 存在 Redis 连接池耗尽日志：Redis pool exhausted，active=64/64。",
                 evidence_bindings=[
                     {"tool_name": "query_logs", "source_invocation_id": 4, "raw_path": "$.logs[0]",
                      "evidence_excerpt": "[09:12][ERROR][cart-service] Redis pool exhausted: could not get a resource "
                                          "from the pool (max 64)"},
                     {"tool_name": "query_logs", "source_invocation_id": 4, "raw_path": "$.logs[1]",
                      "evidence_excerpt": "[09:12][WARN][cart-service] Redis pool stats: active=64/64, idle=0"}])
    search = Claim(claim_id="claim-1", claim_type="negative_observation",
                   claim_text="No Elasticsearch timeout log lines were found for search-service.",
                   evidence_bindings=[
                       {"tool_name": "query_logs", "source_invocation_id": 3, "raw_path": None,
                        "evidence_excerpt": "未找到匹配的日志 (no log lines matched query='Elasticsearch timeout', "
                                            "service='search-service', level=None)"}])
    return [
        dspy.Example(question="只确认 checkout-service 是否存在 DiskPressure 告警", retry_context="none",
                     plan=PlannerOutput(scope="narrow", target_services=["checkout-service"], topics=["DiskPressure"]),
                     observations=_DISK_OBSERVATIONS, claims=[disk], hypotheses=[],
                     missing_info=[MissingInfo(info_id="missing-1", description="磁盘增长的原因未知，需要查看 /var/log 下的文件。")],
                     recommended_actions=[]).with_inputs("question", "plan", "observations", "retry_context"),
        dspy.Example(question="确认 cart-service 是否存在 Redis 连接池耗尽。", retry_context="none",
                     plan=PlannerOutput(scope="narrow", target_services=["cart-service"], topics=["Redis 连接池耗尽"]),
                     observations=_POOL_OBSERVATIONS, claims=[pool], hypotheses=[], missing_info=[],
                     recommended_actions=[]).with_inputs("question", "plan", "observations", "retry_context"),
        dspy.Example(question="Does search-service log Elasticsearch timeouts?", retry_context="none",
                     plan=PlannerOutput(scope="narrow", target_services=["search-service"], topics=["Elasticsearch 超时"]),
                     observations=_SEARCH_OBSERVATIONS, claims=[search], hypotheses=[], missing_info=[],
                     recommended_actions=[]).with_inputs("question", "plan", "observations", "retry_context"),
    ]


def planner_demos() -> list[dspy.Example]:
    """An alert name goes to query_metrics, a log event (here a pool exhaustion) to query_logs."""
    return [
        dspy.Example(question="只确认 checkout-service 是否存在 DiskPressure 告警和磁盘写满日志，不要分析 search-service。",
                     plan=PlannerOutput(scope="narrow", target_services=["checkout-service"],
                                        topics=["DiskPressure", "磁盘写满"], excluded_topics=["search-service"]),
                     tool_calls=[ToolCall(tool_name="query_metrics", service="checkout-service", alert_name="DiskPressure"),
                                 ToolCall(tool_name="query_logs", query="disk full", service="checkout-service")],
                     ).with_inputs("question"),
        dspy.Example(question="确认 cart-service 是否存在 Redis 连接池耗尽。",
                     plan=PlannerOutput(scope="narrow", target_services=["cart-service"], topics=["Redis 连接池耗尽"]),
                     tool_calls=[ToolCall(tool_name="query_logs", query="Redis 连接池", service="cart-service")],
                     ).with_inputs("question"),
    ]

"""ToolTraceSummary: a slim navigation view of a session's tool calls, one entry per tool.

It is an overview for the verifier and auditors, never the evidence itself: claims are judged on
the gatekeeper-checked excerpts.
"""

from __future__ import annotations

from collections.abc import Iterable

from signatures.contracts import TraceSummaryEntry, ToolInvocation

LEVEL_BY_TOOL = {"query_metrics": "direct", "query_logs": "direct", "lookup_knowledge": "indirect"}
LABEL_BY_TOOL = {"query_metrics": "metric_evidence", "query_logs": "log_evidence", "lookup_knowledge": "runbook"}
MAX_ITEMS = 6
MAX_ITEM_CHARS = 160


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ITEM_CHARS else text[: MAX_ITEM_CHARS - 1] + "…"


def build_trace_summary(invocations: Iterable[ToolInvocation]) -> list[TraceSummaryEntry]:
    by_tool: dict[str, list[ToolInvocation]] = {}
    for inv in sorted(invocations, key=lambda i: i.id):
        by_tool.setdefault(inv.tool_name, []).append(inv)
    entries = []
    for n, (tool, calls) in enumerate(by_tool.items(), start=1):
        items: list[str] = []
        no_hit = 0
        has_refs = False
        for inv in calls:
            details = inv.retrieval_details
            if details.evidence_status == "no_evidence":
                no_hit += 1
                items.append(f"#{inv.id} no_hit: {details.message}")
            elif details.evidence_status == "failed":
                items.append(f"#{inv.id} failed: {details.message}")
            for ref in details.evidence_refs:
                has_refs = True
                items.append(f"#{inv.id} {ref.raw_path} {ref.text}")
        shown = [_clip(item) for item in items[:MAX_ITEMS]]
        if len(items) > MAX_ITEMS:
            shown.append(f"(+{len(items) - MAX_ITEMS} more)")
        entries.append(
            TraceSummaryEntry(
                trace_ref=f"trace-{n}",
                tool_name=tool,
                source_invocation_ids=[inv.id for inv in calls],
                evidence_level=LEVEL_BY_TOOL.get(tool, "indirect") if has_refs else "none",
                output_summary=f"{LABEL_BY_TOOL.get(tool, tool)}: " + " | ".join(shown),
                invocation_count=len(calls),
                no_hit_invocation_count=no_hit,
            )
        )
    return entries

"""ToolTraceSummary: a slim navigation view of a session's tool calls, one entry per tool.

It is an overview for the verifier and auditors, never the evidence itself: claims are judged on
the gatekeeper-checked excerpts.
"""

from __future__ import annotations

from collections.abc import Iterable

from contracts import ToolInvocation, TraceSummaryEntry
from tools.declaration import Toolbox
from tools.sources.limits import shortened

MAX_REFS_PER_CALL = 3
# Characters of one ref in the summary line: a summary, not the ref (the ref's own bound is the source's).
SUMMARY_REF_CHARS = 160


def _describe(inv: ToolInvocation) -> str:
    """One line per call, so a no-hit or a failure is never squeezed out by another call's refs."""
    details = inv.retrieval_details
    if details.evidence_status == "no_evidence":
        return f"#{inv.id} no_hit: {shortened(details.message, SUMMARY_REF_CHARS)}"
    if details.evidence_status == "failed":
        return f"#{inv.id} failed: {shortened(details.message, SUMMARY_REF_CHARS)}"
    refs = details.evidence_refs
    shown = [f"{ref.raw_path} {shortened(ref.text, SUMMARY_REF_CHARS)}" for ref in refs[:MAX_REFS_PER_CALL]]
    more = f" (+{len(refs) - MAX_REFS_PER_CALL} more refs)" if len(refs) > MAX_REFS_PER_CALL else ""
    return f"#{inv.id} " + " | ".join(shown) + more


def build_trace_summary(invocations: Iterable[ToolInvocation], toolbox: Toolbox) -> list[TraceSummaryEntry]:
    by_tool: dict[str, list[ToolInvocation]] = {}
    for inv in sorted(invocations, key=lambda i: i.id):
        by_tool.setdefault(inv.tool_name, []).append(inv)
    entries = []
    for n, (tool, calls) in enumerate(by_tool.items(), start=1):
        has_refs = any(inv.retrieval_details.evidence_refs for inv in calls)
        declaration = toolbox.get(tool)
        # A tool this toolbox does not declare is indirect at best: nothing says what its output proves.
        level = declaration.evidence if declaration else "indirect"
        entries.append(
            TraceSummaryEntry(
                trace_ref=f"trace-{n}",
                tool_name=tool,
                source_invocation_ids=[inv.id for inv in calls],
                evidence_level=level if has_refs else "none",
                output_summary=f"{declaration.label if declaration else tool}: "
                               + " || ".join(_describe(inv) for inv in calls),
                invocation_count=len(calls),
                no_hit_invocation_count=sum(inv.retrieval_details.evidence_status == "no_evidence" for inv in calls),
            )
        )
    return entries

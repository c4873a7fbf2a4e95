"""VerifierInputHook: the code between the executor and the verifier.

It applies the tightened auto-backfill, builds the trace summary, runs the gatekeeper, and
assembles the VerifierInput. Backfill fills only ``source_invocation_id``, only when exactly one
invocation of that tool exists in the session, never ``raw_path``, and always leaves a warning.
"""

from __future__ import annotations

from collections.abc import Iterable

from program.evidence import gatekeeper
from program.evidence.trace_summary import build_trace_summary
from contracts import (
    ExecutorOutput,
    Finding,
    ParseStatus,
    RetryContext,
    ToolInvocation,
    VerifierInput,
)
from tools.declaration import Toolbox


def backfill(
    output: ExecutorOutput, session_invocations: Iterable[ToolInvocation]
) -> tuple[ExecutorOutput, list[tuple[str, int]], list[Finding]]:
    by_tool: dict[str, list[int]] = {}
    for inv in session_invocations:
        by_tool.setdefault(inv.tool_name, []).append(inv.id)
    filled: list[tuple[str, int]] = []
    warnings: list[Finding] = []
    patched = output.model_copy(deep=True)
    owners = [(c.claim_id, "claim_id", c.evidence_bindings) for c in patched.claims]
    owners += [(a.action_id, "action_id", a.evidence_bindings) for a in patched.recommended_actions]
    for owner_id, key, bindings in owners:
        for index, binding in enumerate(bindings):
            if binding.source_invocation_id is not None:
                continue
            candidates = by_tool.get(binding.tool_name, [])
            if len(candidates) != 1:
                continue
            binding.source_invocation_id = candidates[0]
            filled.append((owner_id, index))
            raw = "raw_path remains missing" if not binding.raw_path else "raw_path was given by the executor"
            warnings.append(
                Finding(
                    rule="evidence.invocation_auto_backfill",
                    message=(
                        f"source_invocation_id was auto-filled with {candidates[0]}, the unique {binding.tool_name} "
                        f"invocation candidate; {raw}"
                    ),
                    binding_index=index,
                    **{key: owner_id},
                )
            )
    return patched, filled, warnings


class VerifierInputHook:
    def __init__(self, store, toolbox: Toolbox):
        self.store = store
        self.toolbox = toolbox

    def run(
        self,
        *,
        session_id: str,
        original_query: str,
        executor_output: ExecutorOutput,
        parse_status: ParseStatus,
        retry_context: RetryContext | None = None,
        prior_errors: Iterable[Finding] = (),
        session_invocations: list[ToolInvocation] | None = None,
    ) -> VerifierInput:
        """`prior_errors`: what was found before the gatekeeper ran (labels that name no citation);
        `session_invocations`: the session's calls as this store holds them, when the caller has
        read them already (check_citations reads them once for the hook and the claim checks)."""
        if session_invocations is None:
            session_invocations = self.store.list_invocations(session_id)
        patched, filled, warnings = backfill(executor_output, session_invocations)
        cited = {
            b.source_invocation_id
            for owner in [*patched.claims, *patched.recommended_actions]
            for b in owner.evidence_bindings
            if b.source_invocation_id is not None
        }
        known = {inv.id: inv for inv in session_invocations}
        known.update(self.store.get_invocations(cited - known.keys()))
        prior_errors = list(prior_errors)
        if parse_status.status != "valid":
            prior_errors.append(
                Finding(
                    rule="executor.output_malformed",
                    message=f"executor output was {parse_status.status}: {parse_status.detail}",
                )
            )
        result = gatekeeper.check(
            patched,
            known,
            session_id,
            backfilled=filled,
            prior_errors=prior_errors,
            prior_warnings=warnings,
            toolbox=self.toolbox,
        )
        return VerifierInput(
            original_query=original_query,
            executor_structured_output=patched,
            gatekeeper_result=result,
            tool_trace_summary=build_trace_summary(session_invocations, self.toolbox),
            executor_output_parse_status=parse_status,
            retry_context=retry_context,
        )

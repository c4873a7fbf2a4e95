"""The checks that follow citation, as one function: the hook (backfill, trace summary, gatekeeper)
and the code checks that decide whether a claim could still be verified.

The pipeline calls it after every executor attempt, and the devset metric calls it on every
candidate's output, so what the optimizer is scored on is what a diagnosis is judged by.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from program.evidence.hook import VerifierInputHook
from program.evidence.relevance import Target
from program.evidence.verdict import CitedRef, cited_refs, claim_blockers
from signatures.contracts import (
    Claim,
    ExecutorOutput,
    Finding,
    GatekeeperResult,
    ParseStatus,
    RetryContext,
    ToolInvocation,
    VerifierInput,
)
from tools.declaration import Toolbox


@dataclass
class Checked:
    verifier_input: VerifierInput
    # What each claim's passing bindings point at.
    cited: dict[str, list[CitedRef]]
    # Why code will not let a claim be verified, whatever the verifier says.
    blockers: dict[str, list[Finding]]

    @property
    def gate(self) -> GatekeeperResult:
        return self.verifier_input.gatekeeper_result

    @property
    def claims(self) -> list[Claim]:
        return self.verifier_input.executor_structured_output.claims

    @cached_property
    def failed(self) -> set[str]:
        """Claims the gatekeeper found fault with: a failed binding, or a finding of its own (a label
        that names no citation never becomes a binding, so it is only a finding)."""
        return ({cb.claim_id for cb in self.gate.checked_bindings if cb.status != "pass" and cb.claim_id}
                | {f.claim_id for f in self.gate.errors if f.claim_id})

    @property
    def verifiable(self) -> list[Claim]:
        """Claims the gatekeeper found no fault with and no code check blocks: what the verifier may
        judge. Not cached: the second look adds blockers after the check."""
        failed = self.failed
        return [c for c in self.claims if c.claim_id not in failed and c.claim_id not in self.blockers
                and c.evidence_bindings]


def check_citations(store, *, session_id: str, question: str, output: ExecutorOutput, parse_status: ParseStatus,
                    invocations: Iterable[ToolInvocation], target: Target, toolbox: Toolbox,
                    refused: Iterable[Finding] = (), excluded_terms: tuple[str, ...] = (),
                    names: tuple[str, ...] = (), topics: list[tuple[str, ...]] = (),
                    retry_context: RetryContext | None = None) -> Checked:
    """`refused` are the labels the citation step could not expand: fabricated citations; `names`
    and `topics` are the active catalog's (`Catalog.names`, `Catalog.topic_groups()`)."""
    verifier_input = VerifierInputHook(store, toolbox).run(
        session_id=session_id, original_query=question, executor_output=output, parse_status=parse_status,
        retry_context=retry_context, prior_errors=refused)
    gate = verifier_input.gatekeeper_result
    claims = verifier_input.executor_structured_output.claims
    cited = cited_refs(gate, invocations, toolbox)
    return Checked(verifier_input=verifier_input, cited=cited,
                   blockers=claim_blockers(claims, cited, target, excluded_terms, names, topics))

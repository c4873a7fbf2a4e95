"""The citation menu: what an executor may cite in one session, each under a label it points at.

An LM that points writes a label (`#3 $.logs[1]`, `#3 $.alerts[0] §2`, `#3 no-hit`) and code
writes the binding: the tool, the invocation id, the raw_path and the exact text, as Anthropic's
Citations API extracts the quote the model points at. The expanded binding is the seed's binding
contract and goes through the gatekeeper unchanged; a label that names nothing on the menu is
refused as a fabricated citation. An LM that writes free text may still quote a ref in full, and
the gatekeeper is then the only check between its quote and the ref.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from program.evidence.gatekeeper import UNKNOWN_LABEL
from program.evidence.matching import match_excerpt
from signatures.contracts import Claim, ClaimDraft, EvidenceBinding, Finding, ToolInvocation
from tools.recorder import citation_label

# Clause boundaries inside a ref: "HighMemoryUsage firing, ...; JVM heap usage 3.8GB/4GB; ...".
CLAUSE = re.compile(r"\s*[;；]\s*")


@dataclass(frozen=True)
class Citation:
    label: str
    tool_name: str
    invocation_id: int
    raw_path: str | None  # None: the no-hit message of a search that found nothing
    excerpt: str

    @property
    def hit(self) -> bool:
        return self.raw_path is not None

    def binding(self) -> EvidenceBinding:
        return EvidenceBinding(tool_name=self.tool_name, source_invocation_id=self.invocation_id,
                               raw_path=self.raw_path, evidence_excerpt=self.excerpt)


def clauses(text: str) -> list[str]:
    """A ref's clauses, numbered from 1, when it has more than one; a clause the gatekeeper would
    not accept as an excerpt of its ref (too short to say anything) is left empty, so that the
    numbers stay those of the ref's own clauses."""
    parts = CLAUSE.split(text)
    if len([p for p in parts if p]) < 2:
        return []
    return [p if p and match_excerpt(p, text).ok else "" for p in parts]


class Menu:
    """Every citation of a session, by label, in the order the observations show them."""

    def __init__(self, invocations: Iterable[ToolInvocation]):
        self.citations: dict[str, Citation] = {}
        for inv in invocations:
            details = inv.retrieval_details
            for ref in details.evidence_refs:
                self._add(Citation(citation_label(inv.id, ref.raw_path), inv.tool_name, inv.id, ref.raw_path, ref.text))
                for number, clause in enumerate(clauses(ref.text), start=1):
                    if clause:
                        self._add(Citation(citation_label(inv.id, ref.raw_path, number), inv.tool_name, inv.id,
                                           ref.raw_path, clause))
            if details.evidence_status == "no_evidence" and details.message:
                self._add(Citation(citation_label(inv.id, None), inv.tool_name, inv.id, None, details.message))

    def _add(self, citation: Citation) -> None:
        self.citations.setdefault(citation.label, citation)

    @property
    def hits(self) -> list[str]:
        return [label for label, c in self.citations.items() if c.hit]

    @property
    def no_hits(self) -> list[str]:
        return [label for label, c in self.citations.items() if not c.hit]

    def expand(self, drafts: Iterable[ClaimDraft]) -> tuple[list[Claim], list[Finding]]:
        """Claims in the seed's contract: each label becomes the binding it names, a quoted binding
        stays as written, and a label that names nothing on the menu is refused."""
        claims, refused = [], []
        for number, draft in enumerate(drafts, start=1):
            claim_id = draft.claim_id or f"claim-{number}"
            bindings = []
            for index, cited in enumerate(draft.evidence_bindings):
                if isinstance(cited, EvidenceBinding):
                    bindings.append(cited)
                elif (citation := self.citations.get(cited.strip())) is not None:
                    bindings.append(citation.binding())
                else:
                    refused.append(Finding(rule=UNKNOWN_LABEL, claim_id=claim_id, binding_index=index, message=(
                        f"{cited!r} is not a label of this session's citations; labels look like "
                        f"{', '.join(list(self.citations)[:3]) or '(none: nothing can be cited)'}")))
            claims.append(Claim(claim_id=claim_id, claim_type=draft.claim_type, claim_text=draft.claim_text,
                                evidence_bindings=bindings))
        return claims, refused

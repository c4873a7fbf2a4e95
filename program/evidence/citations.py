"""The citation menu: what an executor may cite in one session, each under a label it points at.

An LM that points writes a label (`#3 $.logs[1]`, `#3 $.alerts[0] §2`, `#3 no-hit`) and code
writes the binding: the tool, the invocation id, the raw_path and the exact text, as Anthropic's
Citations API extracts the quote the model points at. The expanded binding is the seed's binding
contract and goes through the gatekeeper unchanged; a label that names nothing on the menu is
refused as a fabricated citation. An LM that writes free text may still quote a ref in full, and
the gatekeeper is then the only check between its quote and the ref.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from program.evidence.gatekeeper import UNKNOWN_LABEL
from program.evidence.language import say
from program.evidence.matching import clauses, match_excerpt
from program.evidence.screen import Screening
from contracts import ANSWERS, Claim, ClaimDraft, EvidenceBinding, Finding, Language, RefDecision, ToolInvocation
from tools.recorder import canonical_label, citation_label


# A binding the executor cited although it decided its ref does not answer the question.
SET_ASIDE = "executor.set_aside"
# A claim that cites only refs the executor decided do not answer: kept whole, for the checks to judge.
DISAGREES = "executor.decision_disagrees"


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


class Menu:
    """Every citation of a session, by label, in the order the observations show them. `offered`
    are the labels a constrained LM may choose: a clause the gatekeeper would not accept as an
    excerpt of its ref (too short to say anything, or cut after a negation) is not offered, but a
    free LM that names it gets its binding, and the gatekeeper's verdict on it. Nor are `withheld`
    labels: on a retry's menu, the no-hits whose "nothing found" a second look contradicted; nor the
    labels code set aside (`screening`: refs of another service or topic, what the user excluded)."""

    def __init__(self, invocations: Iterable[ToolInvocation], withheld: Iterable[str] = (),
                 screening: Screening | None = None):
        self.citations: dict[str, Citation] = {}
        self.offered: list[str] = []
        self.screening = screening or Screening()
        self.withheld = frozenset(withheld) | frozenset(self.screening.labels)
        for inv in invocations:
            details = inv.retrieval_details
            for ref in details.evidence_refs:
                self._add(Citation(citation_label(inv.id, ref.raw_path), inv.tool_name, inv.id, ref.raw_path, ref.text))
                for number, clause in enumerate(clauses(ref.text), start=1):
                    if clause:
                        self._add(Citation(citation_label(inv.id, ref.raw_path, number), inv.tool_name, inv.id,
                                           ref.raw_path, clause), offer=match_excerpt(clause, ref.text).ok)
            if details.evidence_status == "no_evidence" and details.message:
                self._add(Citation(citation_label(inv.id, None), inv.tool_name, inv.id, None, details.message))

    def _add(self, citation: Citation, *, offer: bool = True) -> None:
        if citation.label not in self.citations:
            self.citations[citation.label] = citation
            if offer and citation.label not in self.withheld:
                self.offered.append(citation.label)

    @property
    def hits(self) -> list[str]:
        return [label for label in self.offered if self.citations[label].hit]

    @property
    def no_hits(self) -> list[str]:
        return [label for label in self.offered if not self.citations[label].hit]

    @property
    def refs(self) -> list[str]:
        """The labels the executor decides on before it cites: each whole ref and each no-hit it is
        offered, not their clauses, and each ref only some of whose clauses it is offered."""
        partly = {(self.citations[o].invocation_id, self.citations[o].raw_path) for o in self.offered}
        return [label for label, c in self.citations.items() if label == citation_label(c.invocation_id, c.raw_path)
                and (label in self.offered or (label in self.screening.labels and label not in self.screening.refs
                                               and (c.invocation_id, c.raw_path) in partly))]

    def answering(self, drafts: Iterable[ClaimDraft], decisions: dict[str, RefDecision]
                  ) -> tuple[list[ClaimDraft], list[Finding]]:
        """The drafts with only the bindings whose ref the executor decided answers the question, and
        what was set aside. Only a label is set aside: code writes its quote, so nothing false goes
        unchecked, while a quoted binding always reaches the gatekeeper, which a decision must not
        spare a fabricated excerpt. A ref it decided nothing about keeps its binding (an LM that
        writes no decisions cites as it wrote). A draft none of whose refs it decided answers keeps
        them all, and the disagreement is noted: its decisions and its claim say opposite things,
        and the checks, not a guess at which is right, judge the claim (the 1.5B called the no-hit
        of a right "nothing found" irrelevant, then cited it)."""
        kept, set_aside = [], []
        for number, draft in enumerate(drafts, start=1):
            bindings, found = [], []
            for cited in draft.evidence_bindings:
                citation = None if isinstance(cited, EvidenceBinding) else self.lookup(cited)
                ref = citation_label(citation.invocation_id, citation.raw_path) if citation is not None else None
                decision = decisions.get(ref) if ref is not None else None
                if decision is None or decision == ANSWERS:
                    bindings.append(cited)
                else:
                    found.append(Finding(rule=SET_ASIDE, claim_id=draft.claim_id, message=(
                        f"claim {number} as written cited {ref}, which the executor decided is {decision}, "
                        f"not an answer; that binding was set aside")))
            if bindings or not draft.evidence_bindings:
                set_aside += found
                kept.append(draft.model_copy(update={"evidence_bindings": bindings}))
            else:
                set_aside.append(Finding(rule=DISAGREES, claim_id=draft.claim_id, message=(
                    f"claim {number} cites only refs the executor decided do not answer the question; its "
                    f"bindings were kept, and the checks judge it")))
                kept.append(draft)
        return kept, set_aside

    def lookup(self, written: str) -> Citation | None:
        label = canonical_label(written)
        if label is None:
            return None
        if label not in self.citations and label.endswith(" §1"):
            # The first clause of a ref that has only one is the whole ref.
            whole = self.citations.get(label.removesuffix(" §1"))
            return whole if whole is not None and not clauses(whole.excerpt) else None
        return self.citations.get(label)

    def expand(self, drafts: Iterable[ClaimDraft], language: Language | None = None, taken: Iterable[str] = ()
               ) -> tuple[list[Claim], list[Finding]]:
        """Claims in the seed's contract: each label becomes the binding it names, a quoted binding
        stays as written, and a label that names nothing on the menu is refused. Claims keep the ids
        the LM gave them where those are unique and not `taken` (by claims that stand beside them);
        the others are numbered. A claim whose text is empty only points: given the answer's
        `language`, its text is the quote of what it cites (`quoted`), as the Citations API extracts it."""
        drafts = list(drafts)
        used: set[str] = set(taken)
        given = {d.claim_id for d in drafts if d.claim_id} | used
        claims, refused = [], []
        for number, draft in enumerate(drafts, start=1):
            if draft.claim_id and draft.claim_id not in used:
                claim_id = draft.claim_id
            else:
                while f"claim-{number}" in used or f"claim-{number}" in given:
                    number += 1
                claim_id = f"claim-{number}"
            used.add(claim_id)
            bindings = []
            for position, cited in enumerate(draft.evidence_bindings):
                if isinstance(cited, EvidenceBinding):
                    bindings.append(cited)
                elif (citation := self.lookup(cited)) is not None:
                    bindings.append(citation.binding())
                else:
                    # No binding index: the refused label never became a binding, and the
                    # gatekeeper's indexes count the bindings that did.
                    refused.append(Finding(rule=UNKNOWN_LABEL, claim_id=claim_id, message=(
                        f"binding {position} of the claim as written, {cited!r}, is not a label of this session's "
                        f"citations; labels look like {', '.join(self.offered[:3]) or '(none: nothing can be cited)'}")))
            text = draft.claim_text
            if not text.strip() and language is not None and bindings:
                text = say(language, "quoted", quote=quoted(bindings))
            claims.append(Claim(claim_id=claim_id, claim_type=draft.claim_type, claim_text=text,
                                evidence_bindings=bindings))
        return claims, refused


# A quote names at most this many refs: a claim pointing at every line of a call says the first few.
QUOTED_REFS = 3


def first_clause(excerpt: str) -> str:
    """What a ref says first: an alert's name, state, service and values; a whole line."""
    return excerpt.split(";")[0].strip()


def quoted(bindings: list[EvidenceBinding]) -> str:
    """The first clause of each distinct ref the bindings cite, at most QUOTED_REFS; a claim citing
    only no-hits quotes their messages."""
    hits = [b for b in bindings if b.raw_path and b.evidence_excerpt]
    said = dict.fromkeys(first_clause(b.evidence_excerpt) for b in (hits or bindings) if b.evidence_excerpt)
    return "; ".join(list(said)[:QUOTED_REFS])

"""The checks that follow citation, as one function: the hook (backfill, trace summary, gatekeeper)
and the code checks that decide whether a claim could still be verified; and what they make of an
attempt as an assertion: its reward, and what a new attempt is told in the checks' own words.

The pipeline calls it after every executor attempt, and the devset metric calls it on every
candidate's output, so what the optimizer is scored on is what a diagnosis is judged by.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from program.evidence.citations import first_clause
from program.evidence.hook import VerifierInputHook
from program.evidence.names import ungrounded_names
from program.evidence.numbers import ungrounded_numbers
from program.evidence.relevance import Target, unanswered
from program.evidence.scope import Exclusion
from program.evidence.screen import Screen
from program.evidence.verdict import BELOW_LIMIT, CitedRef, cited_refs, claim_blockers
from contracts import (
    Claim,
    ExecutorOutput,
    Finding,
    GatekeeperResult,
    ParseStatus,
    Relocated,
    RetryContext,
    ToolInvocation,
    VerifierInput,
)
from tools.declaration import Toolbox
from tools.recorder import citation_label


@dataclass
class Checked:
    verifier_input: VerifierInput
    # What each claim's passing bindings point at.
    cited: dict[str, list[CitedRef]]
    # Why code will not let a claim be verified, whatever the verifier says.
    blockers: dict[str, list[Finding]]
    # What the question asks about that a search found nothing of and no claim speaks of; it blocks
    # no claim, and a new attempt is told.
    unanswered: list[Finding] = field(default_factory=list)

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


@dataclass(frozen=True)
class CitationCheck:
    """What `check_citations` checks: one executor attempt of a session, and what its claims are held
    to. `refused` are the labels the citation step could not expand: fabricated citations; `names`
    and `topics` are the active catalog's (`Catalog.names`, `Catalog.topic_groups()`)."""

    session_id: str
    question: str
    output: ExecutorOutput
    parse_status: ParseStatus
    target: Target
    refused: tuple[Finding, ...] = ()
    excluded: Exclusion = Exclusion()
    names: tuple[str, ...] = ()
    topics: tuple[tuple[str, ...], ...] = ()
    retry_context: RetryContext | None = None
    # The longest claim text the response schema allowed (None: not narrowed): a text that long was cut off.
    text_cap: int | None = None
    # What code sets aside of the session's calls before the executor is asked (None: nothing); a
    # claim that cites it anyway is blocked.
    screen: Screen | None = None


def check_citations(store, toolbox: Toolbox, check: CitationCheck) -> Checked:
    """The hook, the gatekeeper and the claim checks on one attempt. The session's tool calls are
    read from the store, once: the record the gatekeeper checks against is what the claims' refs are
    read from too."""
    invocations = store.list_invocations(check.session_id)
    verifier_input = VerifierInputHook(store, toolbox).run(
        session_id=check.session_id, original_query=check.question, executor_output=check.output,
        parse_status=check.parse_status, retry_context=check.retry_context, prior_errors=check.refused,
        session_invocations=invocations)
    gate = verifier_input.gatekeeper_result
    claims = verifier_input.executor_structured_output.claims
    cited = cited_refs(gate, invocations, toolbox)
    blockers = claim_blockers(claims, cited, check.target, check.excluded, check.names, list(check.topics))
    screening = check.screen(invocations) if check.screen is not None else None
    for claim in claims:
        for ref in cited.get(claim.claim_id, []) if screening is not None else ():
            aside = screening.refused(ref.invocation_id, ref.raw_path, ref.context) if ref.invocation_id is not None else None
            if aside is not None:
                blockers.setdefault(claim.claim_id, []).append(Finding(
                    rule=SET_ASIDE, claim_id=claim.claim_id, message=(
                        f"it cites {citation_label(ref.invocation_id, ref.raw_path)}, which code set aside as "
                        f"{aside.decision}: {aside.reason}")))
        if moved := _cited_again(claim, check.retry_context):
            blockers.setdefault(claim.claim_id, []).append(
                Finding(rule=CITED_AGAIN, claim_id=claim.claim_id, message=moved))
        if check.text_cap is not None and len(claim.claim_text) >= check.text_cap:
            # Grammar-constrained decoding ends the string at the cap, often mid-word: what is left is
            # not the statement the model was writing, so no part of it is verified.
            blockers.setdefault(claim.claim_id, []).append(Finding(
                rule=CUT_OFF, claim_id=claim.claim_id, message=(
                    f"the claim was cut off at {check.text_cap} characters, the most the response schema allows: "
                    "say it in fewer words, citing only the refs that answer the question")))
    spoken = [c.claim_text for c in claims] + [text for refs in cited.values() for ref in refs
                                               for text in (ref.text, ref.searched if ref.no_hit else "")]
    left = unanswered(spoken, invocations, check.target, frozenset(screening.labels) if screening else frozenset())
    return Checked(verifier_input=verifier_input, cited=cited, blockers=blockers, unanswered=[Finding(
        rule=UNANSWERED, message=(f"the question asks about {u.asked}; {u.label} ({u.call}) found nothing, and no "
                                  "claim says so")) for u in left] if claims else [])


def _cited_again(claim: Claim, context: RetryContext | None) -> str | None:
    """Why a claim of a retry cites again only refs a refused claim cited, none of those that code
    said hold the facts that claim wrote, or None. What those refs say is not what the refused claim
    answered: the 1.5B, told "850ms … is in #31 $.logs[4]", pointed at the memory line it had cited,
    and code's quote of it read as an answer about GC pauses (bench-20261207T054349Z)."""
    if context is None or claim.claim_id in context.kept:
        return None
    labels = set(_labels(claim))
    for claim_id in dict.fromkeys(r.claim_id for r in context.relocated):
        moves = [r for r in context.relocated if r.claim_id == claim_id]
        holding = [r.holding for r in moves]
        if labels and labels <= set(moves[0].cited) and not labels & set(holding):
            written = ", ".join(dict.fromkeys(w for r in moves for w in r.written))
            return (f"attempt {context.attempt} wrote {written} citing {', '.join(moves[0].cited)}, which lacks them; "
                    f"they are in {', '.join(holding)}, and this claim cites {', '.join(sorted(labels))} again")
    return None


CUT_OFF = "verdict.cut_off"
# A retry's claim that cites again only what a refused claim cited, though code said where its facts are.
CITED_AGAIN = "verdict.cited_again"
# A claim citing a ref (or clause) that code set aside before the executor was asked.
SET_ASIDE = "verdict.set_aside"
# An asked thing a search found nothing of, which no claim speaks of (Checked.unanswered).
UNANSWERED = "verdict.unanswered"


# What a new attempt can fix by what a claim says or cites, so the executor is told and asked once
# more. Left out, and why: verdict.unread_search (no wording proves an absence the search did not
# read for, and what went unread is on no menu); verdict.bidi_control and verdict.restated_instruction
# (hostile text: a retry would give it a second try, and telling why would quote it back); a
# gatekeeper low_confid (a citation with a part missing), as before.
REVISABLE = frozenset({
    "verdict.state_conflict", "verdict.absence_on_hit", "verdict.no_hit_positive", "verdict.ungrounded_number",
    "verdict.misbound_number", "verdict.off_topic", "verdict.ungrounded_name", "verdict.ungrounded_topic",
    "verdict.excluded_topic", "verdict.runbook_only", "verdict.backfill_only", "verdict.second_look", CUT_OFF,
    SET_ASIDE, CITED_AGAIN, BELOW_LIMIT, UNANSWERED})
# The rules that refuse hostile text: a claim they refuse gets no second look either, which would
# give it a new attempt.
HOSTILE = frozenset({"verdict.bidi_control", "verdict.restated_instruction"})
SEVERITY_RANK = {"none": 2, "low_confid": 1, "reject": 0}


@dataclass
class Review:
    """What the checks made of one executor attempt, as dspy.Refine's reward function would: a
    score, and the feedback a new attempt gets, here the checks' own findings (`retry`, None when
    code blocked nothing a new attempt could fix). `invocations` are the session's calls as a new
    attempt would see them, the calls the checks made themselves (`new_calls`, a second look)
    included; `possible_matches`, the lines a second look found."""

    checked: Checked
    retry: RetryContext | None = None
    invocations: list[ToolInvocation] = field(default_factory=list)
    new_calls: list[int] = field(default_factory=list)
    possible_matches: list[str] = field(default_factory=list)
    # Labels a new attempt is not offered: the no-hits whose "nothing found" a second look contradicted.
    withheld: tuple[str, ...] = ()

    @property
    def found(self) -> list[str]:
        """The labels of the refs a second look found that may answer the question (on a new attempt's menu)."""
        return [citation_label(inv.id, ref.raw_path) for inv in self.invocations if inv.id in self.new_calls
                for ref in inv.retrieval_details.evidence_refs if ref.raw_path and ref.text in self.possible_matches]

    @property
    def score(self) -> tuple[int, int]:
        """Higher is better: the gatekeeper's severity first, then how many claims code lets the verifier judge."""
        return SEVERITY_RANK.get(self.checked.gate.severity, 0), len(self.checked.verifiable)


def retry_context(checked: Checked, attempt: int, more: list[Finding] = ()) -> RetryContext | None:
    """What a new attempt is told: the gatekeeper's findings after a reject, every finding of a
    code check a new attempt can fix (REVISABLE), what the answer left unanswered, and `more` (what a
    second look found when the attempt wrote no claim); None when there is nothing to tell."""
    gate = checked.gate
    findings = list(gate.errors) if gate.severity == "reject" else []
    findings += [f for found in checked.blockers.values() for f in found if f.rule in REVISABLE]
    findings += checked.unanswered + list(more)
    if not findings:
        return None
    return RetryContext(attempt=attempt, failed_rules=list(dict.fromkeys(f.rule for f in findings)), errors=findings)


def relocated(context: RetryContext, claims: list[Claim], offered: dict[str, str]) -> list[Relocated]:
    """For each claim refused for a number or name its citations lack, the refs among those a new
    attempt is `offered` (label -> text) that hold them; `repointable` where the claim was refused for
    nothing else and the ref is the only one offered that holds all of it."""
    rules = _by_claim(context.errors)
    moves = []
    for claim in claims:
        found = {f.rule for f in rules.get(claim.claim_id, [])}
        if not found & UNGROUNDED:
            continue
        places, missing = _where_written_is(claim, offered)
        whole = [label for label, written in places if set(written) == set(missing)]
        moves += [Relocated(claim_id=claim.claim_id, cited=_labels(claim), written=written, holding=label,
                            repointable=found <= UNGROUNDED and whole == [label])
                  for label, written in places]
    return moves


def _labels(claim: Claim) -> list[str]:
    return list(dict.fromkeys(citation_label(b.source_invocation_id, b.raw_path)
                              for b in claim.evidence_bindings if b.source_invocation_id is not None))


def retry_text(context: RetryContext, claims: list[Claim], found: list[str] = ()) -> str:
    """The retry context as the executor reads it: the attempt code refused (each refused claim named
    with what it cited, and what that shows), and why, in the checks' words; where the numbers and
    names it wrote that what it cited lacks do occur (`context.relocated`); and the refs that code's
    own new search found (`found`, their labels), which may answer the question. A refused claim's
    text is never shown: a small model decoding greedily copies the text nearest its answer, and
    quoted, the refused claim was copied word for word in two of four retries of presumed states
    (bench-20261202T080257Z), as shown as an answer it was in five of seven (bench-20261202T024922Z)."""
    written = {c.claim_id: c for c in claims}
    lines = [f"Code refused attempt {context.attempt}. Write each refused claim anew so that none of its findings "
             "holds (its state, service, numbers and type as the labels it cites show them), or leave it out."]
    if context.kept:
        # Asked to point, the 1.5B pointed at the alert again and nothing else, whether its claim had
        # passed or not (seven cases of results/20261207T120521Z).
        # The wording the runs that measured it sent (results/20261207T130300Z, 20261207T132226Z,
        # bench-20261207T132737Z), which replay only the requests they made.
        lines.append(f"{', '.join(context.kept)} passed the checks and {'stands' if len(context.kept) == 1 else 'stand'}"
                     " as written: do not write it again; the refs it cites are not offered.")
    for claim_id, findings in _by_claim(context.errors).items():
        claim = written.get(claim_id)
        if claim is None:
            lines.append("Left unanswered:" if {f.rule for f in findings} == {UNANSWERED} else "Refused: the output")
        else:
            cited = ", ".join(_labels(claim)) or "nothing"
            lines.append(f"Refused {claim.claim_id}: the {claim.claim_type} citing {cited}")
        lines += [f"- {finding.rule}: {finding.message}" for finding in findings]
        # The 1.5B writes the numbers of one line and points at its neighbour (bench-20261207T040208Z:
        # a pool's "active=50/50, waiting=32" citing the timeout line beside it, a GC pause citing the
        # memory line after it): where they are is what a new attempt can point at.
        lines += [f"- {', '.join(r.written)}, which it wrote, {'is' if len(r.written) == 1 else 'are'} in {r.holding}"
                  for r in context.relocated if r.claim_id == claim_id]
        # What it cited, said last: a small model copies the nearest text, so that should be the evidence.
        lines += [f"- {label} shows: {text}" for label, text in _shown(claim)]
    if found:
        lines.append(f"Code searched again and found {', '.join(found)}: cite those that answer the question, "
                     "and say what they show.")
    return "\n".join(lines)


# The findings that say a claim wrote a number or a name that what it cites lacks.
UNGROUNDED = frozenset({"verdict.ungrounded_number", "verdict.misbound_number", "verdict.ungrounded_name"})


def _where_written_is(claim: Claim, offered: dict[str, str], most: int = 3) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """The offered refs (label -> text) that hold numbers or names the claim wrote and none of its
    citations holds, each with those it holds, at most `most`, those holding the most first; and all
    that it wrote and its citations lack."""
    cited = [b.evidence_excerpt for b in claim.evidence_bindings if b.evidence_excerpt]

    def lacking(texts: list[str]) -> list[str]:
        return [*ungrounded_numbers(claim.claim_text, texts), *ungrounded_names(claim.claim_text, texts, ())]

    missing = lacking(cited)
    # A number written inside a name (32 in waiting=32, 1 in /api/v1) is said once, with the name;
    # 5 beside active=50/50 is a number of its own.
    missing = [w for w in dict.fromkeys(missing) if not any(
        w != other and re.search(r"[^\W\d_]", other) and re.search(rf"(?<![\d.]){re.escape(w)}(?!\.?\d)", other)
        for other in missing)]
    holding = {label: [w for w in missing if w not in set(lacking([text]))] for label, text in offered.items()}
    ranked = sorted((label for label, held in holding.items() if held), key=lambda label: -len(holding[label]))
    return [(label, holding[label]) for label in ranked[:most]], missing


def _shown(claim: Claim | None, most: int = 3) -> list[tuple[str, str]]:
    """The first clause of each ref the claim cited (an alert's name, state, service and values; a
    line), at most `most`; no-hits say nothing a new claim could state."""
    shown = {}
    for binding in claim.evidence_bindings if claim is not None else ():
        if binding.raw_path and binding.source_invocation_id is not None and binding.evidence_excerpt:
            label = citation_label(binding.source_invocation_id, binding.raw_path)
            shown.setdefault(label, first_clause(binding.evidence_excerpt))
    return list(shown.items())[:most]


def _by_claim(findings: list[Finding]) -> dict[str | None, list[Finding]]:
    grouped: dict[str | None, list[Finding]] = {}
    for finding in findings:
        grouped.setdefault(finding.claim_id, []).append(finding)
    return grouped

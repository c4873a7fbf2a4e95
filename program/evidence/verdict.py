"""The verdict, decided in code from the gatekeeper, the checks below and the verifier's judgements.

The verdict table of the design document, enforced whatever an LM said:

| gatekeeper | claims                                             | verdict    |
| ---------- | -------------------------------------------------- | ---------- |
| reject     | any                                                | REJECT     |
| low_confid | any (the verifier is not asked)                    | LOW_CONFID |
| pass       | an evidence stage failed (planner, tools, executor, verifier) | LOW_CONFID |
| pass       | a claim the verifier found contradicted, and code agrees | REJECT |
| pass       | at least one verified claim                        | PASS       |
| pass       | no verified claim                                  | LOW_CONFID |

A claim is verified only when all its bindings passed the gatekeeper, no code check blocks it
(``claim_blockers``), and the verifier judged it supported. A composer failure does not move the
verdict: the answer then falls back to the deterministic one, built only from verified claims.
Code never upgrades a doubt: a "contradicted" that code cannot see in the excerpts becomes
LOW_CONFID (a recorded disagreement), never PASS. Every override is a finding in the audit record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from program.evidence.absence import ABSENCE
from program.evidence.capacity import below_limit
from program.evidence.characters import bidi_controls
from program.evidence.injection import restated_instruction, rests_on_direction
from program.evidence.names import IDENTIFIER, ungrounded_names
from program.evidence.relevance import Target, off_topic, unnamed_topics
from program.evidence.scope import Exclusion
from program.evidence.numbers import misbound_numbers, ungrounded_numbers
from program.evidence.statements import (
    CLEARED_STATES,
    NEGATION,
    RAISED_STATES,
    negated,
    outside_state_denials,
    said_state,
    state_conflicts,
)
from contracts import (
    JUDGEMENT_STATUS,
    LOCATOR,
    STATUS_VERDICT,
    Claim,
    ClaimJudgement,
    Finding,
    GatekeeperResult,
    ToolInvocation,
)
from contracts.record import VerifiedClaim, VerifierEvaluation
from tools.declaration import Toolbox
from tools.text.folding import nfkc
from tools.recorder import call_text


# A claim that says what its evidence asks the reader to say: an instruction obeyed.
RESTATED_INSTRUCTION = "verdict.restated_instruction"
# A claim that its resource is at its limit and gives a measure of the line it cites that is below it.
BELOW_LIMIT = "verdict.below_limit"
# A claim whose every cited line tells its reader what to conclude: such a line is no evidence.
DIRECTED_EVIDENCE = "verdict.directed_evidence"

# The second look before an all-clear: a line of the target's own logs that matches at least this
# share of the question's concepts (rounded up, at least one; tools/text/search.py) is a plausible match,
# and a plausible match blocks "nothing found".
SECOND_LOOK_SHARE = 0.5
LEVEL_RANK = {"ERROR": 0, "FATAL": 0, "CRITICAL": 0, "WARN": 1, "WARNING": 1}


def second_look_blocker(claim_id: str | None, possible: list[str], failed: str | None) -> Finding | None:
    """Why a negative observation is not an all-clear after code looked again, or None."""
    if failed:
        return Finding(rule="verdict.second_look", claim_id=claim_id,
                       message=f"code could not look again before an all-clear ({failed}), so 'nothing found' is "
                               "not verified")
    if possible:
        return Finding(rule="verdict.second_look", claim_id=claim_id,
                       message=f"{len(possible)} line(s) of the target's own logs match at least "
                               f"{SECOND_LOOK_SHARE:.0%} of the question's words, so 'nothing found' is not "
                               f"verified; first: {possible[0]!r}")
    return None


def unread_message(refs: list[CitedRef]) -> str:
    """Why a no-hit that did not read every line in its scope cannot ground "nothing found"."""
    parts = [f"{ref.searched} did not read {len(ref.unread)} place(s) in its scope (first: {ref.unread[0]})"
             for ref in refs]
    return "; ".join(parts) + ": a search that did not read every line cannot prove that nothing is there"


# A number or an identifier with digits ("502", "HikariPool-1", "30000ms"): the search matches one only when equal.
EXACT_WORD = re.compile(r"(?<![\w.\-/])[\w.\-/]*\d[\w.\-/]*(?![\w.\-/])")


def plausible(lines: list[str], words: str) -> list[str]:
    """The lines a second look found that may answer the question: a number or an identifier with
    digits that the question names is never optional ("502 errors" is not answered by a line
    without 502, whatever share of the other words it has)."""
    exact = [w.casefold() for w in EXACT_WORD.findall(nfkc(words))]
    return [line for line in lines if all(w in nfkc(line).casefold() for w in exact)]


def ranked_lines(invocation: ToolInvocation, items: str) -> list[str]:
    """The refs of an invocation, ERROR and WARN lines first."""
    output = invocation.output.get(items) if isinstance(invocation.output, dict) else None
    levels = [str(item.get("level", "")).upper() if isinstance(item, dict) else "" for item in output or []]
    refs = invocation.retrieval_details.evidence_refs
    order = sorted(range(len(refs)), key=lambda i: LEVEL_RANK.get(levels[i] if i < len(levels) else "", 2))
    return [refs[i].text for i in order]


@dataclass(frozen=True)
class CitedRef:
    """What one passing binding of a claim points at, as code sees it."""

    tool_name: str
    text: str  # the whole ref text, or the no-hit message for a search that found nothing
    # The clauses of the ref the excerpt sits in (matching.context_of): what the verifier judges,
    # the answer quotes, and a claim's numbers and states are read against.
    context: str
    state: str | None  # the state of a cited alert, as its source reports it
    no_hit: bool
    searched: str  # the call that was made, e.g. query_logs(query='HikariCP', service='inventory-service')
    backfilled: bool
    indirect: bool  # runbooks and knowledge: what to check, never what is happening now
    # What in the scope of a search that found nothing went unread: such a no-hit proves no absence.
    unread: tuple[str, ...] = ()
    # What the call searched, for saying what a no-hit verified: its output list (alerts, logs,
    # evidence_blocks) and its arguments.
    items: str = ""
    arguments: tuple[tuple[str, Any], ...] = ()
    # Where it is: the call and the ref's path (None for a no-hit).
    invocation_id: int | None = None
    raw_path: str | None = None


def cited_refs(gate: GatekeeperResult, invocations: Iterable[ToolInvocation],
               toolbox: Toolbox) -> dict[str, list[CitedRef]]:
    """What each claim's passing bindings point at: the whole ref, or the no-hit message."""
    by_id = {inv.id: inv for inv in invocations}
    cited: dict[str, list[CitedRef]] = {}
    for cb in gate.checked_bindings:
        inv = by_id.get(cb.source_invocation_id)
        if cb.claim_id is None or cb.status != "pass" or inv is None:
            continue
        details = inv.retrieval_details
        text = details.message if cb.raw_path is None else next(
            (r.text for r in details.evidence_refs if r.raw_path == cb.raw_path), "")
        declaration = toolbox.get(inv.tool_name)
        cited.setdefault(cb.claim_id, []).append(CitedRef(
            tool_name=inv.tool_name, text=text, context=cb.context or text, state=item_state(inv, cb.raw_path),
            no_hit=cb.raw_path is None, backfilled=cb.backfilled,
            searched=call_text(inv),
            indirect=declaration is None or declaration.evidence == "indirect",
            unread=tuple(details.unread) if cb.raw_path is None else (),
            items=declaration.items if declaration is not None else "",
            arguments=tuple((inv.input or {}).items()), invocation_id=inv.id, raw_path=cb.raw_path))
    return cited


def output_item(invocation: ToolInvocation, raw_path: str | None) -> dict | None:
    """The output item a ref was extracted from, when it is an object."""
    found = LOCATOR.match(raw_path or "")
    items = invocation.output.get(found.group(1)) if found and isinstance(invocation.output, dict) else None
    item = items[int(found.group(2))] if isinstance(items, list) and int(found.group(2)) < len(items) else None
    return item if isinstance(item, dict) else None


def item_state(invocation: ToolInvocation, raw_path: str | None) -> str | None:
    """The `state` field of the output item a ref was extracted from, if it has one."""
    state = (output_item(invocation, raw_path) or {}).get("state")
    return str(state).strip().casefold() if state is not None else None


def code_sees_support(claim: Claim, contexts: list[str], names: tuple[str, ...] = ()) -> bool:
    """Every number, name and identifier of the claim occurs in the clauses it cites, with the same
    polarity. A denied state ("is not firing" of a resolved alert) is no negation of what is cited:
    state_conflicts has already checked it against the alert's state."""
    excerpts = " ".join(contexts)
    if not excerpts.strip() or ungrounded_numbers(claim.claim_text, contexts):
        return False
    folded = nfkc(excerpts).casefold()
    if any(token.casefold() not in folded for token in IDENTIFIER.findall(nfkc(claim.claim_text))):
        return False
    return outside_state_denials(NEGATION, claim.claim_text, names) == outside_state_denials(NEGATION, excerpts, names)


def disputed(judgement: ClaimJudgement | None, claim: Claim, contexts: list[str], names: tuple[str, ...] = ()
             ) -> bool:
    """The verifier said "contradicted" of a claim whose every number, name and identifier code finds
    in the clauses it cites with the same polarity (`code_sees_support`)."""
    return judgement is not None and judgement.judgement == "contradicted" and code_sees_support(
        claim, contexts, names)


def settled_state(claim: Claim, refs: list[CitedRef], names: tuple[str, ...] = ()) -> bool:
    """Code itself has read what the claim says: it cites only alerts, states their state (firing, or
    over), and each has that state in its `state` field."""
    states = {ref.state for ref in refs}
    raised, cleared = said_state(claim.claim_text, names)
    if not refs or None in states or raised == cleared:
        return False
    return states <= set(RAISED_STATES if raised else CLEARED_STATES)


def says_absence(claim: Claim, refs: list[CitedRef], names: tuple[str, ...] = ()) -> bool:
    """The claim says that nothing was found: by its type, or in its words. A denied state ("没有告警在
    触发", "is not firing") observes the state of the alert it cites, which state_conflicts checks; and
    words of absence that a found line it cites says too, with their neighbours ("404 Not Found",
    "找不到主机"), are quoted, not the claim's own: it observes what the line says."""
    found = tuple(ref.text for ref in refs if not ref.no_hit)
    return claim.claim_type == "negative_observation" or outside_state_denials(ABSENCE, claim.claim_text, names, found)


def claim_blockers(claims: list[Claim], cited: dict[str, list[CitedRef]], target: Target,
                   excluded: Exclusion = Exclusion(), names: tuple[str, ...] = (),
                   topics: list[tuple[str, ...]] = ()) -> dict[str, list[Finding]]:
    """Deterministic reasons a claim cannot be verified, whatever the verifier would say.
    `names` are the active catalog's service and alert names, `topics` its topic groups."""
    blockers: dict[str, list[Finding]] = {}

    def block(claim: Claim, rule: str, message: str) -> None:
        blockers.setdefault(claim.claim_id, []).append(Finding(rule=rule, claim_id=claim.claim_id, message=message))

    for claim in claims:
        refs = cited.get(claim.claim_id, [])
        if not refs:
            continue
        if hits := excluded.hits(claim.claim_text):
            block(claim, "verdict.excluded_topic", f"the claim names {', '.join(hits)}, which the user excluded")
        if reason := off_topic(claim.claim_text, [ref.text for ref in refs], target):
            block(claim, "verdict.off_topic", reason)
        if says_absence(claim, refs, names) and not all(ref.no_hit for ref in refs):
            block(claim, "verdict.absence_on_hit", "a claim that nothing was found must rest on searches that found "
                  "nothing, but this one cites evidence that was found")
        if all(ref.no_hit for ref in refs) and not (claim.claim_type == "negative_observation"
                                                     and negated(claim.claim_text)):
            block(claim, "verdict.no_hit_positive", "a search that found nothing can only support the statement "
                  "that nothing matched; this claim says more")
        if unread := [ref for ref in refs if ref.no_hit and ref.unread]:
            block(claim, "verdict.unread_search", unread_message(unread))
        if all(ref.backfilled for ref in refs):
            block(claim, "verdict.backfill_only", "every citation of this claim was auto-backfilled; backfill is "
                  "compatibility only and never grounds for PASS")
        if all(ref.indirect for ref in refs):
            block(claim, "verdict.runbook_only", "the claim rests only on runbooks or knowledge, which say what to "
                  "check, never what is happening now")
        contexts = [ref.context for ref in refs]
        if missing := ungrounded_numbers(claim.claim_text, contexts):
            block(claim, "verdict.ungrounded_number",
                  f"numbers {', '.join(missing)} in the claim occur in none of the clauses it cites, with that value "
                  "and unit")
        if misbound := misbound_numbers(claim.claim_text, contexts):
            block(claim, "verdict.misbound_number",
                  f"the claim gives {'; '.join(misbound)}: a number said of another quantity")
        if conflicts := state_conflicts(claim.claim_text, {ref.state for ref in refs if ref.state}, contexts, names):
            block(claim, "verdict.state_conflict", "; ".join(conflicts))
        if reason := below_limit(claim.claim_text, [ref.text for ref in refs if not ref.no_hit and not ref.indirect]):
            block(claim, BELOW_LIMIT, reason)
        if missing := ungrounded_names(claim.claim_text, [ref.text for ref in refs], names, bool(conflicts)):
            block(claim, "verdict.ungrounded_name",
                  f"{', '.join(missing)} in the claim occur in none of the refs it cites")
        if missing := unnamed_topics(claim.claim_text, [ref.text for ref in refs], topics):
            block(claim, "verdict.ungrounded_topic",
                  f"the claim speaks of {', '.join(missing)}, which none of the refs it cites concerns")
        if controls := bidi_controls(claim.claim_text):
            block(claim, "verdict.bidi_control", f"the claim text holds bidirectional control characters "
                  f"({', '.join(controls)}), which change what a reader sees")
        if reason := rests_on_direction([ref.text for ref in refs if not ref.no_hit]):
            block(claim, DIRECTED_EVIDENCE, f"the claim {reason}")
        if reason := restated_instruction(claim.claim_text, [ref.text for ref in refs], tuple(topics), names):
            block(claim, RESTATED_INSTRUCTION, f"the claim {reason}")
    return blockers


def contexts_of(gate: GatekeeperResult, claim_id: str) -> list[str]:
    """The clauses a claim's passing bindings cite."""
    return [cb.context or cb.evidence_excerpt for cb in gate.checked_bindings
            if cb.claim_id == claim_id and cb.status == "pass"]


# Per claim: the messages of its failed bindings, whether one was rejected, how many it has.
BindingFailures = tuple[dict[str, list[str]], set[str], dict[str, int]]


def _binding_failures(gate: GatekeeperResult) -> BindingFailures:
    failures: dict[str, list[str]] = {}
    rejected: set[str] = set()
    counts: dict[str, int] = {}
    for cb in gate.checked_bindings:
        if cb.claim_id is None:
            continue
        counts[cb.claim_id] = counts.get(cb.claim_id, 0) + 1
        if cb.status != "pass":
            failures.setdefault(cb.claim_id, []).append(f"{cb.rule}: {cb.message}")
        if cb.severity == "reject":
            rejected.add(cb.claim_id)
    return failures, rejected, counts


# Why a claim stands where the verifier's judgement alone put it (JUDGEMENT_STATUS).
_JUDGED = {"verified": "{}", "blocked": "the excerpts contradict the claim: {}",
           "downgraded": "the claim over-reaches its excerpts: {}"}


def _claim_status(claim: Claim, judgement: ClaimJudgement | None, gate: GatekeeperResult, bindings: BindingFailures,
                  blockers: dict[str, list[Finding]], verifier_ran: bool,
                  names: tuple[str, ...] = ()) -> tuple[str, str, Finding | None]:
    """What became of one claim, why, and the override code recorded on the verifier's account."""
    failures, rejected, counts = bindings
    cid = claim.claim_id
    if gate.severity == "reject" or cid in rejected:
        return "blocked", "; ".join(failures.get(cid, [])) or "the gatekeeper rejected this run's citations", None
    if gate.severity != "none":
        why = "; ".join(failures.get(cid, [])) or "the gatekeeper found missing or incomplete citations in this run"
        return "downgraded", why, None
    if cid in failures or not counts.get(cid):
        return "downgraded", "; ".join(failures.get(cid, [])) or "claim has no evidence bindings", None
    if cid in blockers:
        return "downgraded", "; ".join(finding.message for finding in blockers[cid]), None
    if judgement is None:
        why = "no verifier judgement for this claim"
        missing = Finding(rule="verdict.missing_judgement", claim_id=cid, message=why)
        return "downgraded", why, missing if verifier_ran else None
    if disputed(judgement, claim, contexts_of(gate, cid), names):
        why = f"verifier said contradicted ({judgement.reason}), but every number, name and identifier of the " \
              "claim occurs in its excerpts with the same polarity: a disagreement, so LOW_CONFID"
        return "downgraded", why, Finding(rule="verdict.verifier_disagreement", claim_id=cid, message=why)
    status = JUDGEMENT_STATUS[judgement.judgement]
    return status, _JUDGED[status].format(judgement.reason), None


def enforce(
    gate: GatekeeperResult,
    claims: list[Claim],
    judgements: dict[str, ClaimJudgement],
    blockers: dict[str, list[Finding]],
    stage_errors: list[Finding],
    *,
    verifier_ran: bool,
    names: tuple[str, ...] = (),
) -> tuple[VerifierEvaluation, list[VerifiedClaim]]:
    """`names`: the active catalog's service and alert names, which a claim may speak of an alert by."""
    overrides: list[Finding] = [finding for found in blockers.values() for finding in found]
    bindings = _binding_failures(gate)
    results: list[VerifiedClaim] = []
    final: list[ClaimJudgement] = []
    contradicted = False
    for claim in claims:
        judgement = judgements.get(claim.claim_id)
        status, why, override = _claim_status(claim, judgement, gate, bindings, blockers, verifier_ran, names)
        overrides += [override] if override else []
        # Blocked while the gatekeeper passed: on the verifier's word that its excerpts contradict it.
        contradicted = contradicted or (status == "blocked" and gate.severity == "none")
        results.append(VerifiedClaim(claim=claim, verification_status=status, reason=why))
        final.append(ClaimJudgement(claim_id=claim.claim_id, verdict=STATUS_VERDICT[status],
                                    judgement=judgement.judgement if judgement else None, reason=why))

    verified = sum(r.verification_status == "verified" for r in results)
    if gate.severity == "reject":
        verdict, reason = "REJECT", "the gatekeeper rejected fabricated or mismatched citations"
    elif gate.severity == "low_confid":
        verdict, reason = "LOW_CONFID", "the gatekeeper found missing or incomplete citations"
    elif stage_errors:
        rules = ", ".join(sorted({e.rule for e in stage_errors}))
        verdict, reason = "LOW_CONFID", f"an evidence stage failed ({rules})"
        if verified:
            overrides.append(Finding(rule="verdict.stage_error", message=f"{reason}; PASS capped at LOW_CONFID"))
    elif contradicted:
        verdict, reason = "REJECT", "the verifier found a claim contradicted by its own excerpts"
    elif verified:
        verdict, reason = "PASS", f"{verified} of {len(claims)} claim(s) verified"
    else:
        verdict, reason = "LOW_CONFID", "no claim could be verified"
    evaluation = VerifierEvaluation(
        gatekeeper_result=gate,
        verdict=verdict,
        groundedness_score=round(verified / len(claims), 3) if claims else 0.0,
        claim_judgements=final,
        reason=reason,
        code_overrides=overrides,
    )
    return evaluation, results

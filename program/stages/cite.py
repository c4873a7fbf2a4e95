"""The cite stage of a run: the citation module (`program.stages.executor.Cite`) with the checks that
follow it as its review. When code refuses something a new attempt can fix (a gatekeeper reject, a
claim a code check blocks, a "nothing found" the second look contradicts), the module asks once
more, told why; every attempt goes into the record, and the verdict rests on the one the checks
score higher."""

from __future__ import annotations

import dspy

from program.evidence.checks import HOSTILE, CitationCheck, Checked, Review, check_citations, retry_context
from program.stages.executor import Cite
from program.stages.run import Run
from program.stages.second_look import second_look, unclaimed_look
from contracts import Finding, RetryContext
from contracts.record import ExecutorAttempt
from tools.recorder import citation_label


def cite_and_check(run: Run, cite: Cite, attempts: int) -> Checked:
    """The checked citations of the attempt used, each attempt in the record."""
    with run.stage(cite.usage_key):
        cited = cite(question=run.question, plan=run.plan, invocations=run.recorder.invocations,
                     narrow=run.scope.narrow, language=run.language, constrain=run.constrain, attempts=attempts,
                     review=lambda attempt, context: review(run, attempt, context), screen=run.screen)
    for number, (attempt, context, reviewed) in enumerate(cited.attempts, start=1):
        used = number - 1 == cited.chosen
        run.record.executor_attempts.append(ExecutorAttempt(
            attempt=number, drafts=attempt.drafts, executor_output=attempt.output, parse_status=attempt.parse_status,
            gatekeeper_result=reviewed.checked.gate, retry_context=context, used=used,
            repeated=bool(attempt.get("repeated")), blocked=[f for found in reviewed.checked.blockers.values() for f in found],
            ref_decisions=attempt.get("decisions") or {}, set_aside=attempt.get("screened") or [],
            demos=attempt.get("demos") or []))
        if used:
            # Each attempt's drafts and decisions are in the record; the used one's bindings set aside,
            # and what it left unanswered, are said.
            run.record.notes.extend([*(attempt.get("set_aside") or []), *reviewed.checked.unanswered])
        if attempt.error is not None:
            # An attempt that is not used leaves no gap in the evidence: its failure is only noted.
            (run.errors if used else run.record.notes).append(attempt.error)
    if len(cited.attempts) > 1:
        repeated = bool(cited.attempts[1][0].get("repeated"))
        run.record.notes.append(Finding(rule="executor.retry", message=(
            f"code refused {', '.join(cited.attempts[0][2].retry.failed_rules)} in attempt 1, so the executor was "
            f"asked once more, told why; {'attempt 2 wrote the same claims word for word (no revision); ' if repeated else ''}"
            f"attempt {cited.chosen + 1} is used")))
    chosen = cited.attempts[cited.chosen][2]
    checked = chosen.checked
    run.possible_matches = chosen.possible_matches
    run.record.executor_output = checked.verifier_input.executor_structured_output
    run.record.tool_trace_summary = checked.verifier_input.tool_trace_summary
    run.cited = checked.cited
    return checked


def review(run: Run, attempt: dspy.Prediction, context: RetryContext | None) -> Review:
    """The checks of one attempt: the hook, the gatekeeper and the claim checks, then, for every
    "nothing found" resting on a no-hit (whatever else refused it) or for an attempt that wrote no
    claim beside a search that found nothing, the second look, whose search is recorded like any call."""
    checked = check_citations(run.store, run.toolbox, CitationCheck(
        session_id=run.session_id, question=run.question, output=attempt.output, parse_status=attempt.parse_status,
        target=run.target, refused=tuple(attempt.refused), excluded=run.scope.exclusion,
        names=run.catalog.names, topics=tuple(run.catalog.topic_groups()), retry_context=context,
        text_cap=attempt.get("text_cap"), screen=run.screen))
    made = {inv.id for inv in run.recorder.invocations}
    possible, unclaimed, withheld = [], None, ()
    if checked.claims:
        # Every negative resting on a log no-hit, a refused one too: a claim refused for its wording
        # (off topic, say) stands on a search whose words a small LM chose, and a line the question's
        # own words find is what the next attempt should cite.
        possible = second_look(run, [c for c in checked.claims if not any(
            f.rule in HOSTILE for f in checked.blockers.get(c.claim_id, []))], checked.cited, checked.blockers)
    elif attempt.error is None:
        unclaimed, possible, withheld = unclaimed_look(run)
    number = 1 if context is None else context.attempt + 1
    contradicted = {f.claim_id for found in checked.blockers.values() for f in found if f.rule == "verdict.second_look"}
    withheld += tuple(dict.fromkeys(citation_label(b.source_invocation_id, None) for c in checked.claims
                                    if c.claim_id in contradicted for b in c.evidence_bindings
                                    if b.raw_path is None and b.source_invocation_id is not None))
    return Review(checked=checked, retry=retry_context(checked, number, [unclaimed] if unclaimed else []),
                  invocations=list(run.recorder.invocations),
                  new_calls=[inv.id for inv in run.recorder.invocations if inv.id not in made],
                  possible_matches=possible, withheld=withheld)

"""The second look: a verified "nothing found" is only as good as the search behind it, whose words
a small LM chose. Before a negative observation may be verified, code searches the target's own
lines again with the question's words, and a plausible match blocks the all-clear."""

from __future__ import annotations

from program.evidence.relevance import question_words
from program.evidence.verdict import SECOND_LOOK_SHARE, CitedRef, plausible, ranked_lines, second_look_blocker
from program.stages.run import Run
from contracts import Claim, Finding
from tools.recorder import citation_label


def second_look(run: Run, claims: list[Claim], cited: dict[str, list[CitedRef]],
                blockers: dict[str, list[Finding]]) -> list[str]:
    """Adds a blocker to each negative observation among `claims` (whose passing bindings point at
    `cited`) that a new search contradicts, and returns the lines it found. One search per tool and
    service in a run: a later attempt's negative reuses it."""
    words = question_words(run.question, run.catalog)
    looked = run.looked
    found: list[str] = []
    for claim in claims:
        if claim.claim_type != "negative_observation":
            continue
        possible, failed = [], None
        for tool in sorted({ref.tool_name for ref in cited.get(claim.claim_id, []) if ref.no_hit}):
            declaration = run.toolbox.get(tool)
            if declaration is None or declaration.second_look is None:
                continue
            for service in run.target.services or (None,):
                if (tool, service) not in looked:
                    looked[tool, service] = _look_again(run, declaration, words, service)
                lines, problem = looked[tool, service]
                possible += lines
                failed = failed or problem
        if finding := second_look_blocker(claim.claim_id, possible, failed):
            blockers.setdefault(claim.claim_id, []).append(finding)
            found.extend(line for line in possible if line not in found)
    return found


def unclaimed_look(run: Run) -> tuple[Finding | None, list[str], tuple[str, ...]]:
    """An attempt that wrote no claim leaves the session's no-hits as its all-clear by omission
    ("nothing found" went to missing_info): code looks again as it would for a negative
    observation. Returns the finding a new attempt is told (None when the look found nothing), the
    lines found and the labels of the no-hits they contradict."""
    words = question_words(run.question, run.catalog)
    possible, labels = [], []
    for invocation in list(run.recorder.invocations):
        declaration = run.toolbox.get(invocation.tool_name)
        if invocation.retrieval_details.evidence_status != "no_evidence" or declaration is None \
                or declaration.second_look is None:
            continue
        labels.append(citation_label(invocation.id, None))
        for service in run.target.services or (None,):
            if (invocation.tool_name, service) not in run.looked:
                run.looked[invocation.tool_name, service] = _look_again(run, declaration, words, service)
            lines, _ = run.looked[invocation.tool_name, service]
            possible += [line for line in lines if line not in possible]
    if not possible:
        return None, [], ()
    return second_look_blocker(None, possible, None), possible, tuple(labels)


def _look_again(run: Run, declaration, words: str, service: str | None) -> tuple[list[str], str | None]:
    arguments = {declaration.second_look: words, "min_share": SECOND_LOOK_SHARE}
    if service is not None and "service" in declaration.tool_arguments:
        arguments["service"] = service
    invocation = run.recorder.call(declaration.name, **arguments)
    run.record.notes.append(Finding(rule="verdict.second_look_search", message=(
        f"before an all-clear, code searched again with the question's words: #{invocation.id} "
        f"{declaration.name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())}) -> "
        f"{invocation.retrieval_details.evidence_status}")))
    if invocation.retrieval_details.evidence_status == "failed":
        return [], invocation.retrieval_details.message or "the search failed"
    return plausible(ranked_lines(invocation, declaration.items), words), None

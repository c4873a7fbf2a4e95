"""The lookup rules: the reference rows a devset has to defeat, with no model at all.

`LookupRule` is what a devset of clean, single-answer cases rewards: for every call, cite each whole
ref that names a target service (or, when none does, every ref), type the claim by hit or no-hit, and
fill a template with the first cited ref's text. On the six seed cases it is right; wherever the
target's own evidence holds a distractor (an earlier resolved alert, another endpoint, an excluded
topic) or a hit that means "no" (a healthy pool), it is wrong, which is what the harder cases measure.

`LookupRule(structured=True)` is the fair reference for a program whose code reads the refs'
structured fields: it cites only what the program's own screen leaves (program.evidence.screen: the
ref's service, the user's exclusions, the alert or endpoint the question names, and of the alerts of
one name and service the firing one, by the `state` field). What is left to a model is what no field
says: which of the remaining lines answers, and whether a hit means "no".
"""

from __future__ import annotations

import dspy

from program.evidence.citations import Menu
from program.evidence.screen import Screen
from contracts import NARROW_MAX_CLAIMS, ClaimDraft, ExecutorOutput, ParseStatus, PlannerOutput, ToolInvocation


class LookupRule(dspy.Module):
    """Called like program.stages.executor.Cite, and returns the same Prediction. Its claims copy the
    refs they cite, which are no language of their own, so the answer's `language` changes nothing."""

    def __init__(self, structured: bool = False):
        super().__init__()
        self.structured = structured

    def forward(self, question: str, plan: PlannerOutput, invocations: list[ToolInvocation], narrow: bool,
                retry_context: str = "none", language: str | None = None, screen: Screen | None = None
                ) -> dspy.Prediction:
        screening = screen(invocations) if self.structured and screen is not None else None
        menu = Menu(invocations, screening=screening)
        services = [s.casefold() for s in plan.target_services]
        drafts = []
        for inv in invocations:
            whole = [c for c in menu.citations.values()
                     if c.invocation_id == inv.id and c.label in menu.refs and c.label in menu.offered]
            hits = [c for c in whole if c.hit]
            named = [c for c in hits if any(s in c.excerpt.casefold() for s in services)] or hits
            subject = ", ".join(plan.target_services) or "the target"
            if named:
                drafts.append(ClaimDraft(claim_type="observation", claim_text=f"{subject}: {named[0].excerpt}"[:200],
                                         evidence_bindings=[c.label for c in named]))
            elif whole:
                drafts.append(ClaimDraft(claim_type="negative_observation", claim_text=f"{subject}: {whole[0].excerpt}"[:200],
                                         evidence_bindings=[whole[0].label]))
        if narrow:
            drafts = drafts[:NARROW_MAX_CLAIMS]
        claims, refused = menu.expand(drafts)
        return dspy.Prediction(output=ExecutorOutput(claims=claims), drafts=drafts, refused=refused, error=None,
                               parse_status=ParseStatus(status="valid", detail="written by the lookup rule"))


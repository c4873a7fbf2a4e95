"""The judge stage: the verifier's predictor with its demos, and the verdict. Code checks come
first (the cite stage ran them, the second look included); the verifier LM judges only the claims
that code could still verify, one at a time."""

from __future__ import annotations

import dspy

from program.evidence.answer import contexts
from program.evidence.checks import Checked
from program.evidence.verdict import contexts_of, disputed, enforce, settled_state
from program.lm.adapter import judgement_patch
from program.stages.run import Run, ask
from contracts import Claim, ClaimJudgement, Finding
from signatures.demos import for_language, judge_demos
from signatures.diagnosis import JudgeClaim
from tools.recorder import call_text


class Judge(dspy.Predict):
    """A predictor itself, so that a saved program names it `verifier` as it always has."""

    usage_key = "verifier"

    def __init__(self):
        super().__init__(JudgeClaim, max_tokens=120)
        self.demos = judge_demos()

    def step(self, run: Run, checked: Checked):
        """The verifier's evaluation and the claims' results (`enforce`'s verdict table)."""
        gate, claims, blockers = checked.gate, checked.claims, checked.blockers
        judgements: dict[str, ClaimJudgement] = {}
        verifier_ran = False
        if gate.severity == "none":
            for claim in checked.verifiable:
                verifier_ran = True
                judgement = self.judge(run, claim)
                if disputed(judgement, claim, contexts_of(gate, claim.claim_id), run.catalog.names) and \
                        settled_state(claim, run.cited.get(claim.claim_id, []), run.catalog.names):
                    judgement = self.second_opinion(run, claim, judgement)
                if judgement is not None:
                    judgements[claim.claim_id] = judgement
        _failed_lookups(run)
        stage_errors = [e for e in run.errors if e.rule.startswith(("lm.", "tools."))]
        return enforce(gate, claims, judgements, blockers, stage_errors, verifier_ran=verifier_ran,
                       names=run.catalog.names)

    def judge(self, run: Run, claim: Claim, signature: type[dspy.Signature] | None = None) -> ClaimJudgement | None:
        """One judgement of the claim, under this predictor's signature (a compiled one, when
        loaded) or the one given."""
        signature = signature or self.signature
        inputs = {"language": run.language, "claim": f"{claim.claim_type}: {claim.claim_text}",
                  "excerpts": contexts(claim, run.cited)}
        if "question" in signature.input_fields:
            inputs["question"] = run.question
        pred = ask(run, self.usage_key, self, signature=signature, demos=for_language(self.demos, run.language),
                   config=run.config(judgement_patch), **inputs)
        return None if pred is None else ClaimJudgement.judged(claim.claim_id, pred.judgement, pred.reason)

    def second_opinion(self, run: Run, claim: Claim, first: ClaimJudgement) -> ClaimJudgement:
        """The judgement, against its excerpts alone, of an alert's state that code has read in the
        alert's own `state` field (`settled_state`) and the verifier called contradicted. Shown the
        question, the 1.5B has judged "contradicted" a state that denies what the question presumes
        ("is resolved" of "is it firing right now?"), with a reason that agrees with the claim. The
        second judgement stands; both are in the record. A second call that fails leaves the first
        judgement, and the failure caps the verdict."""
        second = self.judge(run, claim, signature=self.signature.delete("question"))
        said = f"{second.judgement} ({second.reason or 'no reason'})" if second else "no judgement (the call failed)"
        run.record.notes.append(Finding(rule="verifier.second_opinion", claim_id=claim.claim_id, message=(
            f"the verifier said contradicted ({first.reason or 'no reason'}), but code read the alert state the "
            f"claim states in the cited alert's state field and every number, name and identifier of the claim in "
            f"its excerpts, so it judged the claim again without the question: {said}")))
        return second or first


def _failed_lookups(run: Run) -> None:
    """A failed lookup of current fact leaves the question unanswered where it asked: an alert whose
    lookup failed is not answered by a log line, so it caps the verdict like a failed LM stage. A
    failed runbook lookup (indirect evidence, never grounds for PASS) is only noted."""
    for inv in run.failed_calls():
        declaration = run.toolbox.get(inv.tool_name)
        finding = Finding(rule="tools.call_failed", message=f"#{inv.id} {call_text(inv)} failed: "
                          f"{inv.retrieval_details.message or 'no message'}")
        (run.errors if declaration is None or declaration.evidence == "direct" else run.record.notes).append(finding)

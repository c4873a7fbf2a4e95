"""The compose stage: the composer's predictor, and the answer policy that decides whether it is
asked at all and whether what it wrote may stand. Otherwise the deterministic answer is the answer."""

from __future__ import annotations

import dspy

from program.evidence.answer import deterministic_answer, fact_line, scan_answer
from program.evidence.checks import Checked
from program.lm.adapter import length_patch
from program.stages.run import Run, ask, searches
from contracts import Claim, ComposerOutput
from signatures.demos import for_language
from signatures.diagnosis import ComposeAnswer


def composer_not_asked(verdict: str, verified: list[Claim], narrow: bool) -> str | None:
    """Why the composer LM is not asked for this answer, or None when it is."""
    if verdict != "PASS" or all(c.claim_type == "negative_observation" for c in verified):
        # Nothing positive to phrase: the deterministic answer says exactly what was and was not found.
        return "no positive verified claim to phrase; the composer LM was not asked"
    if narrow:
        # A narrow question asks to confirm one thing: its verified claims, with their evidence, are the answer.
        return "narrow question: the verified claims are the answer; the composer LM was not asked"
    return None


class Compose(dspy.Predict):
    """A predictor itself, so that a saved program names it `composer` as it always has."""

    usage_key = "composer"

    def __init__(self):
        super().__init__(ComposeAnswer, max_tokens=250)

    def step(self, run: Run, verdict: str, claim_results, checked: Checked) -> ComposerOutput:
        output = checked.verifier_input.executor_structured_output
        verified = [r.claim for r in claim_results if r.verification_status == "verified"]
        not_verified = [r.claim for r in claim_results if r.verification_status != "verified"]
        fallback = deterministic_answer(verdict, verified, checked.gate.failed_rules, cited=run.cited,
                                        excluded=run.scope.exclusion, language=run.language,
                                        possible_matches=run.possible_matches,
                                        **searches(run))
        if reason := composer_not_asked(verdict, verified, run.scope.narrow):
            return ComposerOutput(status="deterministic", user_facing_answer=fallback, reasons=[reason])
        pred = ask(run, self.usage_key, self, demos=for_language(self.demos, run.language), language=run.language,
                   question=run.question,
                   verified_facts=[fact_line(c, run.cited) for c in verified],
                   hypotheses=[h.hypothesis_text for h in output.hypotheses],
                   missing_info=[m.description for m in output.missing_info], config=run.config(length_patch({})))
        if pred is None:  # the stage failed: its finding is the last of the run's errors
            return ComposerOutput(status="fallback", user_facing_answer=fallback, reasons=[run.errors[-1].message])
        ref_texts = [ref.text for inv in run.recorder.invocations for ref in inv.retrieval_details.evidence_refs]
        reasons = scan_answer(pred.answer, verified=verified, blocked=not_verified,
                              excluded=run.scope.exclusion, ref_texts=ref_texts, names=run.catalog.names,
                              cited=run.cited, topics=run.catalog.topic_groups(), language=run.language)
        if reasons:
            return ComposerOutput(status="replaced", user_facing_answer=fallback, reasons=reasons)
        return ComposerOutput(status="valid", user_facing_answer=pred.answer)

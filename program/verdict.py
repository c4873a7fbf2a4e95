"""Rules that hold in code, whatever the verifier LM said.

- A failed gatekeeper never yields PASS: reject means REJECT, low_confid caps at LOW_CONFID.
- A PASS needs at least one claim whose bindings all passed and that the verifier judged PASS.
- Any stage error (LM failure, unparseable output) caps the verdict at LOW_CONFID.
- A claim is verified only if every number it states occurs in its checked excerpts: a small
  verifier LM can wave through "91%" resting on a line that says 86.2%.
Every override is recorded as a finding so an auditor can see why the verdict moved.
"""

from __future__ import annotations

import re
import unicodedata

from signatures.contracts import (
    Claim,
    ClaimJudgement,
    Finding,
    GatekeeperResult,
    VerifiedClaim,
    VerifierEvaluation,
    VerifierOutput,
)

NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _values(text: str) -> set[float]:
    return {float(n) for n in NUMBER.findall(unicodedata.normalize("NFKC", text))}


def ungrounded_numbers(claim: Claim) -> list[str]:
    """Numbers in the claim text whose value appears in none of the claim's excerpts."""
    grounded = set().union(*(_values(b.evidence_excerpt) for b in claim.evidence_bindings))
    stated = NUMBER.findall(unicodedata.normalize("NFKC", claim.claim_text))
    return [n for n in dict.fromkeys(stated) if float(n) not in grounded]


def enforce(
    gate: GatekeeperResult,
    claims: list[Claim],
    lm_output: VerifierOutput | None,
    stage_errors: list[Finding],
) -> tuple[VerifierEvaluation, list[VerifiedClaim]]:
    overrides: list[Finding] = []
    if lm_output is None:
        verdict = "REJECT" if gate.severity == "reject" else "LOW_CONFID"
        if gate.severity == "reject":
            reason = "verifier skipped: the gatekeeper rejected the citations"
        elif not claims:
            reason = "verifier skipped: there are no claims to judge"
        else:
            reason = "verifier unavailable: its LM call failed (see errors)"
        lm_judgements: dict[str, ClaimJudgement] = {}
    else:
        verdict, reason = lm_output.verdict, lm_output.reason
        lm_judgements = {j.claim_id: j for j in lm_output.claim_judgements}

    if gate.severity == "reject" and verdict != "REJECT":
        overrides.append(Finding(rule="verdict.gatekeeper_reject", message=f"gatekeeper rejected citations; {verdict} -> REJECT"))
        verdict = "REJECT"
    elif gate.severity == "low_confid" and verdict == "PASS":
        overrides.append(Finding(rule="verdict.gatekeeper_low_confid", message="gatekeeper low_confid caps PASS at LOW_CONFID"))
        verdict = "LOW_CONFID"
    if stage_errors and verdict == "PASS":
        rules = ", ".join(sorted({e.rule for e in stage_errors}))
        overrides.append(Finding(rule="verdict.stage_error", message=f"a stage failed ({rules}); PASS capped at LOW_CONFID"))
        verdict = "LOW_CONFID"

    failed_by_claim: dict[str, list[str]] = {}
    rejected_claims: set[str] = set()
    bindings_by_claim: dict[str, int] = {}
    for cb in gate.checked_bindings:
        if cb.claim_id is None:
            continue
        bindings_by_claim[cb.claim_id] = bindings_by_claim.get(cb.claim_id, 0) + 1
        if cb.status != "pass":
            failed_by_claim.setdefault(cb.claim_id, []).append(f"{cb.rule}: {cb.message}")
        if cb.severity == "reject":
            rejected_claims.add(cb.claim_id)

    results: list[VerifiedClaim] = []
    judgements: list[ClaimJudgement] = []
    for claim in claims:
        judgement = lm_judgements.get(claim.claim_id)
        if judgement is None:
            judgement = ClaimJudgement(claim_id=claim.claim_id, verdict="REJECT" if verdict == "REJECT" else "LOW_CONFID",
                                       reason="no verifier judgement for this claim")
            if lm_output is not None:
                overrides.append(Finding(rule="verdict.missing_judgement", claim_id=claim.claim_id,
                                         message="verifier gave no judgement for this claim; treated as LOW_CONFID"))
        judgements.append(judgement)
        failures = failed_by_claim.get(claim.claim_id, [])
        if verdict == "REJECT" or judgement.verdict == "REJECT" or claim.claim_id in rejected_claims:
            why = "; ".join(failures) or judgement.reason or reason
            results.append(VerifiedClaim(claim=claim, verification_status="blocked", reason=why))
        elif failures or not bindings_by_claim.get(claim.claim_id):
            why = "; ".join(failures) or "claim has no evidence bindings"
            results.append(VerifiedClaim(claim=claim, verification_status="downgraded", reason=why))
        elif judgement.verdict == "PASS" and (missing := ungrounded_numbers(claim)):
            why = f"numbers {', '.join(missing)} in the claim occur in none of its excerpts"
            overrides.append(Finding(rule="verdict.ungrounded_number", claim_id=claim.claim_id, message=why))
            results.append(VerifiedClaim(claim=claim, verification_status="downgraded", reason=why))
        elif judgement.verdict == "PASS":
            results.append(VerifiedClaim(claim=claim, verification_status="verified", reason=judgement.reason))
        else:
            results.append(VerifiedClaim(claim=claim, verification_status="downgraded", reason=judgement.reason))

    if verdict == "PASS" and not any(r.verification_status == "verified" for r in results):
        overrides.append(Finding(rule="verdict.no_verified_claim",
                                 message="PASS needs at least one claim with all bindings passed and judged PASS"))
        verdict = "LOW_CONFID"
    evaluation = VerifierEvaluation(
        gatekeeper_result=gate,
        verdict=verdict,
        groundedness_score=lm_output.groundedness_score if lm_output else 0.0,
        claim_judgements=judgements,
        reason=reason,
        code_overrides=overrides,
    )
    return evaluation, results

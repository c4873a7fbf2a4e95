"""The audit record of one diagnosis and the result its caller gets: what each stage wrote, what
code found of it, and what it cost. Built on the contracts of contracts/__init__.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from contracts import (
    CitationLabel,
    Claim,
    ClaimDraft,
    ClaimJudgement,
    ComposerOutput,
    Contract,
    ExecutorOutput,
    Finding,
    GatekeeperResult,
    Language,
    ParseStatus,
    PlannerOutput,
    RefDecision,
    RetryContext,
    SetAside,
    TraceSummaryEntry,
    Verdict,
    VerificationStatus,
)


class StageUsage(Contract):
    lm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Of the prompt tokens, those whose model state came from a saved prefix instead of being read.
    cached_prompt_tokens: int = 0
    seconds: float = 0.0


class VerifierEvaluation(Contract):
    gatekeeper_result: GatekeeperResult
    verdict: Verdict | None = None
    groundedness_score: float | None = None
    claim_judgements: list[ClaimJudgement] = Field(default_factory=list)
    reason: str = ""
    # Every place where code overrode the verifier LM, so an auditor sees why the verdict moved.
    code_overrides: list[Finding] = Field(default_factory=list)


class SelfEvaluation(Contract):
    verifier_evaluation: VerifierEvaluation


class ExecutorAttempt(Contract):
    attempt: int
    # The claims as the LM wrote them, labels and all; executor_output has them expanded.
    drafts: list[ClaimDraft] = Field(default_factory=list)
    executor_output: ExecutorOutput | None = None
    parse_status: ParseStatus
    gatekeeper_result: GatekeeperResult
    # What the attempt was told: what code refused in the one before it.
    retry_context: RetryContext | None = None
    # What the code checks (the second look included) refused in this attempt, claim by claim.
    blocked: list[Finding] = Field(default_factory=list)
    # The attempt the verdict rests on (the one the checks scored higher); records written before
    # attempts were compared mark none, and theirs is the last.
    used: bool = False
    # A retry that wrote the refused attempt's claims again word for word: no revision.
    repeated: bool = False
    # What it decided of each ref offered, by label (empty: it wrote none; its bindings stand as written).
    ref_decisions: dict[CitationLabel, RefDecision] = Field(default_factory=dict)
    # What code decided before it was asked: the refs and clauses it was not offered, and why.
    set_aside: list[SetAside] = Field(default_factory=list)
    # The questions of the worked examples it was shown, in order: the predictor's demos, then a
    # compiled program's nearest training case (when it has a pool), then a retry's worked revisions.
    demos: list[str] = Field(default_factory=list)


class DiagnosisSession(Contract):
    session_id: str
    query: str
    # pending: accepted to run later (an alert); claimed: a worker of `process` took it and its run is
    # starting; then running, and completed, failed or interrupted.
    status: Literal["pending", "claimed", "running", "completed", "failed", "interrupted"] = "running"
    created_at: datetime | None = None
    # host:pid of the process running it, so a run whose process died can be marked interrupted.
    process: str = ""
    verdict: Verdict | None = None
    answer: str = ""
    lm_model: str = ""
    # Records written before answers followed the question's language were all Chinese.
    language: Language = "zh"
    planner_output: PlannerOutput | None = None
    # The tool calls the executor asked for, round by round (what ran is in tool_invocations).
    # The calls each round asked for, as {tool_name, arguments...}: any declared tool, run or not.
    tool_requests: list[list[dict[str, Any]]] = Field(default_factory=list)
    executor_output: ExecutorOutput | None = None
    executor_attempts: list[ExecutorAttempt] = Field(default_factory=list)
    tool_trace_summary: list[TraceSummaryEntry] = Field(default_factory=list)
    self_evaluation: SelfEvaluation | None = None
    composer_output: ComposerOutput | None = None
    usage: dict[str, StageUsage] = Field(default_factory=dict)
    errors: list[Finding] = Field(default_factory=list)
    # What code did on its own initiative that is not an error (e.g. a lookup it added).
    notes: list[Finding] = Field(default_factory=list)


class VerifiedClaim(Contract):
    claim: Claim
    verification_status: VerificationStatus
    reason: str = ""


class DiagnosisResult(Contract):
    session_id: str
    verdict: Verdict
    answer: str
    language: Language = "zh"
    claims: list[VerifiedClaim] = Field(default_factory=list)
    # None only when the run failed before the gatekeeper ran.
    gatekeeper_result: GatekeeperResult | None = None
    composer_status: str = ""
    usage: dict[str, StageUsage] = Field(default_factory=dict)
    errors: list[Finding] = Field(default_factory=list)

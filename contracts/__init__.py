"""The typed contracts shared by tools, recorder, gatekeeper, hook, audit store and signatures.

Field names follow the ISS-007 design document exactly; this package is the one home for them (the
audit record and the caller's result are in contracts/record.py). It is the bottom layer: it imports
nothing of the project and not DSPy, so every layer above may use it (tests/test_layers.py). The
ToolCall an LM writes is derived from a toolbox, in tools/calls.py.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, model_validator

EvidenceStatus = Literal["supported", "no_evidence", "failed"]
ClaimType = Literal["observation", "negative_observation", "root_cause", "risk"]
# A narrow question (only confirm one thing) is answered with one or two observations of these types.
NARROW_TYPES: tuple[str, ...] = ("observation", "negative_observation")
NARROW_MIN_CLAIMS = 1
NARROW_MAX_CLAIMS = 2
Severity = Literal["none", "low_confid", "reject"]
Verdict = Literal["PASS", "LOW_CONFID", "REJECT"]
Judgement = Literal["supported", "over-reaches", "contradicted"]
# What became of one claim, and the verdict that stands for it: in the result, the audit record and its page.
VerificationStatus = Literal["verified", "blocked", "downgraded"]
STATUS_VERDICT: dict[str, str] = {"verified": "PASS", "blocked": "REJECT", "downgraded": "LOW_CONFID"}
# What the verifier's judgement alone makes of a claim; code may still block or downgrade it.
JUDGEMENT_STATUS: dict[str, str] = {"supported": "verified", "over-reaches": "downgraded", "contradicted": "blocked"}
# The language code writes its answer sentences in (program/evidence/language.py).
Language = Literal["zh", "en"]
EvidenceLevel = Literal["direct", "indirect", "none"]

SEVERITY_RANK: dict[str, int] = {"none": 0, "low_confid": 1, "reject": 2}

# A ref's raw_path is item i of its tool's output list <items>: `$.<items>[i]`. LOCATOR reads one
# exactly; RAW_PATH_IN_TEXT finds one inside other text (a citation label, an observation line).
LOCATOR = re.compile(r"^\$\.([a-z_]+)\[(0|[1-9][0-9]*)\]$")
RAW_PATH_IN_TEXT = r"\$\.\w+\[\d+\]"


def raw_path(items: str, index: int | str) -> str:
    """`$.logs[3]`; with index "i", how a tool's refs are described (`$.logs[i]`)."""
    return f"$.{items}[{index}]"

# Bounds at the contract, so a hostile or looping LM cannot make a check slow or memory-hungry.
# Every ref of the fixture world is under 300 characters; a quote longer than this is no quote.
# They are validators, not schema keywords: the JSON schema an LM is given stays the same.
MAX_EXCERPT_CHARS = 4000
MAX_TEXT_CHARS = 2000
MAX_ID_CHARS = 64
MAX_ITEMS = 64


def _at_most(limit: int, what: str):
    def check(value):
        if len(value) > limit:
            raise ValueError(f"{what} has {len(value)} {'items' if isinstance(value, list) else 'characters'}; "
                             f"at most {limit} are accepted")
        return value

    return AfterValidator(check)


# An invocation id is an integer, never "1", true or 2.0: anything else is not the id it looks like.
InvocationId = StrictInt
Excerpt = Annotated[str, _at_most(MAX_EXCERPT_CHARS, "an evidence excerpt")]
Text = Annotated[str, _at_most(MAX_TEXT_CHARS, "a text field")]
Ident = Annotated[str, _at_most(MAX_ID_CHARS, "an id or name")]


class Contract(BaseModel):
    """LM-facing and audit contracts: an unexpected field is an error, never silently dropped."""

    model_config = ConfigDict(extra="forbid")


class Record(BaseModel):
    """Tool-side records may come from exported files with extra columns; those are ignored."""

    model_config = ConfigDict(extra="ignore")


# --- tool side ---------------------------------------------------------------------------------


class EvidenceRef(Record):
    raw_path: str
    text: str
    # What the item says it is of, from the fields its tool declares (ToolDeclaration.service_field,
    # name_field): the service it belongs to and its name (an alert's). None: the item has no such field.
    service: str | None = None
    name: str | None = None


class RetrievalDetails(Record):
    evidence_status: EvidenceStatus
    evidence_refs: list[EvidenceRef] = Field(default_factory=list)
    # What was searched and what the tool said, so a no-hit can be cited and audited.
    searched: dict[str, Any] = Field(default_factory=dict)
    message: str = ""
    # What in the call's scope the search did not read (a file it could not open, the older part of
    # a file past the read bound), each named. A search that did not read cannot prove absence.
    unread: list[str] = Field(default_factory=list)


class ToolInvocation(Record):
    id: InvocationId
    session_id: str
    tool_name: str
    input: dict[str, Any] = Field(default_factory=dict)
    output: dict[str, Any] = Field(default_factory=dict)
    output_preview: str = ""
    retrieval_details: RetrievalDetails
    success: bool = True
    # Which source answered (the fixture world, a Prometheus URL, a log directory), for the audit record.
    source: str = ""
    latency_ms: float = 0.0
    created_at: datetime | None = None


# --- executor side -----------------------------------------------------------------------------


class EvidenceBinding(Contract):
    tool_name: Ident
    source_invocation_id: InvocationId | None = None
    raw_path: Ident | None = None
    evidence_excerpt: Excerpt = ""


class Claim(Contract):
    claim_id: Ident
    claim_type: ClaimType
    claim_text: Text
    evidence_bindings: Annotated[list[EvidenceBinding], _at_most(MAX_ITEMS, "a binding list")] = Field(
        default_factory=list)


# A label of the session's citation menu (program/evidence/citations.py), such as "#3 $.logs[1]".
CitationLabel = Annotated[str, _at_most(MAX_ID_CHARS, "a citation label")]


# What the executor decides of each ref (or no-hit) it is offered, by its label, before it writes a
# claim: only a ref that answers stays cited (program.evidence.citations.Menu.answering).
RefDecision = Literal["answers", "earlier_state", "other_service", "other_topic", "excluded", "irrelevant"]
ANSWERS: RefDecision = "answers"


class RefJudgement(Contract):
    ref: CitationLabel
    decision: RefDecision


class SetAside(Contract):
    """A ref, or some of its clauses, that code took off the executor's menu before asking it
    (program/evidence/screen.py): what code decided of it, from which field or name."""

    label: CitationLabel
    decision: RefDecision
    reason: Text


class ClaimDraft(Contract):
    """A claim as the executor writes it: its type, then what it cites, then what it says. A
    binding is a label that points at a citation, or a quoted binding from an LM that writes free
    text. Code numbers the claims when the LM does not."""

    claim_type: ClaimType
    evidence_bindings: Annotated[list[CitationLabel | EvidenceBinding], _at_most(MAX_ITEMS, "a binding list")] = Field(
        default_factory=list)
    claim_text: Text
    claim_id: Ident | None = None


class Hypothesis(Contract):
    hypothesis_id: Ident
    hypothesis_text: Text
    basis_claim_ids: list[str] = Field(default_factory=list)
    missing_info: str = ""


class MissingInfo(Contract):
    info_id: Ident
    description: Text


class RecommendedAction(Contract):
    action_id: Ident
    action_text: Text
    reason: Text = ""
    evidence_bindings: Annotated[list[EvidenceBinding], _at_most(MAX_ITEMS, "a binding list")] = Field(
        default_factory=list)


class ExecutorOutput(Contract):
    claims: Annotated[list[Claim], _at_most(MAX_ITEMS, "claims")] = Field(default_factory=list)
    hypotheses: Annotated[list[Hypothesis], _at_most(MAX_ITEMS, "hypotheses")] = Field(default_factory=list)
    missing_info: Annotated[list[MissingInfo], _at_most(MAX_ITEMS, "missing_info")] = Field(default_factory=list)
    recommended_actions: Annotated[list[RecommendedAction], _at_most(MAX_ITEMS, "recommended_actions")] = Field(
        default_factory=list)


# --- gatekeeper side ---------------------------------------------------------------------------


class Finding(Contract):
    rule: str
    message: str
    claim_id: str | None = None
    action_id: str | None = None
    binding_index: int | None = None


class CheckedBinding(Contract):
    claim_id: str | None = None
    action_id: str | None = None
    binding_index: int
    tool_name: str
    source_invocation_id: int | None = None
    raw_path: str | None = None
    evidence_excerpt: str = ""
    status: Literal["pass", "fail"]
    severity: Severity = "none"
    matched_text: str | None = None
    # The whole clauses of the ref the excerpt sits in: what the verifier judges and the answer quotes.
    context: str | None = None
    rule: str | None = None
    message: str | None = None
    backfilled: bool = False


class GatekeeperResult(Contract):
    status: Literal["pass", "fail"]
    severity: Severity
    checked_bindings: list[CheckedBinding] = Field(default_factory=list)
    failed_rules: list[str] = Field(default_factory=list)
    warnings: list[Finding] = Field(default_factory=list)
    errors: list[Finding] = Field(default_factory=list)

    @model_validator(mode="after")
    def _status_matches_severity(self) -> GatekeeperResult:
        if (self.status == "pass") != (self.severity == "none"):
            raise ValueError(f"status={self.status} is inconsistent with severity={self.severity}")
        if self.status == "pass" and self.errors:
            raise ValueError("a passing gatekeeper result cannot carry errors")
        return self


class TraceSummaryEntry(Contract):
    trace_ref: str
    tool_name: str
    source_invocation_ids: list[int]
    evidence_level: EvidenceLevel
    output_summary: str
    invocation_count: int
    no_hit_invocation_count: int


class ParseStatus(Contract):
    status: Literal["valid", "repaired", "invalid"]
    detail: str


class Relocated(Contract):
    """Numbers and names a refused claim wrote that none of its citations holds, and an offered ref
    that holds them: where the retry was told to look."""

    claim_id: str
    cited: list[CitationLabel]
    written: list[str]
    holding: CitationLabel
    # The claim was refused for nothing else, and `holding` is the one offered ref that holds all of
    # what it wrote: a retry that points at it alone stands the claim's own text on it (`executor.repointed`).
    repointable: bool = False


class RetryContext(Contract):
    attempt: int
    failed_rules: list[str]
    errors: list[Finding]
    # Where the facts of each refused claim are, as the retry was told (empty: nowhere it was offered).
    relocated: list[Relocated] = Field(default_factory=list)
    # The claims of that attempt code let through: they stand in the new attempt's output as they
    # were, and the refs they cite are not offered to it again.
    kept: list[str] = Field(default_factory=list)


class VerifierInput(Contract):
    original_query: str
    executor_structured_output: ExecutorOutput
    gatekeeper_result: GatekeeperResult
    tool_trace_summary: list[TraceSummaryEntry]
    executor_output_parse_status: ParseStatus
    retry_context: RetryContext | None = None


# --- verifier, composer, planner ---------------------------------------------------------------


class PlanDraft(Contract):
    """What the planner writes: what the user asked about and what the user said to leave out. The
    scope is read from the question by code, which owns it."""

    target_services: list[str] = Field(default_factory=list)
    topics: list[str] = Field(default_factory=list)
    excluded_topics: list[str] = Field(default_factory=list)


class PlannerOutput(Contract):
    scope: Literal["narrow", "broad"]
    target_services: list[str] = Field(default_factory=list)
    topics: list[str] = Field(default_factory=list)
    excluded_topics: list[str] = Field(default_factory=list)
    evidence_plan: list[str] = Field(default_factory=list)


class ClaimJudgement(Contract):
    claim_id: str
    verdict: Verdict
    # What the verifier LM said of this claim; None when code decided without asking it.
    judgement: Judgement | None = None
    reason: str = ""

    @classmethod
    def judged(cls, claim_id: str, judgement: Judgement, reason: str) -> ClaimJudgement:
        """The verifier's judgement as it stands before code's checks (program.evidence.verdict)."""
        return cls(claim_id=claim_id, verdict=STATUS_VERDICT[JUDGEMENT_STATUS[judgement]], judgement=judgement,
                   reason=reason)


class ComposerOutput(Contract):
    # valid: the LM's answer; replaced: code refused it; fallback: the LM failed; deterministic: not asked.
    status: Literal["valid", "replaced", "fallback", "deterministic"]
    user_facing_answer: str
    # Why code replaced the LM's answer (leaked JSON, a blocked claim, an excluded topic, an LM error).
    reasons: list[str] = Field(default_factory=list)

"""The citation step on recorded evidence: what `optimize.py` tunes and scores.

Each devset case's gold tool calls are run once through the real recorder (as HolmesGPT replays
recorded tool output), so every candidate sees the same invocations, ids and refs. The program
under optimization is the pipeline's own citation module (program.stages.executor.Cite): one LM call
per example, under the same schema constraints. Its output then goes through the same checks a
diagnosis runs after citation (program.evidence.checks), and the metric's feedback names the rules
that failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dspy

from devset.gold import gold_executor_output, gold_tool_calls
from devset.metric import citation_recall, contradicted, cut_short, narrow_problems, polarity, wrong_citations
from program.store.audit import AuditStore
from program.evidence.checks import CitationCheck, check_citations
from program.evidence.language import question_language
from program.evidence.relevance import Target, question_target
from program.evidence.scope import Scope, mentions, read_scope
from contracts import (
    ClaimDraft,
    ExecutorOutput,
    Finding,
    GatekeeperResult,
    ParseStatus,
    PlannerOutput,
    ToolInvocation,
)
from tools.calls import tool_call_contract
from tools.catalog import Catalog
from tools.declaration import Toolbox
from tools.recorder import ToolInvocationRecorder, render_observations

# The gatekeeper is the core: a citation that is not real earns nothing else. Every other part measures
# something a user sees, and optimize.py reports how the parts correlate over a run. "verdict" holds
# the scope checks: as a part of its own, scope was the verdict's bit on all 80 runs of the committed
# run (results/20261201T184632Z).
WEIGHTS = {"gatekeeper": 0.20, "verdict": 0.25, "refs": 0.20, "polarity": 0.15, "facts": 0.10, "consistent": 0.05,
           "whole": 0.05}


@dataclass
class Recorded:
    """One case's evidence, recorded once: the invocations, and the inputs the executor is given."""

    case: dict
    store: AuditStore
    session_id: str
    # The tools the case's calls ran on, which its citations are checked against.
    toolbox: Toolbox
    invocations: list[ToolInvocation]
    scope: Scope
    target: Target
    plan: PlannerOutput
    observations: str
    # Every name (service, alert, state) a claim may only state when its evidence states it.
    names: tuple[str, ...] = ()
    topics: list[tuple[str, ...]] = field(default_factory=list)

    def example(self, *, translated: bool = False) -> dspy.Example:
        """The citation module's inputs (the answer's language is the question's); the case id, the
        rendered observations and the gold output in the pointing form are labels (for labeled demos
        and the metric). `translated`: the case in its other language, its question and claim texts
        translated and its labels unchanged."""
        gold = gold_executor_output(self.case, self.observations, point=True, translated=translated)
        claims = [ClaimDraft.model_validate({k: v for k, v in c.items() if k != "claim_id"}) for c in gold["claims"]]
        question = self.case["translation"]["question"] if translated else self.case["question"]
        return dspy.Example(case_id=self.case["case_id"], language=question_language(question), question=question,
                            plan=self.plan, invocations=self.invocations, narrow=self.scope.narrow,
                            observations=self.observations, retry_context="none", claims=claims, hypotheses=[],
                            missing_info=gold["missing_info"], recommended_actions=[]
                            ).with_inputs("language", "question", "plan", "invocations", "narrow", "retry_context")


def record(cases: list[dict], catalog: Catalog, toolbox: Toolbox) -> dict[str, Recorded]:
    """Run every LM case's gold tool calls once on `toolbox`, in one in-memory audit store."""
    store = AuditStore("sqlite://")
    call_contract = tool_call_contract(toolbox)
    recorded = {}
    for case in cases:
        if not case["runs_lm"]:
            continue
        session = f"devset-{case['case_id']}"
        recorder = ToolInvocationRecorder(store, session, toolbox)
        for call in gold_tool_calls(case):
            tool_call = call_contract(**call)
            recorder.call(tool_call.tool_name, **tool_call.arguments())
        scope = read_scope(case["question"], catalog)
        gold_plan = case["gold"]["plan"]
        plan = PlannerOutput(scope="narrow" if scope.narrow else "broad", target_services=gold_plan["target_services"],
                             topics=gold_plan["topics"], excluded_topics=list(scope.excluded_topics))
        recorded[case["case_id"]] = Recorded(
            case=case, store=store, session_id=session, toolbox=toolbox, invocations=list(recorder.invocations),
            scope=scope, target=question_target(case["question"], catalog).without(scope.excluded_terms), plan=plan,
            observations=render_observations(recorder.invocations), names=catalog.names,
            topics=catalog.topic_groups())
    return recorded


@dataclass
class Score:
    score: float
    parts: dict[str, float]
    verdict: str  # what code would make of it if the verifier agreed: PASS, LOW_CONFID or REJECT
    gatekeeper: str
    failed_rules: list[str]
    blocked_rules: list[str]
    forbidden_hits: list[str]
    feedback: list[str]


def score_output(recorded: Recorded, output: ExecutorOutput, parse: ParseStatus | None = None,
                 refused: list[Finding] = ()) -> Score:
    """The checks a diagnosis runs after citation, on one output, as the metric and the report see it."""
    case = recorded.case
    checked = check_citations(recorded.store, recorded.toolbox, CitationCheck(
        session_id=recorded.session_id, question=case["question"], output=output,
        parse_status=parse or ParseStatus(status="valid", detail="parsed executor evidence contract"),
        target=recorded.target, refused=tuple(refused), excluded_terms=recorded.scope.excluded_terms,
        names=recorded.names, topics=tuple(recorded.topics)))
    gate: GatekeeperResult = checked.gate
    claims, blockers, verifiable = checked.claims, checked.blockers, checked.verifiable
    parts: dict[str, float] = {}
    feedback: list[str] = []

    parts["gatekeeper"] = float(gate.status == "pass")
    for error in gate.errors[:4]:
        feedback.append(f"gatekeeper {error.rule}: {error.message}")
    for claim_id, findings in blockers.items():
        for finding in findings:
            feedback.append(f"claim {claim_id} blocked by {finding.rule}: {finding.message}")
    if not claims:
        feedback.append("no claims: the executor stated nothing")

    verdict = "REJECT" if gate.severity == "reject" else "PASS" if gate.severity == "none" and verifiable else "LOW_CONFID"
    if verdict != case["expected_verdict"]:
        feedback.append(f"code verdict {verdict}, expected {case['expected_verdict']}")
    hits = mentions(" ".join(c.claim_text for c in claims), [t.casefold() for t in case["forbidden_terms"]])
    if hits:
        feedback.append(f"forbidden terms in claims: {', '.join(hits)}")
    problems = narrow_problems(claims) if recorded.scope.narrow else []
    feedback.extend(problems)
    # The right verdict, reached in scope: an answer that strays or over-claims is not the one asked for.
    parts["verdict"] = float(verdict == case["expected_verdict"] and not hits and not problems)

    recall, missed = citation_recall(case["expected_refs"], gate, recorded.invocations)
    wrong_hits = wrong_citations(case["wrong_refs"], gate, recorded.invocations)
    # Evidence that does not answer the question (an earlier resolved alert, another endpoint, an
    # excluded topic) misleads whoever reads the answer's citations, however right the rest is.
    parts["refs"] = 0.0 if wrong_hits else recall
    # This wording reaches GEPA's reflection prompt: the recorded run's transcript holds it.
    feedback.extend(f"did not cite the {r['tool_name']} ref containing {' or '.join(map(repr, r['needles']))}"
                    for r in missed)
    feedback.extend(f"cited a ref that does not answer the question: {text[:120]!r}" for text in wrong_hits)

    said = {polarity(c.claim_text, c.claim_type) for c in verifiable}
    parts["polarity"] = float(said == set(case["expected_polarity"]))
    if verifiable and not parts["polarity"]:
        feedback.append(f"the claims say the asked thing is {' and '.join(sorted(said))}; the evidence says "
                        f"{' and '.join(case['expected_polarity'])}")

    stated = " ".join(c.claim_text for c in verifiable).casefold()
    missing = [f for f in case["required_facts"] if f.casefold() not in stated]
    parts["facts"] = 1 - len(missing) / len(case["required_facts"]) if case["required_facts"] else 1.0
    if missing:
        feedback.append(f"no verifiable claim text states {', '.join(missing)}")

    contradictions = contradicted([m.description for m in output.missing_info], verifiable, recorded.names)
    parts["consistent"] = float(not contradictions)
    feedback.extend(f"missing_info contradicts a claim: {item[:120]!r}" for item in contradictions)
    cut = cut_short(claims)
    parts["whole"] = float(not cut)
    feedback.extend(f"claim {claim_id} was cut at the length cap" for claim_id in cut)

    score = round(sum(WEIGHTS[k] * v for k, v in parts.items()), 4)
    return Score(score=score, parts=parts, verdict=verdict, gatekeeper=f"{gate.status}/{gate.severity}",
                 failed_rules=list(gate.failed_rules), blocked_rules=sorted({f.rule for fs in blockers.values() for f in fs}),
                 forbidden_hits=hits, feedback=feedback)


def output_of(prediction) -> tuple[ExecutorOutput, ParseStatus, list[Finding]]:
    """What the citation module returned: its expanded output, how it parsed, the labels it refused."""
    return prediction.output, prediction.parse_status, list(prediction.refused)


class CitationMetric:
    """The gatekeeper as a metric: dspy.Prediction(score, feedback), with the failed rules named
    (GEPA reflects on the feedback). Its signature fits Evaluate, BootstrapFewShot, MIPROv2 and GEPA."""

    def __init__(self, evidence: dict[str, Recorded]):
        self.evidence = evidence

    def __call__(self, example, prediction, trace=None, pred_name=None, pred_trace=None):
        scored = score_output(self.evidence[example.case_id], *output_of(prediction))
        return dspy.Prediction(score=scored.score, feedback="; ".join(scored.feedback) or "all checks passed")

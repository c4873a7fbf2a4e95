"""The citation step on recorded evidence: what `optimize.py` tunes and scores.

Each devset case's gold tool calls are run once through the real recorder (as HolmesGPT replays
recorded tool output), so every candidate sees the same invocations, ids and refs. The program
under optimization is the pipeline's own citation module (program.stages.executor.Cite): one LM call
per example, under the same schema constraints. Its output then goes through the same checks a
diagnosis runs after citation (program.evidence.checks), and the metric's feedback names the rules
that failed.

The recording is made as `diagnose()` would make it, in two ways (`Recording`): each call's refs
come in an order fixed per case, so that no position carries the answer across the cases of a kind,
and the lookups the pipeline adds to the planner's (`program.stages.named_alerts`) are made, by the
pipeline's own code. A run's results.json says how its evidence was recorded, so that a replay or a
rescore records it the same way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cached_property

import dspy

from devset.gold import gold_decisions, gold_executor_output, gold_tool_calls
from devset.metric import citation_recall, contradicted, narrow_problems, polarity, wrong_citations
from program.store.audit import AuditStore
from program.evidence.checks import CUT_OFF, CitationCheck, Checked, Review, check_citations, retry_context
from program.evidence.citations import Menu
from program.evidence.language import question_language
from program.evidence.relevance import Target
from program.evidence.question_words import mentions
from program.evidence.scope import Scope
from program.evidence.screen import Screen, Screening
from program.stages.named_alerts import named_alert_calls
from program.stages.run import Run
from contracts import (
    ClaimDraft,
    ExecutorOutput,
    Finding,
    GatekeeperResult,
    ParseStatus,
    PlannerOutput,
    RetryContext,
    ToolInvocation,
)
from tools.calls import tool_call_contract
from tools.declaration import ToolDeclaration, Toolbox
from tools.recorder import render_observations

# The gatekeeper is the core: a citation that is not real earns nothing else. Every other part measures
# something a user sees, and optimize.py reports how the parts correlate over a run. "verdict" holds
# the scope checks (as a part of its own, scope was the verdict's bit on all 80 runs of
# results/20261201T184632Z) and needs the right polarity (7 of that run's 40 uncompiled runs had the
# expected verdict for the opposite answer).
WEIGHTS = {"gatekeeper": 0.20, "verdict": 0.25, "refs": 0.20, "polarity": 0.15, "facts": 0.10, "consistent": 0.05,
           "whole": 0.05}


@dataclass(frozen=True)
class Recording:
    """How a case's evidence is recorded and shown. `shuffled_refs`: each call's output list in an
    order fixed by the case id. `named_alert_lookups`: the lookups of the question's named alerts that
    diagnose() adds to the planner's calls, before them, as it runs them. `screened_refs`: what code
    sets aside before the executor is asked (program.evidence.screen) is set aside, as diagnose()
    sets it aside."""

    shuffled_refs: bool = True
    named_alert_lookups: bool = True
    screened_refs: bool = True
    # A case's translation, shown as a demo after it, is recorded again with each call's output list
    # in the reverse order, so that the two show the answering refs at other positions and a
    # position teaches nothing.
    reordered_translations: bool = True
    # The `mention` cases (lines that name the asked thing without reporting it) are recorded; the runs
    # before them had none, and their transcripts hold no request of them.
    mention_cases: bool = True


# How every run before any of them existed recorded its evidence (results/20261201T184632Z): its
# replies cite the refs in this order, so only this recording can score them again.
UNSHUFFLED = Recording(shuffled_refs=False, named_alert_lookups=False, screened_refs=False,
                       reordered_translations=False, mention_cases=False)


def recording_of(meta: dict) -> Recording:
    """The recording a run's results.json names; a run that names none predates `Recording`, and one
    that does not name a later field predates what it records."""
    return (Recording(**{"screened_refs": False, "reordered_translations": False, "mention_cases": False,
                         **meta["recording"]}) if "recording" in meta else UNSHUFFLED)


def shuffled(toolbox: Toolbox, seed: str, *, backwards: bool = False) -> Toolbox:
    """`toolbox` with the items of each call's output list in an order drawn from `seed` (`backwards`:
    that order reversed). The refs are taken from those items as stored, so every path, the gold
    bindings (found by needle) and the expected refs agree with the order the executor is shown."""
    draw = random.Random(seed)

    def reordered(declaration: ToolDeclaration) -> ToolDeclaration:
        def answer(**arguments):
            output = declaration(**arguments)
            items = output.get(declaration.items) if isinstance(output, dict) else None
            if not isinstance(items, list):
                return output
            order = draw.sample(items, len(items))
            return {**output, declaration.items: order[::-1] if backwards else order}

        return declaration.answered_by(answer)

    return toolbox.with_tools(*(reordered(d) for d in toolbox))


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
    # What code sets aside before the executor is asked, as diagnose() would (None: nothing).
    screen: Screen | None = None
    # The same calls recorded again with each output list reversed, for the translation's demo.
    reordered: Recorded | None = None

    def example(self, *, translated: bool = False) -> dspy.Example:
        """The citation module's inputs (the answer's language is the question's); the case id, the
        rendered observations and the gold output in the pointing form are labels (for labeled demos
        and the metric). `translated`: the case in its other language, its question and claim texts
        translated, on the reordered recording when there is one."""
        if translated and self.reordered is not None:
            return self.reordered.example(translated=True)
        gold = gold_executor_output(self.case, self.observations, point=True, translated=translated)
        claims = [ClaimDraft.model_validate({k: v for k, v in c.items() if k != "claim_id"}) for c in gold["claims"]]
        question = self.case["translation"]["question"] if translated else self.case["question"]
        return dspy.Example(case_id=self.case["case_id"], language=question_language(question), question=question,
                            plan=self.plan, invocations=self.invocations, narrow=self.scope.narrow,
                            screen=self.screen, observations=self.observations, retry_context="none",
                            ref_decisions=gold_decisions(self.case, self.observations), claims=claims, hypotheses=[],
                            missing_info=gold["missing_info"], recommended_actions=[]
                            ).with_inputs("language", "question", "plan", "invocations", "narrow", "screen",
                                          "retry_context")

    def gold_output(self) -> tuple[ExecutorOutput, ParseStatus, list[Finding]]:
        """The gold claims as the executor points at them, expanded by code as its own are."""
        claims, refused = Menu(self.invocations, screening=self.screening).expand(self.example().claims)
        return ExecutorOutput(claims=claims), ParseStatus(status="valid", detail="the gold output"), refused

    @cached_property
    def screening(self) -> Screening | None:
        return self.screen(self.invocations) if self.screen is not None else None

    @cached_property
    def floor(self) -> float:
        """What an output with no claim scores on this case."""
        return score_output(self, ExecutorOutput()).score

    @cached_property
    def ceiling(self) -> float:
        """What the gold output scores on this case."""
        return score_output(self, *self.gold_output()).score

    def normalised(self, score: float) -> float:
        """`score` on the case's own range: 0 for no claim, 1 for the gold output."""
        if self.ceiling <= self.floor:
            raise ValueError(f"{self.case['case_id']}: its gold output scores {self.ceiling}, no more than an "
                             f"output with no claim ({self.floor}), so no score can be normalised on it")
        return round((score - self.floor) / (self.ceiling - self.floor), 4)


def record(cases: list[dict], toolbox: Toolbox, recording: Recording = Recording()) -> dict[str, Recorded]:
    """Run every LM case's gold tool calls once on `toolbox`, in one in-memory audit store, in a run
    set up as diagnose() sets one up (its scope and target are the pipeline's, read from the active
    sources). The reordered recordings of the translated cases come after every case's own, so that
    the cases' invocation ids are the same with them or without."""
    store = AuditStore("sqlite://")
    cases = [c for c in cases if recording.mention_cases or c["kind"] != "mention"]
    recorded = {case["case_id"]: _recorded(case, store, toolbox, recording) for case in cases if case["runs_lm"]}
    if recording.shuffled_refs and recording.reordered_translations:
        for case in (c for c in cases if c["runs_lm"] and c.get("translation")):
            recorded[case["case_id"]].reordered = _recorded(case, store, toolbox, recording, backwards=True)
    return recorded


def _recorded(case: dict, store: AuditStore, toolbox: Toolbox, recording: Recording, *,
              backwards: bool = False) -> Recorded:
    tools = shuffled(toolbox, case["case_id"], backwards=backwards) if recording.shuffled_refs else toolbox
    suffix = "-reordered" if backwards else ""
    run = Run(question=case["question"], session_id=f"devset-{case['case_id']}{suffix}", lm_model="", store=store,
              toolbox=tools, language=question_language(case["question"]))
    run.read_sources()
    call_contract = tool_call_contract(toolbox)
    calls = [call_contract(**call) for call in gold_tool_calls(case)]
    if recording.named_alert_lookups:
        calls = [*named_alert_calls(run, tools, calls), *calls]
    for call in calls:
        run.recorder.call(call.tool_name, **call.arguments())
    gold_plan = case["gold"]["plan"]
    plan = PlannerOutput(scope="narrow" if run.scope.narrow else "broad",
                         target_services=gold_plan["target_services"], topics=gold_plan["topics"],
                         excluded_topics=list(run.scope.excluded_topics))
    screen = run.screen if recording.screened_refs else None
    hidden = screen(run.recorder.invocations).hidden() if screen is not None else None
    return Recorded(case=case, store=store, session_id=run.session_id, toolbox=tools,
                    invocations=list(run.recorder.invocations), scope=run.scope, target=run.target, plan=plan,
                    observations=render_observations(run.recorder.invocations, hidden), names=run.catalog.names,
                    topics=run.catalog.topic_groups(), screen=screen)


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
                 refused: list[Finding] = (), text_cap: int | None = None) -> Score:
    """The checks a diagnosis runs after citation, on one output, as the metric and the report see it.
    `text_cap`: the length the attempt's schema capped a claim's text at, as the pipeline passes it."""
    case = recorded.case
    checked = checked_output(recorded, output, parse, refused, text_cap)
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

    said = {polarity(c.claim_text, c.claim_type) for c in verifiable}
    parts["polarity"] = float(said == set(case["expected_polarity"]))
    # An answer that says what the evidence does not (not one that leaves a part unsaid) is wrong.
    wrong_answer = bool(said - set(case["expected_polarity"]))
    if verifiable and not parts["polarity"]:
        feedback.append(f"the claims say the asked thing is {' and '.join(sorted(said))}; the evidence says "
                        f"{' and '.join(case['expected_polarity'])}")
    # The right verdict, reached in scope, for the right answer: an answer that strays or over-claims
    # is not the one asked for, and a PASS that says "exhausted" where the evidence says "healthy"
    # is the wrong answer passed, not the right verdict.
    parts["verdict"] = float(verdict == case["expected_verdict"] and not hits and not problems
                             and bool(parts["polarity"]))

    recall, missed = citation_recall(case["expected_refs"], gate, recorded.invocations)
    wrong_hits = wrong_citations(case["wrong_refs"], gate, recorded.invocations)
    # Evidence that does not answer the question (an earlier resolved alert, another endpoint, an
    # excluded topic) misleads whoever reads the answer's citations, however right the rest is.
    # The right line cited for the wrong answer lends that answer its authority: a wrong answer passed
    # earns nothing for its citations or its facts, so that it scores below a refusal (LOW_CONFID)
    # that cites the line and says nothing it cannot back.
    parts["refs"] = 0.0 if wrong_hits or wrong_answer else recall
    # This wording reaches GEPA's reflection prompt: the recorded run's transcript holds it.
    feedback.extend(f"did not cite the {r['tool_name']} ref containing {' or '.join(map(repr, r['needles']))}"
                    for r in missed)
    feedback.extend(f"cited a ref that does not answer the question: {text[:120]!r}" for text in wrong_hits)

    stated = " ".join(c.claim_text for c in verifiable).casefold()
    missing = [f for f in case["required_facts"] if f.casefold() not in stated]
    stated_share = 1 - len(missing) / len(case["required_facts"]) if case["required_facts"] else 1.0
    parts["facts"] = 0.0 if wrong_answer else stated_share
    if missing:
        feedback.append(f"no verifiable claim text states {', '.join(missing)}")

    contradictions = contradicted([m.description for m in output.missing_info], verifiable, recorded.names)
    parts["consistent"] = float(not contradictions)
    feedback.extend(f"missing_info contradicts a claim: {item[:120]!r}" for item in contradictions)
    cut = [claim_id for claim_id, findings in blockers.items() if any(f.rule == CUT_OFF for f in findings)]
    # Its feedback is the cut_off finding's, above.
    parts["whole"] = float(not cut)

    parts = {name: parts[name] for name in WEIGHTS}
    score = round(sum(WEIGHTS[k] * v for k, v in parts.items()), 4)
    return Score(score=score, parts=parts, verdict=verdict, gatekeeper=f"{gate.status}/{gate.severity}",
                 failed_rules=list(gate.failed_rules), blocked_rules=sorted({f.rule for fs in blockers.values() for f in fs}),
                 forbidden_hits=hits, feedback=feedback)


def checked_output(recorded: Recorded, output: ExecutorOutput, parse: ParseStatus | None = None,
                   refused: list[Finding] = (), text_cap: int | None = None,
                   context: RetryContext | None = None) -> Checked:
    """The checks a diagnosis runs after citation (the hook, the gatekeeper, the claim checks) on one
    output of this case; `context`: the retry context the attempt was asked with."""
    return check_citations(recorded.store, recorded.toolbox, CitationCheck(
        session_id=recorded.session_id, question=recorded.case["question"], output=output,
        parse_status=parse or ParseStatus(status="valid", detail="parsed executor evidence contract"),
        target=recorded.target, refused=tuple(refused), excluded=recorded.scope.exclusion,
        names=recorded.names, topics=tuple(recorded.topics), retry_context=context, text_cap=text_cap,
        screen=recorded.screen))


def review_of(recorded: Recorded):
    """The checks of one attempt on this case's evidence, as a diagnosis reviews one
    (program.stages.cite.review): the citation module asks once more when they refuse what a new
    attempt can fix. The second look is not made: the case's searches are recorded, and it would
    search anew."""
    def review(attempt: dspy.Prediction, context: RetryContext | None) -> Review:
        checked = checked_output(recorded, *output_of(attempt), context=context)
        return Review(checked=checked, retry=retry_context(checked, 1 if context is None else context.attempt + 1),
                      invocations=list(recorded.invocations))

    return review


def output_of(prediction) -> tuple[ExecutorOutput, ParseStatus, list[Finding], int | None]:
    """What the citation module returned: its expanded output, how it parsed, the labels it refused,
    the length its schema capped a claim's text at."""
    return prediction.output, prediction.parse_status, list(prediction.refused), prediction.get("text_cap")


class CitationMetric:
    """The gatekeeper as a metric: dspy.Prediction(score, feedback), with the failed rules named
    (GEPA reflects on the feedback). Its signature fits Evaluate, BootstrapFewShot, MIPROv2 and GEPA."""

    def __init__(self, evidence: dict[str, Recorded]):
        self.evidence = evidence

    def __call__(self, example, prediction, trace=None, pred_name=None, pred_trace=None):
        scored = score_output(self.evidence[example.case_id], *output_of(prediction))
        return dspy.Prediction(score=scored.score, feedback="; ".join(scored.feedback) or "all checks passed")

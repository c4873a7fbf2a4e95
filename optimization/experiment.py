"""Scoring a program on the devset's recorded evidence with dspy.Evaluate, one case per LM call, and
printing progress with an estimate of the time left."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

import dspy
from dspy.utils.callback import BaseCallback

from devset.recorded import Recorded, Score, output_of, review_of, score_output
from program.stages.pipeline import EXECUTOR_ATTEMPTS


@dataclass
class CaseRun:
    label: str
    case_id: str
    family: str
    kind: str
    split: str
    # The attempt the checks scored higher, as a diagnosis uses it (the first, when code refused
    # nothing a new attempt can fix).
    score: float
    # The score on the case's own range: 0 is the floor (what an output with no claim scores on
    # it), 1 the ceiling (what its gold output scores).
    normalised: float
    floor: float
    ceiling: float
    parts: dict[str, float]
    verdict: str
    expected_verdict: str
    gatekeeper: str
    rules: list[str]
    lm_calls: int
    seconds: float
    # Every LM call of the case was answered without the model: from this run's transcript (repeat),
    # or from the replies kept by an earlier run (cached).
    repeat: bool
    cached: bool
    feedback: str
    # The first attempt's score, and how many attempts were made (2: code refused the first and the
    # module asked again). None for a row that makes no attempts (a rule, the gold).
    first_score: float | None = None
    attempts: int | None = None

    @classmethod
    def of(cls, label: str, recorded: Recorded, scored: Score, feedback: str, lm_calls: int = 0,
           seconds: float = 0.0, repeat: bool = False, cached: bool = False, first: Score | None = None,
           attempts: int | None = None) -> CaseRun:
        case = recorded.case
        return cls(label, case["case_id"], case["family"], case["kind"], case["split"], scored.score,
                   recorded.normalised(scored.score), recorded.floor, recorded.ceiling, scored.parts, scored.verdict,
                   case["expected_verdict"], scored.gatekeeper, scored.failed_rules + scored.blocked_rules, lm_calls,
                   seconds, repeat, cached, feedback, first.score if first is not None else None, attempts)


# What a case the program raised on scores: nothing was checked.
RAISED = Score(score=0.0, parts={}, verdict="LOW_CONFID", gatekeeper="-", failed_rules=[], blocked_rules=[],
               forbidden_hits=[], feedback=[])


@dataclass
class Row:
    """One line of the report: a candidate, the uncompiled program or a reference (no model)."""

    label: str
    kind: str
    note: str
    compile_seconds: float | None = None
    runs: list[CaseRun] = field(default_factory=list)

    def mean(self, split: str, normalised: bool = False) -> float | None:
        scores = [r.normalised if normalised else r.score for r in self.runs if r.split == split]
        return round(sum(scores) / len(scores), 4) if scores else None

    def first_mean(self, split: str) -> float | None:
        """The mean of the first attempts alone: the program without its second chance."""
        scores = [r.first_score for r in self.runs if r.split == split and r.first_score is not None]
        return round(sum(scores) / len(scores), 4) if scores else None

    def scores(self, split: str) -> dict[str, float]:
        return {r.case_id: r.score for r in self.runs if r.split == split}


def say(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


class Calls(BaseCallback):
    """Every LM call a run makes (dspy's callbacks see each one), the replies served without the model included."""

    def __init__(self):
        self.calls = 0

    def on_lm_start(self, call_id, instance, inputs):
        self.calls += 1


class Progress:
    """The time left, from the mean time per case so far and the cases still planned."""

    def __init__(self, planned: int):
        self.planned, self.done, self.seconds = planned, 0, 0.0

    def step(self, seconds: float) -> str:
        self.done += 1
        self.seconds += seconds
        left = max(self.planned - self.done, 0) * self.seconds / self.done
        return f"{self.done}/{self.planned}, about {left / 60:.0f} min left"


class CaseMetric:
    """The float metric dspy.Evaluate sums, keeping each case's whole Score and its cost beside it."""

    def __init__(self, label: str, evidence: dict[str, Recorded], calls: Calls, progress: Progress | None,
                 served=lambda: (0, 0)):
        self.label, self.evidence, self.calls, self.progress, self.served = label, evidence, calls, progress, served
        self.runs: list[CaseRun] = []
        self._mark()

    def _mark(self) -> None:
        self._calls, self._served, self._started = self.calls.calls, self.served(), time.perf_counter()

    def __call__(self, example, prediction, trace=None) -> float:
        recorded = self.evidence[example.case_id]
        case = recorded.case
        scored = score_output(recorded, *output_of(prediction))
        tried = prediction.get("attempts") or []
        first = score_output(recorded, *output_of(tried[0][0])) if len(tried) > 1 else scored
        parse = prediction.parse_status
        feedback = "; ".join(([] if parse.status == "valid" else [f"executor output unusable: {parse.detail[:160]}"])
                             + scored.feedback) or "all checks passed"
        seconds = round(time.perf_counter() - self._started, 1)
        calls = self.calls.calls - self._calls
        repeats, cached = (now - then for now, then in zip(self.served(), self._served, strict=True))
        repeat, kept = calls > 0 and repeats == calls, calls > 0 and cached == calls
        self.runs.append(CaseRun.of(self.label, recorded, scored, feedback, calls, seconds, repeat, kept, first,
                                    max(len(tried), 1)))
        left = f" ({self.progress.step(seconds)})" if self.progress else ""
        again = f" (first attempt {first.score:.2f})" if len(tried) > 1 else ""
        say(f"  {self.label} {case['case_id']}: {scored.score:.2f} {scored.verdict}{again} {seconds} s"
            f"{' repeat' if repeat else ' cached' if kept else ''}{left}")
        self._mark()
        return scored.score


class AsDiagnosed(dspy.Module):
    """A citation module run on a devset case as diagnose() runs it: each attempt reviewed by the
    checks on the case's evidence (devset.recorded.review_of), and asked once more when they refuse
    what a new attempt can fix. Only for scoring: what is compiled and saved is the module itself."""

    def __init__(self, program: dspy.Module, evidence: dict[str, Recorded], attempts: int = EXECUTOR_ATTEMPTS):
        super().__init__()
        self.program = program
        self.evidence = evidence
        self.attempts = attempts

    def forward(self, case_id: str, **inputs) -> dspy.Prediction:
        if self.attempts < 2:
            return self.program(**inputs)
        return self.program(**inputs, review=review_of(self.evidence[case_id]), attempts=self.attempts)


def evaluate(program: dspy.Module, label: str, examples: list[dspy.Example], evidence: dict[str, Recorded],
             calls: Calls, progress: Progress | None = None, served=lambda: (0, 0), attempts: int = EXECUTOR_ATTEMPTS
             ) -> list[CaseRun]:
    """One case at a time (the embedded model runs one call at a time), each as diagnose() runs it
    (`AsDiagnosed`, at most `attempts` attempts: a run recorded before the second chance was scored
    had one); a case the program raised on scores 0 and is named. `served`: how many replies the
    run's engines have given without the model so far, (repeats, cached)."""
    metric = CaseMetric(label, evidence, calls, progress, served)
    examples = [e.with_inputs(*e.inputs().keys(), "case_id") for e in examples]
    result = dspy.Evaluate(devset=examples, metric=metric, num_threads=1, display_progress=False,
                           max_errors=len(examples) + 1, provide_traceback=False)(
        AsDiagnosed(program, evidence, attempts))
    scored = {r.case_id for r in metric.runs}
    for example, _, _ in result.results:
        if example.case_id not in scored:
            metric.runs.append(CaseRun.of(label, evidence[example.case_id], RAISED,
                                          "the program raised; dspy.Evaluate scored it 0"))
    return metric.runs

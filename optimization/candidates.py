"""What optimize.py compiles: each candidate is the pipeline's own citation module
(program.stages.executor.Cite) compiled by one of DSPy's optimizers on the training split only."""

from __future__ import annotations

from dataclasses import dataclass

import dspy

from devset.recorded import CitationMetric, Recorded
from program.stages.executor import Cite
from program.stages.nearest import NearestDemo

OPTIMIZERS = ("per_kind", "labeled", "stratified", "bootstrap", "knn", "gepa", "mipro")
DEFAULT = ("per_kind",)
# Compiled from the training cases alone, by no metric and no model: the same programs on every run,
# so their recorded replies can be scored again under another metric.
RESCORABLE = ("per_kind", "labeled", "stratified", "knn")
# Their optimizer has a second model write the instructions. On the task model that is the small
# model rewriting its own prompt, so the user names that model (optimize.py refuses them without one).
REFLECTING = ("gepa", "mipro")
STRATA = ("alert hit", "log hit", "no-hit", "distractor")


@dataclass
class Settings:
    k: int
    threshold: float
    gepa_calls: int
    gepa_val: int
    mipro_trials: int
    lm: dspy.BaseLM
    teacher: dspy.BaseLM | None = None
    # GEPA's reflection and MIPROv2's prompt model: one the user names (optimize.py requires it for them).
    reflection: dspy.BaseLM | None = None


def stratum(recorded: Recorded) -> set[str]:
    """What a case's gold answer shows a student: which kinds of citation, and whether it must pass
    over a distractor."""
    found = set()
    for claim in recorded.case["gold"]["claims"]:
        for binding in claim["bindings"]:
            if binding["tool_name"] == "query_metrics":
                found.add("alert hit")
            elif binding["tool_name"] == "query_logs":
                found.add("no-hit" if claim["claim_type"] == "negative_observation" else "log hit")
    if recorded.case["wrong_refs"]:
        found.add("distractor")
    return found


def stratified(train: list[dspy.Example], evidence: dict[str, Recorded]) -> list[dspy.Example]:
    """Gold demos that together show every stratum (an alert hit, a log hit, a no-hit, a distractor
    case): for each stratum no demo chosen so far shows, the first training case that shows it."""
    chosen: list[dspy.Example] = []
    for name in STRATA:
        shown = set().union(*(stratum(evidence[e.case_id]) for e in chosen)) if chosen else set()
        if name in shown:
            continue
        pick = next((e for e in train if name in stratum(evidence[e.case_id]) and e not in chosen), None)
        if pick is not None:
            chosen.append(pick)
    return chosen


def per_kind(train: list[dspy.Example], evidence: dict[str, Recorded]) -> list[dspy.Example]:
    """One gold demo per kind of harder case (the devset's `kind`): the first training case of each
    kind, in the training split's order, so that every run compiles the same demos in the same
    order. The seed cases (no distractor) and the broad kind (two calls and a long answer) are left
    out: with them the longest prompt and its reply pass the embedded model's context
    (benchmarks/prompt_tokens.py measures it)."""
    first: dict[str, dspy.Example] = {}
    for example in train:
        if (kind := evidence[example.case_id].case["kind"]) not in ("seed", "broad"):
            first.setdefault(kind, example)
    return list(first.values())


def in_both_languages(demos: list[dspy.Example], evidence: dict[str, Recorded]) -> list[dspy.Example]:
    """Each gold demo and, after it, the same case in its other language (its translation: the
    question and claim texts translated, on the same calls with each output list in the reverse
    order, devset/recorded.py), so that a compiled program shows either language's questions the
    demos chosen, in their language, and the answering refs at two positions. A bootstrapped demo
    is what the model wrote for its question: it stays in that one language."""
    both = []
    for demo in demos:
        both.append(demo)
        recorded = evidence.get(demo.get("case_id"))
        if not demo.get("augmented") and recorded is not None and recorded.case.get("translation"):
            both.append(recorded.example(translated=True))
    return both


def with_translations(student: dspy.Module, evidence: dict[str, Recorded]) -> dspy.Module:
    student.predict.demos = in_both_languages(student.predict.demos, evidence)
    return student


def compile_candidate(name: str, train: list[dspy.Example], evidence: dict[str, Recorded],
                      settings: Settings) -> tuple[dspy.Module | None, str]:
    base = Cite()
    metric = CitationMetric(evidence)
    if name == "per_kind":
        demos = per_kind(train, evidence)
        return _gold_demos(base, demos, evidence), (
            f"LabeledFewShot on {len(demos)} gold demos, one per kind of case, each in both languages: "
            + ", ".join(f"{demo.case_id} ({evidence[demo.case_id].case['kind']})" for demo in demos))
    if name == "labeled":
        student = with_translations(dspy.LabeledFewShot(k=settings.k).compile(base.deepcopy(), trainset=train), evidence)
        return student, (f"LabeledFewShot: {settings.k} gold demos from the training split, each in both "
                         f"languages ({len(student.predict.demos)} demos)")
    if name == "stratified":
        demos = stratified(train, evidence)
        return _gold_demos(base, demos, evidence), (
            f"LabeledFewShot on {len(demos)} gold demos that show every stratum ({', '.join(STRATA)}), each in both "
            "languages: " + ", ".join(d.case_id for d in demos))
    if name == "bootstrap":
        teacher = {"lm": settings.teacher} if settings.teacher is not None else None
        optimizer = dspy.BootstrapFewShot(metric=metric, metric_threshold=settings.threshold,
                                          max_bootstrapped_demos=settings.k, max_labeled_demos=0, max_rounds=1,
                                          teacher_settings=teacher)
        student = optimizer.compile(base.deepcopy(), teacher=Cite(), trainset=train)
        kept = len(student.predict.demos)
        who = "the teacher's" if teacher else "the program's own"
        if kept == 0:
            return None, f"BootstrapFewShot: no training run of {who} reached the metric threshold {settings.threshold}"
        return student, f"BootstrapFewShot: {kept} demos from {who} training runs that scored >= {settings.threshold}"
    if name == "knn":
        demos = per_kind(train, evidence)
        student = _gold_demos(base, demos, evidence)
        student.nearest = NearestDemo(in_both_languages(train, evidence))
        return student, (f"per_kind's {len(demos)} gold demos, then the training case whose question reads most "
                         "like the one asked (k=1 nearest neighbour, program/stages/nearest.py), in the answer's "
                         "language")
    if name == "gepa":
        optimizer = dspy.GEPA(metric=metric, reflection_lm=settings.reflection,
                              max_metric_calls=settings.gepa_calls, reflection_minibatch_size=3, track_stats=True,
                              use_merge=False, seed=0)
        student = optimizer.compile(base.deepcopy(), trainset=train, valset=train[: settings.gepa_val])
        return student, "GEPA: " + _instruction_note(base, student, settings.gepa_calls)
    if name == "mipro":
        optimizer = dspy.MIPROv2(metric=_float(metric), prompt_model=settings.reflection,
                                 task_model=settings.lm, auto=None, num_candidates=3, max_bootstrapped_demos=0,
                                 max_labeled_demos=settings.k, num_threads=1, verbose=False, seed=0)
        student = optimizer.compile(base.deepcopy(), trainset=train, num_trials=settings.mipro_trials, minibatch=False,
                                    data_aware_proposer=False, program_aware_proposer=False)
        return with_translations(student, evidence), "MIPROv2: " + _instruction_note(base, student, settings.mipro_trials)
    raise ValueError(f"unknown optimizer {name!r}")


def _gold_demos(base: Cite, demos: list[dspy.Example], evidence: dict[str, Recorded]) -> dspy.Module:
    """`base` shown exactly these gold demos, each followed by its translation."""
    return with_translations(dspy.LabeledFewShot(k=len(demos)).compile(base.deepcopy(), trainset=demos), evidence)


def _float(metric: CitationMetric):
    """MIPROv2 sums its metric's values: the score alone."""
    def score(example, prediction, trace=None):
        return float(metric(example, prediction, trace).score)
    return score


def _instruction_note(base: Cite, student: dspy.Module, budget: int) -> str:
    proposed = student.predict.signature.instructions
    if proposed.strip() == base.predict.signature.instructions.strip():
        return f"no proposed instruction beat the original (budget {budget})"
    return f"its instruction is now {proposed[:300]!r} (budget {budget})"

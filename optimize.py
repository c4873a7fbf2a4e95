"""Compile the diagnosis program's prompts against the devset, and report what it bought.

    python optimize.py                      # evaluate, compile, compare, evaluate again, save
    python optimize.py --eval-only          # evaluate the newest compiled program (or --no-compiled)

Steps: (1) evaluate the uncompiled program; (2) compile with each candidate optimizer on the
training split; (3) evaluate every candidate on the training split and on the held-out split;
(4) keep the candidate with the best held-out score, save it with DSPy's own save, and write
results.json and report.md. A candidate is saved only if it beats the uncompiled program on the
held-out split. Training scores are inflated by memorisation (a case's own gold run can be its
demo); the report prints both so the difference is visible.

The split is fixed: the optimizer sees TRAIN only; HELD_OUT tests generalisation to a service,
alert and scope (excluded topics) it never saw. The gatekeeper-reject case is an offline fixture
checked without an LM, in every evaluation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402

from devset import load_cases, to_examples  # noqa: E402
from devset.gold import fixture_executor_output, gold_demos, gold_tool_calls  # noqa: E402
from devset.metric import WEIGHTS, diagnosis_metric, score_fixture, score_run  # noqa: E402
from program.entry.audit import AuditStore  # noqa: E402
from program.lm.adapter import adapter_for  # noqa: E402
from program.lm.compiled import compiled_dir, load_program  # noqa: E402
from program.lm.engine import lm_spec, resolve_lm  # noqa: E402
from program.lm.pipeline import Diagnosis  # noqa: E402
from signatures.contracts import ToolCall  # noqa: E402
from tools.recorder import ToolInvocationRecorder  # noqa: E402

TRAIN = ("high_memory_positive", "hikaricp_positive", "hikaricp_negative")
HELD_OUT = ("slow_response_positive", "narrow_forbidden")
OPTIMIZERS = ("labeled-executor", "labeled-all", "bootstrap", "gepa")
EXECUTOR_PREDICTORS = ("gather", "executor")


@dataclass
class CaseRun:
    case_id: str
    split: str
    verdict: str
    gatekeeper: str
    forbidden_hits: list[str]
    score: float
    lm_calls: int
    seconds: float
    feedback: str
    session_id: str = ""


@dataclass
class Evaluation:
    label: str
    runs: list[CaseRun] = field(default_factory=list)

    def mean(self, split: str) -> float | None:
        scores = [r.score for r in self.runs if r.split == split]
        return round(sum(scores) / len(scores), 4) if scores else None

    def mean_lm_calls(self) -> float:
        calls = [r.lm_calls for r in self.runs if r.split != "fixture"]
        return round(sum(calls) / len(calls), 2) if calls else 0.0


def say(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


def evaluate(program: Diagnosis, label: str, cases: list[dict], split_of: dict[str, str], lm) -> Evaluation:
    """dspy.Evaluate over the LM cases (one thread: llama.cpp is serialised), plus the offline fixture."""
    examples = to_examples(cases)
    say(f"evaluating {label} on {len(examples)} case(s)")
    started = time.perf_counter()
    with dspy.context(lm=lm, adapter=adapter_for(lm)):
        result = dspy.Evaluate(devset=examples, metric=diagnosis_metric, num_threads=1, display_progress=True,
                               failure_score=0.0, provide_traceback=True)(program)
    evaluation = Evaluation(label=label)
    for example, prediction, score in result.results:
        case = example.case
        if "result" not in prediction:
            evaluation.runs.append(CaseRun(case["case_id"], split_of[case["case_id"]], "ERROR", "-", [], 0.0, 0, 0.0,
                                           "the program raised; see the log above"))
            continue
        breakdown = score_run(case, prediction.result, prediction.invocations)
        usage = prediction.result.usage.values()
        evaluation.runs.append(CaseRun(
            case_id=case["case_id"], split=split_of[case["case_id"]], verdict=prediction.result.verdict,
            gatekeeper=f"{prediction.result.gatekeeper_result.status}/{prediction.result.gatekeeper_result.severity}",
            forbidden_hits=breakdown.forbidden_hits, score=float(score), lm_calls=sum(u.lm_calls for u in usage),
            seconds=round(sum(u.seconds for u in usage), 1), feedback=score.feedback,
            session_id=prediction.result.session_id))
    for case in cases:
        if not case["runs_lm"]:
            evaluation.runs.append(run_fixture(case))
    say(f"{label}: train {evaluation.mean('train')}, held-out {evaluation.mean('held-out')} "
        f"({time.perf_counter() - started:.0f} s)")
    return evaluation


def run_fixture(case: dict) -> CaseRun:
    store = AuditStore("sqlite://")
    session = f"fixture-{case['case_id']}"
    recorder = ToolInvocationRecorder(store, session)
    for call in gold_tool_calls(case):
        tool_call = ToolCall(**call)
        recorder.call(tool_call.tool_name, **tool_call.arguments())
    output = fixture_executor_output(case, [inv.id for inv in recorder.invocations])
    breakdown = score_fixture(case, output, recorder.invocations, session)
    return CaseRun(case["case_id"], "fixture", "REJECT" if breakdown.parts["verdict"] else "not REJECT", "fail/reject"
                   if breakdown.parts["gatekeeper"] else "pass", [], breakdown.score, 0, 0.0,
                   "; ".join(breakdown.feedback) or "all checks passed")


def labeled(program: Diagnosis, demos: dict[str, list], names: tuple[str, ...], k: int) -> Diagnosis:
    """LabeledFewShot from gold outputs, predictor by predictor (each has its own demo fields)."""
    compiled = program.deepcopy()
    for name, predictor in compiled.named_predictors():
        if name in names and demos.get(name):
            predictor.demos = dspy.LabeledFewShot(k=k).compile(predictor.deepcopy(), trainset=demos[name]).demos
    return compiled


def compile_candidate(name: str, base: Diagnosis, train_cases: list[dict], demos: dict[str, list], lm,
                      args) -> tuple[Diagnosis | None, str]:
    if name == "labeled-executor":
        return labeled(base, demos, EXECUTOR_PREDICTORS, args.k), f"gold demos for {', '.join(EXECUTOR_PREDICTORS)}"
    if name == "labeled-all":
        return labeled(base, demos, tuple(demos), args.k), "gold demos for every predictor"
    if name == "bootstrap":
        teacher = labeled(base, demos, tuple(demos), args.k)
        optimizer = dspy.BootstrapFewShot(metric=diagnosis_metric, metric_threshold=1.0, max_bootstrapped_demos=args.k,
                                          max_labeled_demos=0, max_rounds=1)
        with dspy.context(lm=lm, adapter=adapter_for(lm)):
            student = optimizer.compile(base.deepcopy(), teacher=teacher, trainset=to_examples(train_cases))
        kept = sum(len(p.demos) for _, p in student.named_predictors())
        if kept == 0:
            return None, "no teacher run reached the metric threshold 1.0, so nothing was bootstrapped"
        return student, f"{kept} demos bootstrapped from teacher runs that scored 1.0"
    if name == "gepa":
        if not args.reflection_lm:
            return None, "skipped: GEPA needs a reflection LM able to write instructions (--reflection-lm)"
        optimizer = dspy.GEPA(metric=diagnosis_metric, max_metric_calls=args.gepa_calls,
                              reflection_lm=resolve_lm(args.reflection_lm), track_stats=False)
        with dspy.context(lm=lm, adapter=adapter_for(lm)):
            student = optimizer.compile(base.deepcopy(), trainset=to_examples(train_cases))
        return student, f"GEPA with {args.gepa_calls} metric calls"
    raise ValueError(f"unknown optimizer {name!r}")


def table(evaluations: list[Evaluation]) -> list[str]:
    lines = ["| program | case | split | verdict | gatekeeper | forbidden hits | score | LM calls | seconds |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for ev in evaluations:
        for r in ev.runs:
            lines.append(f"| {ev.label} | {r.case_id} | {r.split} | {r.verdict} | {r.gatekeeper} | "
                         f"{', '.join(r.forbidden_hits) or '-'} | {r.score:.3f} | {r.lm_calls} | {r.seconds} |")
    return lines


def write_report(out: Path, meta: dict, evaluations: list[Evaluation], notes: dict[str, str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "notes": notes, "evaluations": [
        {"label": ev.label, "train": ev.mean("train"), "held_out": ev.mean("held-out"),
         "fixture": ev.mean("fixture"), "mean_lm_calls": ev.mean_lm_calls(),
         "runs": [r.__dict__ for r in ev.runs]} for ev in evaluations]}
    (out / "results.json").write_text(json.dumps(payload, ensure_ascii=False, indent=2), encoding="utf-8")
    lines = [f"# Optimization report {meta['run_id']}", "",
             f"LM: `{meta['lm']}`, constraints {meta['constraints']}. Split: train {', '.join(TRAIN)}; held-out {', '.join(HELD_OUT)}; "
             f"offline fixture gatekeeper_reject. Metric weights: {WEIGHTS}.", "",
             "| program | train score | held-out score | fixture | mean LM calls per case | note |",
             "| --- | --- | --- | --- | --- | --- |"]
    for ev in evaluations:
        lines.append(f"| {ev.label} | {ev.mean('train')} | {ev.mean('held-out')} | {ev.mean('fixture')} | "
                     f"{ev.mean_lm_calls()} | {notes.get(ev.label, '')} |")
    for label, note in notes.items():
        if label not in {ev.label for ev in evaluations}:
            lines.append(f"| {label} | - | - | - | - | {note} |")
    lines += ["", f"Chosen: {meta.get('chosen') or 'none'}. Saved: {meta.get('saved') or 'nothing'}. "
              f"Wall time: {meta.get('wall_seconds')} s.", "", "## Per case", ""]
    lines += table(evaluations)
    lines += ["", "## Feedback", ""]
    for ev in evaluations:
        for r in ev.runs:
            lines.append(f"- {ev.label} / {r.case_id}: {r.feedback}")
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python optimize.py")
    parser.add_argument("--lm", help="model for every stage (default: DIAGNOSIS_LM or the embedded model)")
    parser.add_argument("--optimizers", default="labeled-executor,labeled-all,bootstrap",
                        help=f"comma-separated candidates from {', '.join(OPTIMIZERS)}")
    parser.add_argument("--k", type=int, default=2, help="demos per predictor (budget)")
    parser.add_argument("--gepa-calls", type=int, default=40, help="GEPA metric-call budget")
    parser.add_argument("--reflection-lm", help="model GEPA uses to rewrite instructions")
    parser.add_argument("--out", default="results", help="folder for results.json and report.md")
    parser.add_argument("--compiled-dir", help="where to save the compiled program (default: compiled/)")
    parser.add_argument("--db", help="audit database for the runs (default: a file in the results folder)")
    parser.add_argument("--eval-only", action="store_true", help="evaluate only; compile nothing")
    parser.add_argument("--no-compiled", action="store_true", help="with --eval-only: the uncompiled program")
    parser.add_argument("--no-cache", action="store_true", help="bypass DSPy's LM cache")
    parser.add_argument("--constraints", choices=("auto", "on", "off"), default="auto",
                        help="per-call schema constraints (real citations and names); auto: on for the embedded model")
    args = parser.parse_args(argv)

    names = [n.strip() for n in args.optimizers.split(",") if n.strip()]
    unknown = [n for n in names if n not in OPTIMIZERS]
    if unknown:
        parser.error(f"unknown optimizer(s) {', '.join(unknown)}; choose from {', '.join(OPTIMIZERS)}")
    if args.k < 1:
        parser.error("--k must be at least 1")
    if args.compiled_dir:
        os.environ["DIAGNOSIS_COMPILED_DIR"] = args.compiled_dir
    if args.no_cache:
        dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)

    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) / run_id
    out.mkdir(parents=True, exist_ok=True)
    store = AuditStore(args.db or f"sqlite:///{(out / 'audit.db').resolve()}")
    lm = resolve_lm(args.lm)
    cases = load_cases()
    split_of = {c["case_id"]: ("train" if c["case_id"] in TRAIN else "held-out" if c["case_id"] in HELD_OUT
                               else "fixture") for c in cases}
    train_cases = [c for c in cases if c["case_id"] in TRAIN]
    started = time.perf_counter()
    meta = {"run_id": run_id, "lm": lm_spec(args.lm), "k": args.k, "optimizers": names, "constraints": args.constraints}
    constrain = {"auto": None, "on": True, "off": False}[args.constraints]

    def fresh() -> Diagnosis:
        return Diagnosis(store=store, constrain=constrain)

    notes: dict[str, str] = {}

    if args.eval_only:
        program = None if args.no_compiled else load_program(store)
        label = "uncompiled" if program is None else "compiled (newest)"
        program = program or fresh()
        program.constrain = constrain
        evaluations = [evaluate(program, label, cases, split_of, lm)]
        meta["wall_seconds"] = round(time.perf_counter() - started, 1)
        write_report(out, meta, evaluations, notes)
        say(f"report: {out / 'report.md'}")
        print("\n".join(table(evaluations)))
        return 0

    baseline = evaluate(fresh(), "uncompiled", cases, split_of, lm)
    evaluations = [baseline]
    candidates: dict[str, Diagnosis] = {}
    demos = gold_demos(train_cases)  # the gold runs are the same for every candidate
    for name in names:
        say(f"compiling {name}")
        try:
            program, note = compile_candidate(name, fresh(), train_cases, demos, lm, args)
        except Exception as exc:  # a failing optimizer is reported, the others still run
            program, note = None, f"failed: {type(exc).__name__}: {exc}"
        notes[name] = note
        say(f"{name}: {note}")
        if program is not None:
            candidates[name] = program
            evaluations.append(evaluate(program, name, cases, split_of, lm))

    ranked = sorted((ev for ev in evaluations if ev.label in candidates),
                    key=lambda ev: (ev.mean("held-out") or 0, ev.mean("train") or 0, -ev.mean_lm_calls()), reverse=True)
    best = ranked[0] if ranked else None
    meta["chosen"] = best.label if best else None
    if best and (best.mean("held-out") or 0) > (baseline.mean("held-out") or 0):
        directory = compiled_dir()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"diagnosis-{run_id}.json"
        candidates[best.label].save(str(path))
        meta["saved"] = str(path)
    elif best:
        notes[best.label] += "; not saved: it does not beat the uncompiled program on the held-out split"
    meta["wall_seconds"] = round(time.perf_counter() - started, 1)
    write_report(out, meta, evaluations, notes)
    say(f"report: {out / 'report.md'}; saved: {meta.get('saved') or 'nothing'}; wall time {meta['wall_seconds']} s")
    for ev in evaluations:
        print(f"{ev.label:>18}: train {ev.mean('train')}  held-out {ev.mean('held-out')}  "
              f"fixture {ev.mean('fixture')}  LM calls/case {ev.mean_lm_calls()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

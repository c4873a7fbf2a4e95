"""Tune the executor's narrow-scope citations against the devset, and report what it bought.

    python optimize.py                          # record, compile, evaluate, compare, save
    python optimize.py --replay results/<run>   # re-score a run from its transcript, no model

The program tuned is the pipeline's own citation module (program.lm.citation.Cite, whose one
predictor has the signature signatures.diagnosis.CiteEvidence), evaluated on recorded evidence:
each devset case's gold tool calls run once through the real recorder, so one example costs one
LM call, and the metric is the checks a diagnosis runs after citation (the gatekeeper and the code
checks that decide whether a claim could be verified; devset/recorded.py). Candidates compile on the training split
only; every candidate is scored on both splits. The gain is the held-out score minus the
uncompiled program's, with a paired bootstrap interval over the held-out cases as its noise; the
chosen candidate is saved (DSPy's own save, into compiled/) only when that interval lies above
zero, and diagnose() and the CLI then load it. Every LM request and reply is recorded to
`transcript.jsonl` in the run's folder, and the demo selector's embeddings to `embeddings.json`.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402
from dspy.utils.callback import BaseCallback  # noqa: E402

from devset import load_devset  # noqa: E402
from devset.gold import fixture_executor_output, gold_tool_calls  # noqa: E402
from devset.metric import check_fixture, score_run  # noqa: E402
from devset.recorded import (  # noqa: E402
    WEIGHTS,
    CitationMetric,
    Recorded,
    output_of,
    record,
    score_output,
)
from program.entry.audit import AuditStore  # noqa: E402
from program.lm.adapter import adapter_for  # noqa: E402
from program.lm.citation import Cite  # noqa: E402
from program.lm.compiled import compiled_dir  # noqa: E402
from program.lm.embedding import QuestionEmbedder  # noqa: E402
from program.lm.engine import lm_spec, resolve_lm  # noqa: E402
from program.lm.pipeline import Diagnosis  # noqa: E402
from program.lm.transcript import recording_lm, replaying_lm  # noqa: E402
from signatures.contracts import ExecutorOutput, ParseStatus, ToolCall  # noqa: E402
from tools.catalog import active_catalog  # noqa: E402
from tools.recorder import ToolInvocationRecorder  # noqa: E402

OPTIMIZERS = ("labeled", "bootstrap", "knn", "gepa")
# Only these become a fixed program that diagnose() can load; KNN picks demos per question at run time.
SAVABLE = ("labeled", "bootstrap", "gepa")
BOOTSTRAP_RESAMPLES = 2000
INTERVAL = 0.90


@dataclass
class CaseRun:
    case_id: str
    family: str
    split: str
    score: float
    verdict: str
    gatekeeper: str
    rules: list[str]
    forbidden_hits: list[str]
    lm_calls: int
    seconds: float
    feedback: str


@dataclass
class Candidate:
    label: str
    note: str
    compile_seconds: float = 0.0
    runs: list[CaseRun] = field(default_factory=list)

    def mean(self, split: str) -> float | None:
        scores = [r.score for r in self.runs if r.split == split]
        return round(sum(scores) / len(scores), 4) if scores else None

    def rate(self, split: str, test) -> str:
        runs = [r for r in self.runs if r.split == split]
        return f"{sum(map(test, runs))} of {len(runs)}"


def say(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


class Counter(BaseCallback):
    """LM calls made while a case is being evaluated (dspy.settings callbacks see every call)."""

    calls = 0

    def on_lm_start(self, call_id, instance, inputs):
        Counter.calls += 1


def evaluate(program: dspy.Module, label: str, examples: list[dspy.Example], evidence: dict[str, Recorded],
             split_of: dict[str, str]) -> list[CaseRun]:
    runs = []
    for n, example in enumerate(examples, start=1):
        before, started = Counter.calls, time.perf_counter()
        try:
            output, parse, refused = output_of(program(**example.inputs()))
        except Exception as exc:  # a failure the module did not catch: scored as no output
            output, parse, refused = (ExecutorOutput(), ParseStatus(status="invalid",
                                                                    detail=f"{type(exc).__name__}: {exc}"), [])
        seconds = round(time.perf_counter() - started, 1)
        recorded = evidence[example.case_id]
        scored = score_output(recorded, output, parse, refused)
        feedback = "; ".join(([] if parse.status == "valid" else [f"executor output unusable: {parse.detail[:160]}"])
                             + scored.feedback) or "all checks passed"
        runs.append(CaseRun(example.case_id, recorded.case["family"], split_of[example.case_id], scored.score,
                            scored.verdict, scored.gatekeeper, scored.failed_rules + scored.blocked_rules,
                            scored.forbidden_hits, Counter.calls - before, seconds, feedback))
        say(f"  {label} [{n}/{len(examples)}] {example.case_id}: {scored.score:.2f} {scored.verdict} ({seconds} s)")
    return runs


def bootstrap_gain(base: list[CaseRun], other: list[CaseRun], split: str = "held-out") -> dict:
    """The mean held-out gain over the uncompiled program, and a paired bootstrap interval over cases."""
    before = {r.case_id: r.score for r in base if r.split == split}
    after = {r.case_id: r.score for r in other if r.split == split}
    diffs = [after[c] - before[c] for c in sorted(before) if c in after]
    if not diffs:
        return {"gain": None, "low": None, "high": None, "cases": 0}
    rng = random.Random(0)
    means = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(BOOTSTRAP_RESAMPLES))
    tail = (1 - INTERVAL) / 2
    return {"gain": round(sum(diffs) / len(diffs), 4), "low": round(means[int(tail * len(means))], 4),
            "high": round(means[int((1 - tail) * len(means)) - 1], 4), "cases": len(diffs)}


def compile_candidate(name: str, evidence: dict[str, Recorded], train: list[dspy.Example], args,
                      embedder: QuestionEmbedder, lm) -> tuple[dspy.Module | None, str]:
    base = Cite()
    metric = CitationMetric(evidence)
    if name == "labeled":
        student = dspy.LabeledFewShot(k=args.k).compile(base.deepcopy(), trainset=train)
        return student, f"LabeledFewShot: {len(student.predict.demos)} gold demos from the training split"
    if name == "bootstrap":
        optimizer = dspy.BootstrapFewShot(metric=metric, metric_threshold=args.threshold, max_bootstrapped_demos=args.k,
                                          max_labeled_demos=0, max_rounds=1)
        student = optimizer.compile(base.deepcopy(), trainset=train)
        kept = len(student.predict.demos)
        if kept == 0:
            return None, f"BootstrapFewShot: no training run reached the metric threshold {args.threshold}"
        return student, f"BootstrapFewShot: {kept} demos from the program's own runs that scored >= {args.threshold}"
    if name == "knn":
        optimizer = dspy.KNNFewShot(k=args.k, trainset=train, vectorizer=dspy.Embedder(embedder, caching=False),
                                    max_bootstrapped_demos=0, max_labeled_demos=args.k)
        return optimizer.compile(base.deepcopy()), (f"KNNFewShot: the {args.k} training examples nearest to each "
                                                    f"question (llama.cpp embeddings of the question, "
                                                    f"{embedder.model.name}) as gold demos")
    if name == "gepa":
        optimizer = dspy.GEPA(metric=metric, reflection_lm=lm, max_metric_calls=args.gepa_calls,
                              reflection_minibatch_size=3, track_stats=True, use_merge=False, seed=0)
        student = optimizer.compile(base.deepcopy(), trainset=train, valset=train[: args.gepa_val])
        proposed = student.predict.signature.instructions
        changed = proposed.strip() != base.predict.signature.instructions.strip()
        return student, (f"GEPA, the embedded model reflecting ({args.gepa_calls} metric calls, validation on "
                         f"{args.gepa_val} training cases): "
                         + (f"its instruction is now {proposed[:300]!r}" if changed
                            else "no proposed instruction beat the original"))
    raise ValueError(f"unknown optimizer {name!r}")


def pipeline_comparison(label: str | None, chosen: dspy.Module | None, held_cases: list[dict]) -> list[dict]:
    """Whole diagnoses (planner, tools, executor, checks, verifier) of the held-out questions, by the
    uncompiled program and by the chosen one, scored with the whole-diagnosis metric."""
    store = AuditStore("sqlite://")
    programs = {"uncompiled": Diagnosis(store)}
    if chosen is not None:
        programs[label] = Diagnosis(store, citation=chosen.deepcopy())
    rows = []
    for name, program in programs.items():
        for case in held_cases:
            started = time.perf_counter()
            prediction = program(question=case["question"])
            result = prediction.result
            breakdown = score_run(case, result, prediction.invocations)
            rows.append({"program": name, "case_id": case["case_id"], "score": breakdown.score,
                         "verdict": result.verdict,
                         "gatekeeper": f"{result.gatekeeper_result.status}/{result.gatekeeper_result.severity}"
                         if result.gatekeeper_result else "-",
                         "lm_calls": sum(u.lm_calls for u in result.usage.values()),
                         "seconds": round(time.perf_counter() - started, 1),
                         "feedback": "; ".join(breakdown.feedback) or "all checks passed"})
            say(f"  whole diagnosis, {name}, {case['case_id']}: {breakdown.score:.2f} {result.verdict}")
    return rows


def fixture_row(cases: list[dict]) -> dict:
    """The gatekeeper-reject family, offline and without an LM: reported once, for the data, not per candidate."""
    case = next(c for c in cases if not c["runs_lm"])
    store = AuditStore("sqlite://")
    session = f"fixture-{case['case_id']}"
    recorder = ToolInvocationRecorder(store, session)
    for call in gold_tool_calls(case):
        tool_call = ToolCall(**call)
        recorder.call(tool_call.tool_name, **tool_call.arguments())
    output = fixture_executor_output(case, [inv.id for inv in recorder.invocations])
    checked = check_fixture(case, output, recorder.invocations, session)
    return {"case_id": case["case_id"], "ok": checked.ok, "severity": checked.severity,
            "failed_rules": checked.failed_rules, "expected_rules": checked.expected_rules}


def chart_svg(candidates: list[Candidate]) -> str:
    """Grouped bars: training and held-out score per candidate."""
    width, height, pad, bar = 120 * len(candidates) + 60, 240, 40, 36
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 60}" role="img" '
             f'aria-label="score per candidate">',
             f'<line x1="{pad}" y1="{height}" x2="{width - 10}" y2="{height}" stroke="#333"/>']
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = height - tick * (height - 20)
        parts.append(f'<text x="{pad - 6}" y="{y + 4:.0f}" font-size="11" text-anchor="end">{tick:.2f}</text>'
                     f'<line x1="{pad}" y1="{y:.0f}" x2="{width - 10}" y2="{y:.0f}" stroke="#ddd"/>')
    for i, candidate in enumerate(candidates):
        x = pad + 20 + i * 120
        for j, (split, colour) in enumerate((("train", "#7a9cc6"), ("held-out", "#d08c3f"))):
            value = candidate.mean(split) or 0.0
            top = height - value * (height - 20)
            parts.append(f'<rect x="{x + j * bar}" y="{top:.1f}" width="{bar - 4}" height="{height - top:.1f}" '
                         f'fill="{colour}"><title>{html.escape(candidate.label)} {split}: {value:.3f}</title></rect>'
                         f'<text x="{x + j * bar + bar / 2 - 2}" y="{top - 4:.1f}" font-size="10" '
                         f'text-anchor="middle">{value:.2f}</text>')
        parts.append(f'<text x="{x + bar}" y="{height + 16}" font-size="12" text-anchor="middle">'
                     f'{html.escape(candidate.label)}</text>')
    parts.append(f'<rect x="{pad}" y="{height + 30}" width="12" height="12" fill="#7a9cc6"/>'
                 f'<text x="{pad + 16}" y="{height + 40}" font-size="12">train</text>'
                 f'<rect x="{pad + 70}" y="{height + 30}" width="12" height="12" fill="#d08c3f"/>'
                 f'<text x="{pad + 86}" y="{height + 40}" font-size="12">held-out</text></svg>')
    return "".join(parts)


def summary_rows(candidates: list[Candidate], gains: dict[str, dict]) -> list[list[str]]:
    rows = []
    for c in candidates:
        gain = gains.get(c.label, {})
        interval = "-" if gain.get("low") is None else f"{gain['gain']:+.3f} [{gain['low']:+.3f}, {gain['high']:+.3f}]"
        rows.append([c.label, str(c.mean("train")), str(c.mean("held-out")), interval,
                     c.rate("held-out", lambda r: r.gatekeeper == "pass/none"),
                     c.rate("held-out", lambda r: bool(r.forbidden_hits)),
                     c.rate("held-out", lambda r: r.verdict == "PASS"), f"{c.compile_seconds:.0f}", c.note])
    return rows


SUMMARY_HEAD = ["program", "train score", "held-out score", "held-out gain [90% interval]", "held-out gatekeeper pass",
                "held-out forbidden hits", "held-out code verdict PASS", "compile s", "note"]
CASE_HEAD = ["program", "case", "family", "split", "score", "code verdict", "gatekeeper", "rules", "forbidden", "LM calls",
             "seconds", "feedback"]


PIPELINE_HEAD = ["program", "case", "score", "verdict", "gatekeeper", "LM calls", "seconds", "feedback"]


def pipeline_rows(rows: list[dict]) -> list[list[str]]:
    means = {}
    for row in rows:
        means.setdefault(row["program"], []).append(row["score"])
    summary = [[name, "mean", f"{sum(scores) / len(scores):.3f}",
                f"{sum(r['verdict'] == 'PASS' for r in rows if r['program'] == name)} PASS of {len(scores)}",
                "", "", "", ""] for name, scores in means.items()]
    return summary + [[r["program"], r["case_id"], f"{r['score']:.3f}", r["verdict"], r["gatekeeper"], str(r["lm_calls"]),
                       str(r["seconds"]), r["feedback"]] for r in rows]


def case_rows(candidates: list[Candidate]) -> list[list[str]]:
    return [[c.label, r.case_id, r.family, r.split, f"{r.score:.3f}", r.verdict, r.gatekeeper, ", ".join(r.rules) or "-",
             ", ".join(r.forbidden_hits) or "-", str(r.lm_calls), str(r.seconds), r.feedback]
            for c in candidates for r in c.runs]


def write_report(out: Path, payload: dict, candidates: list[Candidate], gains: dict[str, dict]) -> None:
    meta = payload["meta"]
    (out / "results.json").write_text(json.dumps(payload, ensure_ascii=False, indent=2), encoding="utf-8")
    intro = [
        f"LM `{meta['lm']}`; demo budget k={meta['k']}; {meta['train_cases']} training and {meta['held_out_cases']} "
        f"held-out cases, one executor call each, on recorded evidence. Score weights: {WEIGHTS}. "
        f"Code verdict: what the gatekeeper and the code checks make of the output if the verifier agreed.",
        f"Noise: a paired bootstrap over the held-out cases ({BOOTSTRAP_RESAMPLES} resamples, "
        f"{int(INTERVAL * 100)}% interval of the mean gain over the uncompiled program). Decoding is greedy, so a "
        f"second run of the uncompiled program sends the same prompts; the repeat below shows what it gave.",
        f"Repeat of the uncompiled program on the held-out split: {meta.get('repeat') or 'not run'}.",
        f"Chosen: {meta.get('chosen') or 'none'}. Saved: {meta.get('saved') or 'nothing'} ({meta.get('why')}).",
        f"Gatekeeper-reject family (offline fixture, no LM, reported once): severity "
        f"{payload['fixture']['severity']}, failed rules {', '.join(payload['fixture']['failed_rules'])} (expected "
        f"{', '.join(payload['fixture']['expected_rules'])}): {'as expected' if payload['fixture']['ok'] else 'NOT as expected'}.",
        f"Wall time {meta['wall_seconds']} s on {meta['cores']} cores.",
    ]
    md = [f"# Optimization run {meta['run_id']}", "", *[f"- {line}" for line in intro], "",
          "| " + " | ".join(SUMMARY_HEAD) + " |", "|" + " --- |" * len(SUMMARY_HEAD)]
    md += ["| " + " | ".join(row) + " |" for row in summary_rows(candidates, gains)]
    pipeline = pipeline_rows(payload.get("pipeline") or [])
    if pipeline:
        md += ["", "## Whole diagnoses on the held-out split", "", "| " + " | ".join(PIPELINE_HEAD) + " |",
               "|" + " --- |" * len(PIPELINE_HEAD)]
        md += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in pipeline]
    md += ["", "## Per case", "", "| " + " | ".join(CASE_HEAD) + " |", "|" + " --- |" * len(CASE_HEAD)]
    md += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in case_rows(candidates)]
    (out / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")

    def table(head, rows):
        return ("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead><tbody>"
                + "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
                + "</tbody></table>")

    page = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Optimization run {meta['run_id']}</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;font-size:13px}"
            "td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}th{background:#f3f3f3}</style></head><body>"
            f"<h1>Optimization run {html.escape(meta['run_id'])}</h1><ul>"
            + "".join(f"<li>{html.escape(line)}</li>" for line in intro) + "</ul>"
            + "<h2>Train and held-out score per candidate</h2>" + chart_svg(candidates)
            + table(SUMMARY_HEAD, summary_rows(candidates, gains))
            + (("<h2>Whole diagnoses on the held-out split</h2>" + table(PIPELINE_HEAD, pipeline)) if pipeline else "")
            + "<h2>Per case</h2>" + table(CASE_HEAD, case_rows(candidates)) + "</body></html>\n")
    (out / "report.html").write_text(page, encoding="utf-8")


def save_program(chosen: dspy.Module, run_id: str) -> Path:
    """The full diagnosis program, with the chosen citation module: what diagnose() loads."""
    program = Diagnosis(citation=chosen.deepcopy())
    directory = compiled_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"diagnosis-{run_id}.json"
    program.save(str(path))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python optimize.py")
    parser.add_argument("--lm", help="the task model (default: DIAGNOSIS_LM or the embedded model)")
    parser.add_argument("--optimizers", default=",".join(OPTIMIZERS),
                        help=f"comma-separated candidates from {', '.join(OPTIMIZERS)}")
    parser.add_argument("--k", type=int, default=2, help="demos per candidate")
    parser.add_argument("--threshold", type=float, default=0.9, help="BootstrapFewShot: the metric a demo run needs")
    parser.add_argument("--gepa-calls", type=int, default=24, help="GEPA: metric-call budget")
    parser.add_argument("--gepa-val", type=int, default=6, help="GEPA: training cases it validates proposals on")
    parser.add_argument("--pipeline", action="store_true",
                        help="finally, whole diagnoses of the held-out questions: uncompiled against the chosen program")
    parser.add_argument("--repeat-baseline", action="store_true",
                        help="run the uncompiled program a second time on the held-out split")
    parser.add_argument("--out", default="results", help="folder for results/<run>/")
    parser.add_argument("--compiled-dir", help="where to save the chosen program (default: compiled/)")
    parser.add_argument("--replay", help="a run folder to re-score from its transcript and embeddings, without the model")
    args = parser.parse_args(argv)

    recorded_payload = None
    if args.replay:
        source = Path(args.replay)
        try:
            recorded_payload = json.loads((source / "results.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            parser.error(f"--replay {source}: cannot read its results.json: {exc}")
        if not (source / "transcript.jsonl").is_file():
            parser.error(f"--replay {source}: it has no transcript.jsonl to replay")
        for key, value in recorded_payload["meta"]["args"].items():
            setattr(args, key, value)
    names = [n.strip() for n in args.optimizers.split(",") if n.strip()]
    unknown = [n for n in names if n not in OPTIMIZERS]
    if unknown:
        parser.error(f"unknown optimizer(s) {', '.join(unknown)}; choose from {', '.join(OPTIMIZERS)}")
    if args.k < 1 or args.gepa_calls < 1 or args.gepa_val < 1:
        parser.error("--k, --gepa-calls and --gepa-val must be at least 1")
    if not 0 < args.threshold <= 1:
        parser.error("--threshold must be in (0, 1]")
    if args.compiled_dir:
        os.environ["DIAGNOSIS_COMPILED_DIR"] = args.compiled_dir

    started = time.perf_counter()
    run_id = recorded_payload["meta"]["run_id"] if recorded_payload else datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.replay) / "replay" if args.replay else Path(args.out) / run_id
    out.mkdir(parents=True, exist_ok=True)
    source = Path(args.replay) if args.replay else out
    base_lm = resolve_lm(args.lm)
    lm = replaying_lm(base_lm, source / "transcript.jsonl") if args.replay else recording_lm(base_lm, out / "transcript.jsonl")
    embedder = (QuestionEmbedder(replay=source / "embeddings.json") if args.replay
                else QuestionEmbedder(record=out / "embeddings.json"))

    say("loading the devset and recording the gold tool calls through the recorder")
    cases = load_devset()
    evidence = record(cases, active_catalog())
    split_of = {c["case_id"]: c["split"] for c in cases}
    examples = {cid: rec.example() for cid, rec in evidence.items()}
    train = [examples[c] for c in examples if split_of[c] == "train"]
    held = [examples[c] for c in examples if split_of[c] == "held-out"]
    say(f"{len(train)} training and {len(held)} held-out cases; LM {lm_spec(args.lm)}"
        + (f", replayed from {source}" if args.replay else ""))

    candidates: list[Candidate] = []
    programs: dict[str, dspy.Module] = {}
    with dspy.context(lm=lm, adapter=adapter_for(lm), callbacks=[*dspy.settings.callbacks, Counter()]):
        say("stage 1: the uncompiled executor (the demos it ships with)")
        baseline = Candidate("uncompiled", "the shipped instruction and demos")
        baseline.runs = evaluate(Cite(), "uncompiled", train + held, evidence, split_of)
        candidates.append(baseline)
        repeat = None
        if args.repeat_baseline:
            say("stage 1b: the uncompiled executor again, on the held-out split")
            repeat = evaluate(Cite(), "uncompiled again", held, evidence, split_of)
        for number, name in enumerate(names, start=2):
            say(f"stage {number}: compiling {name} on the training split")
            compile_started = time.perf_counter()
            try:
                program, note = compile_candidate(name, evidence, train, args, embedder, lm)
            except Exception as exc:  # a failing optimizer is reported, and the others still run
                program, note = None, f"failed: {type(exc).__name__}: {exc}"
            candidate = Candidate(name, note, round(time.perf_counter() - compile_started, 1))
            say(f"{name}: {note} ({candidate.compile_seconds} s)")
            if program is not None:
                programs[name] = program
                candidate.runs = evaluate(program, name, train + held, evidence, split_of)
            candidates.append(candidate)

    gains = {c.label: bootstrap_gain(baseline.runs, c.runs) for c in candidates[1:] if c.runs}
    meta = {"run_id": run_id, "lm": lm_spec(args.lm), "k": args.k, "cores": os.cpu_count(),
            "train_cases": len(train), "held_out_cases": len(held),
            "args": {k: getattr(args, k) for k in ("lm", "optimizers", "k", "threshold", "gepa_calls", "gepa_val",
                                                   "repeat_baseline", "pipeline")}}
    if repeat is not None:
        same = sum(a.score == b.score for a, b in zip(
            [r for r in baseline.runs if r.split == "held-out"], repeat, strict=True))
        meta["repeat"] = (f"mean {round(sum(r.score for r in repeat) / len(repeat), 4)} against "
                          f"{baseline.mean('held-out')}; {same} of {len(repeat)} cases scored the same")
    ranked = sorted((c for c in candidates if c.label in programs and c.label in SAVABLE),
                    key=lambda c: (c.mean("held-out") or 0, c.mean("train") or 0), reverse=True)
    best = ranked[0] if ranked else None
    meta["chosen"] = best.label if best else None
    if best is None:
        meta["why"] = "no candidate compiled"
    elif gains[best.label]["low"] is not None and gains[best.label]["low"] > 0:
        meta["why"] = f"its held-out gain {gains[best.label]['gain']:+.3f} has an interval above zero"
        if not args.replay:
            meta["saved"] = str(save_program(programs[best.label], run_id))
    else:
        meta["why"] = (f"its held-out gain {gains[best.label]['gain']:+.3f} is within the noise "
                       f"[{gains[best.label]['low']:+.3f}, {gains[best.label]['high']:+.3f}]")
    pipeline = []
    if args.pipeline:
        say("final stage: whole diagnoses of the held-out questions")
        with dspy.context(lm=lm, adapter=adapter_for(lm), callbacks=[*dspy.settings.callbacks, Counter()]):
            pipeline = pipeline_comparison(meta["chosen"], programs.get(meta["chosen"]),
                                           [c for c in cases if c["split"] == "held-out"])
    meta["wall_seconds"] = round(time.perf_counter() - started, 1)
    if recorded_payload:
        meta["wall_seconds"] = recorded_payload["meta"]["wall_seconds"]
        meta["saved"] = recorded_payload["meta"].get("saved")
    payload = {"meta": meta, "fixture": fixture_row(cases), "gains": gains, "pipeline": pipeline,
               "candidates": [{**{k: v for k, v in asdict(c).items() if k != "runs"}, "train": c.mean("train"),
                               "held_out": c.mean("held-out"), "runs": [asdict(r) for r in c.runs]}
                              for c in candidates]}
    write_report(out, payload, candidates, gains)
    for c in candidates:
        print(f"{c.label:>11}: train {c.mean('train')}  held-out {c.mean('held-out')}  {gains.get(c.label, '')}")
    say(f"report: {out / 'report.md'} and report.html; saved: {meta.get('saved') or 'nothing'} ({meta['why']})")
    if recorded_payload:
        def scores(payload):
            return ([[(r["case_id"], r["score"], r["verdict"], r["rules"]) for r in c["runs"]] for c in payload["candidates"]]
                    + [[(r["program"], r["case_id"], r["score"], r["verdict"]) for r in payload.get("pipeline", [])]])

        same = scores(recorded_payload) == scores(payload)
        print(f"replay reproduces every recorded score, verdict and rule: {same}")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tune the executor's citation step against the devset, and report what it bought.

    python optimize.py                          # record, compile, evaluate, compare, save
    python optimize.py --replay results/<run>   # re-score a run from its transcript, no model
    python optimize.py --rescore results/<run>  # its replies under this code's metric: results/rescored-<run>/

The program tuned is the module diagnose() runs: the pipeline's citation module
(program.stages.executor.Cite), compiled through its one predictor, on recorded evidence. Each devset
case's gold tool calls run once through the real recorder, in the devset's world, so one example
costs one LM call, and the metric is the checks a diagnosis runs after citation, with the parts a
user sees (devset/recorded.py). Candidates compile on the training split only and are scored on the
held-out split beside the uncompiled program, the lookup rule (no model), the gold outputs (the
metric's ceiling) and the best candidate per case. The gain is the held-out score minus the
uncompiled program's, with a paired bootstrap interval as its noise. The best candidate is saved,
with the LM it was compiled for, only when that interval lies above zero and the guard
(optimization/guard.py, --guard) finds it no worse than the uncompiled program on whole diagnoses,
and asked at least the questions the program it replaces for that LM was asked.
Every LM request and reply goes to `transcript.jsonl`, the guard's to `guard.jsonl`; under greedy
decoding an exact repeat is answered from it and counted,
and a request an earlier run made of the same model is answered from the reply cache (.reply_cache/,
or --reply-cache) and counted apart.
Each case's score is also reported normalised, between what an output with no claim scores on it
and what its gold output scores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

import signatures  # noqa: F401  (keeps litellm offline before dspy loads)
import dspy  # noqa: E402

from devset import devset_world, load_devset  # noqa: E402
from devset.questions import FIXTURE_SETS  # noqa: E402
from devset.recorded import WEIGHTS, Recorded, Recording, output_of, record, recording_of, score_output  # noqa: E402
from devset.rule import LookupRule  # noqa: E402
from optimization.candidates import (  # noqa: E402
    DEFAULT, OPTIMIZERS, REFLECTING, RESCORABLE, Settings, compile_candidate)
from optimization.experiment import CaseRun, Calls, Progress, Row, evaluate, say  # noqa: E402
from optimization.guard import guard, narrower_than_saved  # noqa: E402
from optimization.replay import (  # noqa: E402
    GUARD_TRANSCRIPT, LATER_ARGS, REPLY_INPUTS, RECORDED_ARGS, ReplayError, checkout, differences, other_checkout,
    read_run, rescored)
from optimization.chromium import screenshot  # noqa: E402
from optimization.report import write_report  # noqa: E402
from optimization.statistics import INTERVAL, RESAMPLES, paired_gain, part_correlation  # noqa: E402
from program.lm.adapter import adapter_for  # noqa: E402
from program.stages.executor import Cite  # noqa: E402
from program.stages.pipeline import EXECUTOR_ATTEMPTS  # noqa: E402
from program.stages.compiled import lm_identity, save_program  # noqa: E402
from program.lm.engine import lm_spec, resolve_lm  # noqa: E402
from program.lm.transcript import recording_lm, replaying_lm  # noqa: E402
from tools.functions import TOOLBOX  # noqa: E402

# Where the model's replies are kept across runs unless --reply-cache names another folder; git-ignored.
REPLY_CACHE = Path(__file__).resolve().parent / ".reply_cache"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python optimize.py")
    parser.add_argument("--lm", help="the task model (default: DIAGNOSIS_LM or the embedded model)")
    parser.add_argument("--optimizers", default=",".join(DEFAULT),
                        help=f"comma-separated candidates from {', '.join(OPTIMIZERS)} (default: {','.join(DEFAULT)})")
    parser.add_argument("--k", type=int, default=2,
                        help="demos per candidate (per_kind takes one per kind, stratified one per stratum)")
    parser.add_argument("--threshold", type=float, default=0.9, help="BootstrapFewShot: the metric a demo run needs")
    parser.add_argument("--teacher", help="BootstrapFewShot's teacher LM (default: the task model teaches itself)")
    parser.add_argument("--reflection-lm",
                        help="GEPA's reflection and MIPROv2's prompt model (required by gepa and mipro)")
    parser.add_argument("--gepa-calls", type=int, default=24, help="GEPA: metric-call budget")
    parser.add_argument("--gepa-val", type=int, default=6, help="GEPA: training cases it validates proposals on")
    parser.add_argument("--mipro-trials", type=int, default=6, help="MIPROv2: trials")
    parser.add_argument("--train-scores", action="store_true", help="also score every program on the training split")
    parser.add_argument("--guard", default="seed",
                        help=f"before saving a candidate, ask whole diagnoses of it and of the uncompiled program: "
                             f"comma-separated sets from {', '.join(FIXTURE_SETS)}, or none (default: seed); it is "
                             f"saved only when it loses no question the uncompiled program got right, gives no "
                             f"wrong PASS and no diagnosis raised, and when it asked every set the program it "
                             f"replaces for this LM was asked")
    parser.add_argument("--out", default="results", help="folder for results/<run>/")
    parser.add_argument("--compiled-dir", help="where to save the chosen program (default: compiled/)")
    kept = parser.add_mutually_exclusive_group()
    kept.add_argument("--reply-cache", type=Path, default=REPLY_CACHE,
                      help="the folder of the model replies kept across runs, which answer the same greedy requests "
                           "again (default: .reply_cache/ in the project)")
    kept.add_argument("--no-reply-cache", dest="reply_cache", action="store_const", const=None,
                      help="keep no reply and serve none: every request this run has not made before goes to the model")
    again = parser.add_mutually_exclusive_group()
    again.add_argument("--replay", help="a run folder to re-score from its transcript, without the model")
    again.add_argument("--rescore", help="a run folder whose recorded replies to score under this code's metric, on "
                                         "the evidence as that run recorded it, without the model; written to "
                                         "<--out>/rescored-<run>/")
    args = parser.parse_args(argv)
    args.source = Path(args.replay or args.rescore) if (args.replay or args.rescore) else None
    recorded = None
    if args.source:
        try:
            recorded = read_run(args.source)
        except ReplayError as exc:
            parser.error(str(exc))
        for key in RECORDED_ARGS:
            setattr(args, key, recorded["meta"]["args"].get(key))
        for key, before in LATER_ARGS.items():
            setattr(args, key, recorded["meta"]["args"].get(key, before))
    args.names = [n.strip() for n in (args.optimizers or "").split(",") if n.strip()]
    unknown = [n for n in args.names if n not in OPTIMIZERS]
    if unknown:
        parser.error(f"unknown optimizer(s) {', '.join(unknown)}; choose from {', '.join(OPTIMIZERS)}")
    if (reflecting := [n for n in args.names if n in REFLECTING]) and not args.reflection_lm:
        parser.error(f"{', '.join(reflecting)} needs --reflection-lm, the model that writes its instructions "
                     f"(e.g. a hosted LM); the task model is not used in its place")
    if args.rescore and (moved := [n for n in args.names if n not in RESCORABLE]):
        parser.error(f"--rescore {args.rescore}: {', '.join(moved)} compile by the metric or the model, so under "
                     f"another metric they would compile other programs than the replies were written for; "
                     f"only {', '.join(RESCORABLE)} can be re-scored")
    named = [n.strip() for n in args.guard.split(",") if n.strip()]
    args.guard_sets = [] if named == ["none"] else list(dict.fromkeys(named))
    if not named or (odd := [n for n in args.guard_sets if n not in FIXTURE_SETS]):
        parser.error(f"--guard {args.guard!r}: {'no set named' if not named else 'unknown ' + ', '.join(odd)}; "
                     f"name sets from {', '.join(FIXTURE_SETS)}, or none")
    if args.replay and recorded["meta"].get("guard") and not (args.source / GUARD_TRANSCRIPT).is_file():
        parser.error(f"--replay {args.source}: its save guard asked whole diagnoses, and it has no "
                     f"{GUARD_TRANSCRIPT} to replay them from")
    if min(args.k, args.gepa_calls, args.gepa_val, args.mipro_trials) < 1:
        parser.error("--k, --gepa-calls, --gepa-val and --mipro-trials must be at least 1")
    if not 0 < args.threshold <= 1:
        parser.error("--threshold must be in (0, 1]")
    if args.compiled_dir:
        os.environ["DIAGNOSIS_COMPILED_DIR"] = args.compiled_dir
    return args, recorded


def reference_rows(examples: list[dspy.Example], evidence: dict[str, Recorded], screened: bool) -> list[Row]:
    """The rows no model makes: the lookup rule, the rule that also reads the refs' fields as the
    program's screen does (`screened`: on evidence recorded with the screen, as it runs today; a run
    recorded before it has none), and the gold outputs (what a perfect executor scores)."""
    rule = Row("rule", "reference", "the lookup rule (devset/rule.py): cite what names the target, no model")
    structured = Row("structured rule", "reference", (
        "the lookup rule on what the program's screen leaves (the ref's service, the exclusions, the alert or "
        "endpoint asked), citing the firing alert of a pair: the fair reference (devset/rule.py), no model"))
    gold = Row("gold", "reference", "the devset's gold outputs: the metric's ceiling")
    for example in examples:
        recorded = evidence[example.case_id]
        outputs = [(rule, output_of(LookupRule()(**example.inputs()))), (gold, recorded.gold_output())]
        if screened:
            outputs.insert(1, (structured, output_of(LookupRule(structured=True)(**example.inputs()))))
        for row, output in outputs:
            scored = score_output(recorded, *output)
            row.runs.append(CaseRun.of(row.label, recorded, scored, "; ".join(scored.feedback) or "all checks passed"))
    return [rule, structured, gold] if screened else [rule, gold]


def best_per_case(programs: list[Row]) -> Row:
    """The best program (uncompiled or compiled) on each case: how far choosing demos case by case could reach."""
    best = Row("best per case", "reference", "the best program, uncompiled or compiled, on each case (no single program does this)")
    for run in programs[0].runs:
        runs = [r for c in programs for r in c.runs if r.case_id == run.case_id and r.split == run.split]
        best.runs.append(replace(max(runs, key=lambda r: r.score), label=best.label))
    return best


def run_candidates(args, lm, train, held, evidence, calls, served, attempts: int) -> tuple[Row, list[Row], dict]:
    evaluated = (train + held) if args.train_scores else held
    planned = len(evaluated) * (1 + len(args.names))
    progress = Progress(planned)
    say("the uncompiled citation module (its shipped instruction and demos)")
    baseline = Row("uncompiled", "uncompiled", "the shipped instruction and demos")
    baseline.runs = evaluate(Cite(), "uncompiled", evaluated, evidence, calls, progress, served, attempts)
    settings = Settings(k=args.k, threshold=args.threshold, gepa_calls=args.gepa_calls, gepa_val=args.gepa_val,
                        mipro_trials=args.mipro_trials, lm=lm, teacher=args.teacher_lm, reflection=args.reflection)
    rows, programs = [], {}
    for name in args.names:
        say(f"compiling {name} on the training split")
        started = time.perf_counter()
        try:
            program, note = compile_candidate(name, train, evidence, settings)
        except Exception as exc:  # a failing optimizer is reported, and the others still run
            program, note = None, f"failed: {type(exc).__name__}: {exc}"
        row = Row(name, "candidate", note, round(time.perf_counter() - started, 1))
        say(f"{name}: {note} ({row.compile_seconds} s)")
        if program is None:
            progress.planned -= len(evaluated)
        else:
            programs[name] = program
            row.runs = evaluate(program, name, evaluated, evidence, calls, progress, served, attempts)
        rows.append(row)
    return baseline, rows, programs


def choose(rows: list[Row], gains: dict) -> tuple[Row | None, str]:
    ranked = sorted((r for r in rows if r.runs),
                    key=lambda r: (r.mean("held-out") or 0, r.mean("train") or 0), reverse=True)
    if not ranked:
        return None, "no candidate compiled"
    best = ranked[0]
    gain = gains[best.label]
    pct = int(INTERVAL * 100)
    if gain["low"] > 0:
        return best, f"its held-out gain {gain['gain']:+.3f} has a {pct}% interval above zero"
    if gain["high"] < 0:
        return best, (f"its held-out gain {gain['gain']:+.3f} has a {pct}% interval below zero "
                      f"[{gain['low']:+.3f}, {gain['high']:+.3f}]: it is worse than the uncompiled program")
    return best, f"its held-out gain {gain['gain']:+.3f} is within the noise [{gain['low']:+.3f}, {gain['high']:+.3f}]"


def payload_of(meta: dict, rows: list[Row], gains: dict) -> dict:
    names = list(WEIGHTS)
    scored = [r for row in rows if row.kind != "reference" for r in row.runs if r.parts]
    return {
        "meta": meta,
        "rows": [{"label": r.label, "kind": r.kind, "note": r.note, "compile_seconds": r.compile_seconds,
                  "train": r.mean("train"), "held_out": r.mean("held-out"),
                  "held_out_first_attempt": r.first_mean("held-out"),
                  "train_normalised": r.mean("train", normalised=True),
                  "held_out_normalised": r.mean("held-out", normalised=True), "gain": gains.get(r.label)} for r in rows],
        "parts": {"names": names, "weights": WEIGHTS,
                  "means": {row.label: {p: round(sum(r.parts.get(p, 0.0) for r in held) / len(held), 3) for p in names}
                            for row in rows if (held := [r for r in row.runs if r.split == "held-out"])}},
        "correlation": part_correlation([r.parts for r in scored], names) if scored else None,
        "runs": [asdict(r) for row in rows for r in row.runs],
        "analysis": analysis(rows),
    }


def analysis(rows: list[Row]) -> list[dict]:
    """Per held-out case: what the uncompiled program and each candidate did, in a line."""
    by_label = {r.label: r for r in rows}
    base = by_label.get("uncompiled")
    if base is None:
        return []
    out = []
    for run in (r for r in base.runs if r.split == "held-out"):
        others = [(row.label, next((r for r in row.runs if r.case_id == run.case_id), None)) for row in rows
                  if row.kind == "candidate"]
        changed = ", ".join(f"{label} {r.score - run.score:+.2f}" for label, r in others if r and r.score != run.score)
        why = f"uncompiled {run.score:.2f}: {run.feedback}" + (f"; candidates: {changed}" if changed else "; no candidate changed it")
        out.append({"case_id": run.case_id, "kind": run.kind, "why": why})
    return out


def main(argv: list[str] | None = None) -> int:
    args, recorded = parse_args(argv)
    started = time.perf_counter()
    # Read before the run, which may last an hour: what it ran is the tree as it started.
    here = checkout(Path(__file__).parent)
    source_id = recorded["meta"]["run_id"] if recorded else None
    run_id = f"rescored-{source_id}" if args.rescore else source_id or datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.source / "replay" if args.replay else Path(args.out) / run_id
    out.mkdir(parents=True, exist_ok=True)
    source = args.source or out
    # A replay and a rescore record the evidence as their run did: its replies cite those refs.
    recording = recording_of(recorded["meta"]) if recorded else Recording()
    base_lm = resolve_lm(args.lm)
    if not recorded and (narrower := narrower_than_saved(args.guard_sets, base_lm)):
        say(f"its guard asks fewer question sets than the program a save would replace: {narrower}")

    def with_transcript(base, name="transcript.jsonl"):
        return recording_lm(base, out / name, cache=args.reply_cache)

    # A replay asks whole diagnoses only when the run it replays did (and then they must come back);
    # a rescore scores recorded citation replies, and asks none.
    guarded = bool(args.guard_sets) and not args.rescore and (not recorded or bool(recorded["meta"].get("guard")))
    try:
        lm = (replaying_lm(base_lm, source / "transcript.jsonl", by_inputs=REPLY_INPUTS if args.rescore else ())
              if recorded else with_transcript(base_lm))
        # The whole diagnoses keep a transcript of their own, so that a rescore of the devset's citation
        # replies never meets theirs.
        asking = (None if not guarded else replaying_lm(base_lm, source / GUARD_TRANSCRIPT) if recorded
                  else with_transcript(base_lm, GUARD_TRANSCRIPT))
    except ValueError as exc:  # a transcript line that is no entry
        print(f"python optimize.py: error: {'--rescore' if args.rescore else '--replay'} {source}: {exc}", file=sys.stderr)
        return 2
    # The teacher and the reflection model answer from the same transcript, so a replay needs none of them.
    args.teacher_lm = (lm if args.teacher and recorded else with_transcript(resolve_lm(args.teacher))
                       if args.teacher else None)
    args.reflection = (lm if args.reflection_lm and recorded else with_transcript(resolve_lm(args.reflection_lm))
                       if args.reflection_lm else None)
    calls = Calls()
    engines = list({id(m.engine): m.engine for m in (lm, asking, args.teacher_lm, args.reflection) if m}.values())

    def caches() -> list:
        return [e.cache for e in engines if getattr(e, "cache", None)]  # a replay's engine keeps none

    def served() -> tuple[int, int]:
        """The replies the run's engines gave without the model so far: repeats, and replies kept by earlier runs."""
        return sum(e.repeats for e in engines), sum(e.cached for e in engines)

    with devset_world():
        say("loading the devset and recording the gold tool calls through the recorder, in the devset's world")
        cases = load_devset()
        evidence = record(cases, TOOLBOX, recording)
        examples = {cid: rec.example() for cid, rec in evidence.items()}
        train = [e for cid, e in examples.items() if evidence[cid].case["split"] == "train"]
        held = [e for cid, e in examples.items() if evidence[cid].case["split"] == "held-out"]
        say(f"{len(train)} training and {len(held)} held-out cases; LM {lm_spec(args.lm)}"
            + (f", its replies re-scored from {source}" if args.rescore else f", replayed from {source}" if args.replay else ""))
        # A run recorded before each case was scored as a diagnosis runs it made one attempt per case.
        attempts = recorded["meta"].get("attempts", 1) if recorded else EXECUTOR_ATTEMPTS
        with dspy.context(lm=lm, adapter=adapter_for(lm), callbacks=[*dspy.settings.callbacks, calls]):
            baseline, candidates, programs = run_candidates(args, lm, train, held, evidence, calls, served, attempts)
        references = reference_rows(train + held, evidence, recording.screened_refs)
    rows = [baseline, *candidates, *references, best_per_case([baseline, *(c for c in candidates if c.runs)])]
    before = baseline.scores("held-out")
    gains = {r.label: paired_gain(before, r.scores("held-out")) for r in rows if r is not baseline and r.runs}
    chosen, why = choose(candidates, gains)
    meta = {"run_id": run_id, "lm": lm_spec(args.lm), "lm_identity": lm_identity(base_lm), "k": args.k,
            "cores": os.cpu_count(), "train_cases": len(train), "held_out_cases": len(held),
            "chosen": chosen.label if chosen else None, "why": why, "saved": None,
            "reply_cache": None if recorded or args.reply_cache is None else str(args.reply_cache),
            "interval": INTERVAL,
            "resamples": RESAMPLES, "args": {k: getattr(args, k) for k in (*RECORDED_ARGS, *LATER_ARGS)},
            "recording": asdict(recording), "attempts": attempts,
            "checkout": recorded["meta"].get("checkout") if args.replay else here}
    if args.rescore:
        meta["rescored_from"] = str(args.source)
    meta["guard"] = None
    if chosen is not None and gains[chosen.label]["low"] > 0:
        if asking is not None:
            say(f"{chosen.label} qualifies on the devset; asking whole diagnoses of it and of the uncompiled program "
                f"({', '.join(args.guard_sets)}) before saving it")
            with dspy.context(callbacks=[*dspy.settings.callbacks, calls]):
                checked = guard(programs[chosen.label], args.guard_sets, asking)
            meta["guard"] = checked.as_dict()
            meta["why"] = why = f"{why}; {checked.summary()}"
        if recorded:
            meta["saved"] = recorded["meta"].get("saved")
        elif meta["guard"] is None or meta["guard"]["holds"]:
            if refused := narrower_than_saved(args.guard_sets, base_lm):
                meta["why"] = why = f"{why}; {refused}"
            else:
                meta["saved"] = str(save_program(programs[chosen.label], run_id, base_lm, args.guard_sets))
    repeats, cached = served()
    # A request a replay's transcript does not hold reached no model: it failed its attempt.
    unrecorded = sum(getattr(e, "missing", 0) for e in engines)
    # What the engines counted: DSPy asks a call again after a transient failure, so one call of a
    # program can be several of the model's, and a call the engine raised on gave no reply.
    failed = sum(getattr(e, "failed", 0) for e in engines)
    meta.update(model_calls=sum(e.calls for e in engines), failed_calls=failed,
                repeats_served=repeats, cached_served=cached, cache_ignored=sum(c.ignored for c in caches()),
                unrecorded=unrecorded)
    meta["wall_seconds"] = recorded["meta"]["wall_seconds"] if recorded else round(time.perf_counter() - started, 1)
    if recorded:
        # A replay takes no time worth reporting: each case keeps the seconds the recorded run measured.
        measured = {(r["label"], r["case_id"]): r["seconds"] for r in recorded["runs"]}
        for row in rows:
            for run in row.runs:
                run.seconds = measured.get((run.label, run.case_id), run.seconds)
        asked = {(r["program"], r["id"]): r.get("seconds") for r in (recorded["meta"].get("guard") or {}).get("rows", [])}
        for row in (meta["guard"] or {}).get("rows", []):
            row["seconds"] = asked.get((row["program"], row["id"]), row.get("seconds"))
    payload = payload_of(meta, rows, gains)
    (out / "results.json").write_text(json.dumps(payload, ensure_ascii=False, indent=2), encoding="utf-8")
    write_report(out, payload)
    problem = screenshot(out / "report.html", out / "report.png")
    kept_in = f" ({meta['reply_cache']})" if meta["reply_cache"] else ""
    for row in rows:
        print(f"{row.label:>14}: train {row.mean('train')}  held-out {row.mean('held-out')} "
              f"(normalised {row.mean('held-out', normalised=True)})  {gains.get(row.label) or ''}")
    say(f"report: {out / 'report.html'}{'' if problem is None else f' (no screenshot: {problem})'}; "
        f"saved: {meta['saved'] or 'nothing'} ({why}); {meta['model_calls']} model calls, "
        f"{meta['failed_calls']} calls that failed (their errors are in the transcripts), "
        f"{meta['repeats_served']} repeats served from the transcript, {meta['cached_served']} replies served from "
        f"the reply cache{kept_in}, {meta['cache_ignored']} kept replies ignored")
    for cache_problem in (p for c in caches() for p in c.problems):
        say(f"reply cache: {cache_problem}")
    if args.rescore:
        print("\n".join(rescored(recorded, payload)))
        if lm.engine.missing or lm.engine.unused:
            print(f"python optimize.py: error: --rescore {source}: {lm.engine.missing} requests had no recorded reply "
                  f"for their question and observations, and {lm.engine.unused} recorded replies were never asked for",
                  file=sys.stderr)
            return 1
        return 0
    if recorded:
        changed = differences(recorded, payload)
        # A request the run never made fails only its attempt, which a diagnosis survives: the scores
        # may hold although that attempt was not replayed, so it is said beside them.
        missing = meta["unrecorded"]
        print(f"replay reproduces every recorded score, verdict and rule: {not changed}")
        if (elsewhere := other_checkout(recorded, here)) is not None:
            print(f"  {elsewhere}")
        for line in changed[:20]:
            print(f"  {line}")
        print(f"every request was recorded: {not missing}" + (f" ({missing} had no recorded reply)" if missing else ""))
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A cold `ask` against a warm diagnosis, on the same narrow questions, in one run.

    .venv/bin/python benchmarks/cold_start.py          # the embedded default; it takes the model lock itself
    .venv/bin/python benchmarks/cold_start.py --lm embedded-small
    .venv/bin/python benchmarks/cold_start.py --hold-lock   # the lock for the whole run, taken once

This process loads the model and answers a warm-up question first. Then, for each question in
turn (so that a change in the machine's load falls on all three alike), after waiting (without
the model lock, up to --wait seconds) for the CPUs to be at most --busy busy, and then under the
model lock (/tmp/gd-model.lock, as `flock` takes it; not held between questions):
  1. cold, nothing saved: `python -m program ask --json` in a new process, with an empty prefix
     cache and no remembered probe, as every process ran before both were kept;
  2. cold: the same command in a new process, with the prefix states and the probe this machine
     has saved (this run's own directories, filled by the warm-up and the runs before);
  3. warm: `diagnose()` of the same question in this process.
A cold time is the wall clock from starting the process to its exit: interpreter, imports, model
check and load, probe, diagnosis and output. DSPy's response cache is off everywhere (each new
process gets an empty cache directory), the model file is already assembled. The ratios are of
medians over the questions, all measured in this one run; the CPUs' busy share before each
question and the load average at each run are in the results.

Writes results/cold-<UTC>/: results.json, report.md, transcript.jsonl (every LM call of the warm
diagnoses), and cold/ with each new process's JSON result and its stage lines.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path

import dspy

from devset.questions import questions
from machine import cpu_busy, model_lock, wait_quiet
from program.entry.api import diagnose
from program.lm.engine import EMBEDDED, resolve_lm
from program.lm.transcript import recording_lm
from program.store.audit import AuditStore

ROOT = Path(__file__).resolve().parents[1]
WARM_UP = "high_memory_positive"
# Narrow questions of every kind: alert present and absent, logs present, excluded topics, both languages.
QUESTIONS = ("cpu_absent_en", "oom_alert_en", "slow_query_excluding_pool", "full_gc_logs_en", "gateway_503_logs",
             "user_cpu_absent")
STAGE_LINE = re.compile(r"^(.+): ([\d.]+) s$")


def cold_ask(question: str, lm: str, out: Path, name: str, prefixes: Path, probes: Path) -> dict:
    """One `python -m program ask --json` in a new process, timed from start to exit."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "DIAGNOSIS_LM": lm, "DIAGNOSIS_PREFIX_CACHE": str(prefixes),
               "DIAGNOSIS_PROBE_CACHE": str(probes), "DSPY_CACHEDIR": str(Path(tmp) / "dspy")}
        command = [sys.executable, "-m", "program", "--db", f"sqlite:///{tmp}/audit.db", "ask", question, "--json"]
        load = os.getloadavg()[0]
        cpu = _cpu(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        seconds = time.perf_counter() - started
        cpu = _cpu(resource.RUSAGE_CHILDREN) - cpu
    (out / f"{name}.json").write_text(done.stdout, encoding="utf-8")
    (out / f"{name}.stderr").write_text(done.stderr, encoding="utf-8")
    if done.returncode != 0:
        sys.exit(f"{name}: `ask` exited {done.returncode}: {done.stderr[-2000:]}")
    result = json.loads(done.stdout)
    stages = {m.group(1): float(m.group(2)) for line in done.stderr.splitlines() if (m := STAGE_LINE.match(line))}
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2), "load": round(load, 2),
            "verdict": result["verdict"], "answer": result["answer"], "stages": stages,
            "cached_prompt_tokens": sum(u.get("cached_prompt_tokens", 0) for u in result["usage"].values()),
            "prompt_tokens": sum(u["prompt_tokens"] for u in result["usage"].values())}


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def warm_run(question: str, lm) -> dict:
    """One diagnosis in this process, on a new audit store as a new `ask` has, so that its invocations
    are numbered as the cold run's are and both send the same prompts."""
    load = os.getloadavg()[0]
    cpu = _cpu(resource.RUSAGE_SELF)
    started = time.perf_counter()
    result = diagnose(question, lm=lm, db=AuditStore("sqlite://"))
    seconds = time.perf_counter() - started
    cpu = _cpu(resource.RUSAGE_SELF) - cpu
    usage = result.usage.values()
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2), "load": round(load, 2),
            "verdict": result.verdict, "answer": result.answer,
            "stages": {key: u.seconds for key, u in result.usage.items()},
            "cached_prompt_tokens": sum(u.cached_prompt_tokens for u in usage),
            "prompt_tokens": sum(u.prompt_tokens for u in usage)}


def prefix_table(engine) -> list[dict]:
    """Each stage prompt's static prefix as the engine last used it: tokens, state size, how it came."""
    from claim_language import stage_of

    seen = {}
    for system, use in engine.prefix_log:
        stage = stage_of(system)
        seen.setdefault((stage, use.prefix_tokens), {"stage": stage, "prefix_tokens": use.prefix_tokens,
                                                     "state_bytes": use.state_bytes, "sources": []})
        seen[(stage, use.prefix_tokens)]["sources"].append({"source": use.source, "seconds": use.seconds})
    return list(seen.values())


def report(meta: dict, rows: list[dict], totals: dict, prefixes: list[dict]) -> str:
    lines = [f"# Cold and warm `ask`, {meta['run']}", "", f"LM `{meta['lm']}`; {meta['machine']}. Started "
             f"{meta['started']}.", "",
             "| question | cold, nothing saved (s) | cold (s) | warm (s) | cold / warm | CPU s: nothing saved, cold, "
             "warm | load | verdicts |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        same = "same" if r["none"]["verdict"] == r["cached"]["verdict"] == r["warm"]["verdict"] else "DIFFER"
        lines.append(f"| {r['id']} | {r['none']['seconds']} | {r['cached']['seconds']} | {r['warm']['seconds']} | "
                     f"{r['cached']['seconds'] / r['warm']['seconds']:.2f} | {r['none']['cpu_seconds']}, "
                     f"{r['cached']['cpu_seconds']}, {r['warm']['cpu_seconds']} | {r['none']['load']}/"
                     f"{r['cached']['load']}/{r['warm']['load']} | {same} ({r['warm']['verdict']}) |")
    lines += ["", f"Medians: cold with nothing saved {totals['none']} s, cold {totals['cached']} s, warm "
              f"{totals['warm']} s. Cold / warm: **{totals['cold_over_warm']}** (nothing saved: "
              f"{totals['none_over_warm']}). CPU seconds (medians): {totals['cpu']['none']}, "
              f"{totals['cpu']['cached']} and {totals['cpu']['warm']}; cold / warm {totals['cpu_cold_over_warm']}. Same verdict in all three runs: "
              f"{totals['same_verdicts']} of {len(rows)}; the same answer cold and warm: {totals['same_answers']} of "
              f"{len(rows)}.", "",
              "Stage prefixes (static prompt prefix of each stage, the state saved for it):", "",
              "| stage | prefix tokens | state (MB) | bytes per token | loaded from disk (s) | read and saved (s) |",
              "| --- | --- | --- | --- | --- | --- |"]
    for p in prefixes:
        disk = [s["seconds"] for s in p["sources"] if s["source"] == "disk"]
        read = [s["seconds"] for s in p["sources"] if s["source"] == "read"]
        per_token = p["state_bytes"] // max(p["prefix_tokens"], 1)
        lines.append(f"| {p['stage']} | {p['prefix_tokens']} | {p['state_bytes'] / 1e6:.1f} | {per_token:,} | "
                     f"{statistics.median(disk) if disk else '-'} | {statistics.median(read) if read else '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default=EMBEDDED, help="the embedded model (default: the embedded default)")
    parser.add_argument("--questions", type=int, default=len(QUESTIONS), help="how many of the narrow questions")
    parser.add_argument("--out", default="results")
    parser.add_argument("--busy", type=float, default=0.5, help="the CPU share others may be using when a question starts")
    parser.add_argument("--wait", type=float, default=900, help="seconds to wait for that, at most, per question")
    parser.add_argument("--hold-lock", action="store_true",
                        help="hold the model lock for the whole run (no waiting for quiet CPUs under it)")
    args = parser.parse_args(argv)
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    run = "cold-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) / run
    (out / "cold").mkdir(parents=True)
    by_id = {q["id"]: q for q in questions("all")}
    meta = {"run": run, "lm": args.lm, "started": datetime.now(UTC).isoformat(),
            "machine": f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start",
            "lock": "held for the whole run" if args.hold_lock else "taken per question"}
    # A lock held for the whole run is not taken again per step: a second flock in one process waits for the first.
    each = nullcontext if args.hold_lock else model_lock
    with model_lock() if args.hold_lock else nullcontext(), tempfile.TemporaryDirectory() as saved:
        prefixes, probes = Path(saved) / "prefixes", Path(saved) / "probes"
        os.environ.update({"DIAGNOSIS_PREFIX_CACHE": str(prefixes), "DIAGNOSIS_PROBE_CACHE": str(probes)})
        lm = recording_lm(resolve_lm(args.lm), out / "transcript.jsonl", serve_repeats=False)
        with each():
            warm_up = warm_run(by_id[WARM_UP]["question"], lm)
        print(f"warm-up {WARM_UP}: {warm_up['seconds']} s (model load included)", flush=True)
        rows = []
        for qid in QUESTIONS[: args.questions]:
            question = by_id[qid]["question"]
            busy = cpu_busy() if args.hold_lock else wait_quiet(args.busy, args.wait)
            with each(), tempfile.TemporaryDirectory() as empty:
                none = cold_ask(question, args.lm, out / "cold", f"{qid}-nothing-saved", Path(empty) / "prefixes",
                                Path(empty) / "probes")
                cached = cold_ask(question, args.lm, out / "cold", f"{qid}-cold", prefixes, probes)
                warm = warm_run(question, lm)
            rows.append({"id": qid, "busy_before": busy, "none": none, "cached": cached, "warm": warm})
            print(f"{qid}: cold, nothing saved {none['seconds']} s; cold {cached['seconds']} s; "
                  f"warm {warm['seconds']} s; verdicts {none['verdict']}/{cached['verdict']}/{warm['verdict']}", flush=True)
        table = prefix_table(lm.engine.inner)
    kinds = ("none", "cached", "warm")
    medians = {kind: round(statistics.median(r[kind]["seconds"] for r in rows), 2) for kind in kinds}
    cpu = {kind: round(statistics.median(r[kind]["cpu_seconds"] for r in rows), 2) for kind in kinds}
    totals = {**medians, "cold_over_warm": round(medians["cached"] / medians["warm"], 2),
              "none_over_warm": round(medians["none"] / medians["warm"], 2), "cpu": cpu,
              "cpu_cold_over_warm": round(cpu["cached"] / cpu["warm"], 2),
              "same_verdicts": sum(r["none"]["verdict"] == r["cached"]["verdict"] == r["warm"]["verdict"]
                                   for r in rows),
              "same_answers": sum(r["cached"]["answer"] == r["warm"]["answer"] for r in rows)}
    meta["finished_load"] = round(os.getloadavg()[0], 2)
    (out / "results.json").write_text(json.dumps({"meta": meta, "warm_up": warm_up, "summary": totals, "rows": rows,
                                                  "prefixes": table}, ensure_ascii=False, indent=2), encoding="utf-8")
    text = report(meta, rows, totals, table)
    (out / "report.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Before and after, from committed benchmark runs: speed, written tokens and quality per question.

    .venv/bin/python benchmarks/compare_runs.py --before results/bench-A results/bench-B \\
        --after results/bench-C

Every figure is recomputed from the runs' own files: verdicts and seconds from results.json, and
each LM call's written tokens and seconds from transcript.jsonl (a diagnosis's calls start with
its planner call; the stage of a call is its signature's first output field). The first question
of each run also loads the model, so medians are given without it ("warm"), as well as over all.
A question is narrow when the scope reader says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from claim_language import stage_of
from devset.questions import every_question

from program.evidence.scope import read_scope
from tools.catalog import active_catalog



def diagnoses(run: Path) -> list[list[dict]]:
    """The run's LM calls, one list per diagnosis, in the order the questions were asked."""
    groups: list[list[dict]] = []
    for line in (run / "transcript.jsonl").read_text(encoding="utf-8").splitlines():
        call = json.loads(line)
        stage = stage_of(call["system"])
        if stage == "planner" or not groups:
            groups.append([])
        groups[-1].append({"stage": stage, "written": int(call["completion_tokens"] or 0),
                           "read": int(call["prompt_tokens"] or 0), "seconds": float(call["seconds"] or 0)})
    return groups


def rows_of(runs: list[Path], questions: dict[str, str]) -> list[dict]:
    rows = []
    catalog = active_catalog()
    for run in runs:
        recorded = json.loads((run / "results.json").read_text(encoding="utf-8"))["rows"]
        calls = diagnoses(run)
        if len(calls) != len(recorded):
            sys.exit(f"{run}: {len(calls)} diagnoses in the transcript, {len(recorded)} rows in results.json")
        for n, (row, made) in enumerate(zip(recorded, calls, strict=True)):
            executor = [c for c in made if c["stage"] == "executor"]
            rows.append({"id": row["id"], "run": run.name, "warm": n > 0, "right": row["right"],
                         "unsafe": row["unsafe_pass"], "verdict": row["verdict"], "seconds": row["seconds"],
                         "narrow": read_scope(questions[row["id"]], catalog).narrow,
                         "executor_written": sum(c["written"] for c in executor),
                         "executor_seconds": round(sum(c["seconds"] for c in executor), 1),
                         "written": sum(c["written"] for c in made), "calls": len(made)})
    return rows


def median(values) -> float | None:
    values = list(values)
    return round(statistics.median(values), 1) if values else None


def summary(rows: list[dict]) -> dict:
    narrow = [r for r in rows if r["narrow"]]
    warm = [r for r in narrow if r["warm"]]
    return {"questions": len(rows), "right": sum(r["right"] for r in rows), "unsafe": sum(r["unsafe"] for r in rows),
            "narrow": len(narrow), "narrow_seconds": median(r["seconds"] for r in narrow),
            "narrow_warm_seconds": median(r["seconds"] for r in warm), "warm_questions": len(warm),
            "executor_written": median(r["executor_written"] for r in narrow),
            "executor_seconds": median(r["executor_seconds"] for r in warm),
            "written": median(r["written"] for r in narrow)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", nargs="+", type=Path, required=True, help="run folders of the baseline")
    parser.add_argument("--after", nargs="+", type=Path, required=True, help="run folders of the change")
    args = parser.parse_args(argv)
    for run in [*args.before, *args.after]:
        if not (run / "results.json").is_file() or not (run / "transcript.jsonl").is_file():
            parser.error(f"{run} is not a benchmark run folder (results.json and transcript.jsonl)")
    asked = {q["id"]: q["question"] for q in every_question()}
    before, after = rows_of(args.before, asked), rows_of(args.after, asked)
    b, a = summary(before), summary(after)
    print("| | before | after |\n| --- | --- | --- |")
    for key, label in (("questions", "questions"), ("right", "right"), ("unsafe", "unsafe PASS"),
                       ("narrow", "narrow questions"), ("narrow_seconds", "median narrow diagnosis, s (all)"),
                       ("narrow_warm_seconds", "median narrow diagnosis, s (model loaded)"),
                       ("executor_written", "median executor written tokens (narrow)"),
                       ("executor_seconds", "median executor seconds (narrow, model loaded)"),
                       ("written", "median written tokens per diagnosis (narrow)")):
        print(f"| {label} | {b[key]} | {a[key]} |")
    if b["narrow_warm_seconds"] and a["narrow_warm_seconds"]:
        print(f"\nSpeed-up of the median narrow diagnosis (model loaded): "
              f"{b['narrow_warm_seconds'] / a['narrow_warm_seconds']:.2f}x")
    by_id = {r["id"]: r for r in after}
    print("\n| question | narrow | before | after | s before | s after | executor tokens before | after |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in before:
        other = by_id.get(r["id"])
        if other is None:
            continue
        print(f"| {r['id']} | {'yes' if r['narrow'] else 'no'} | {r['verdict']}{'' if r['right'] else ' (wrong)'} | "
              f"{other['verdict']}{'' if other['right'] else ' (wrong)'} | {r['seconds']} | {other['seconds']} | "
              f"{r['executor_written']} | {other['executor_written']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

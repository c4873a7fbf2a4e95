"""A program change measured as one: the uncompiled citation step of two `python optimize.py` runs on
the same LM and the same recorded devset, before and after the change, without the model.

    .venv/bin/python benchmarks/program_row.py --before results/<run> --after results/<run>

Reads each run's results.json. Both runs must have gathered their evidence the same way and run the
same LM (their meta says so), or the rows measure different things: such a pair is refused (exit 2).
Whether code set refs aside before the executor was asked (`screened_refs`) is part of the program,
so it may differ, and the output says whether it did. Prints and writes into the after run's folder
(program_row.json, program_row.md) the held-out mean of each uncompiled program, raw and normalised,
the paired gain of after over before with its 90% bootstrap interval, the lookup rules' rows from
the after run, and the mean per kind, so that what moved can be read case by case.

A run scored since each case runs as a diagnosis does has two figures per case: its first attempt,
and the attempt used after code refused one a new attempt could fix. The before row is each case's
first attempt (a run from before that made only one); the after program has a row for each, so the
first-attempt row is the change to the citation step alone, and the other what a diagnosis gets.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from optimization.statistics import INTERVAL, paired_gain  # noqa: E402

# What a run's recording says that is part of the program measured, not of how its evidence was gathered.
PROGRAM_PART = "screened_refs"
RULES = ("rule", "structured rule")


class Mismatch(ValueError):
    """The two runs do not measure the same thing."""


def runs_of(results: dict, label: str, split: str = "held-out") -> dict[str, dict]:
    return {r["case_id"]: r for r in results["runs"] if r["label"] == label and r["split"] == split}


def _gathered(meta: dict) -> dict:
    return {k: v for k, v in (meta.get("recording") or {}).items() if k != PROGRAM_PART}


def _first(run: dict) -> dict:
    """The case's first attempt, as a run of its own."""
    first = run.get("first_score")
    if first is None or first == run["score"]:
        return run
    floor, ceiling = run["floor"], run["ceiling"]
    return {**run, "score": first, "normalised": round((first - floor) / (ceiling - floor), 4), "verdict": None}


def _answered(run: dict) -> bool:
    """The expected verdict, reached in scope and for the right answer (the metric's `verdict` part):
    a PASS of "exhausted" on a healthy pool is the verdict expected, for a wrong answer. A run that
    kept no parts is read by its verdict alone."""
    return run["verdict"] == run["expected_verdict"] and run.get("parts", {}).get("verdict", 1.0) == 1.0


def compare(before: dict, after: dict) -> dict:
    if _gathered(before["meta"]) != _gathered(after["meta"]):
        raise Mismatch(f"the runs differ in recording: {before['meta'].get('recording')} and "
                       f"{after['meta'].get('recording')}")
    if before["meta"].get("lm_identity") != after["meta"].get("lm_identity"):
        raise Mismatch(f"the runs differ in lm_identity: {before['meta'].get('lm_identity')} and "
                       f"{after['meta'].get('lm_identity')}")
    old = {c: _first(r) for c, r in runs_of(before, "uncompiled").items()}
    new = runs_of(after, "uncompiled")
    new_first = {c: _first(r) for c, r in new.items()}
    if not old or set(old) != set(new):
        raise Mismatch("the runs did not score the same held-out cases with their uncompiled program")

    def row(runs: dict[str, dict]) -> dict:
        kinds = defaultdict(list)
        for run in runs.values():
            kinds[run["kind"]].append(run["score"])
        return {"mean": round(sum(r["score"] for r in runs.values()) / len(runs), 3),
                "normalised": round(sum(r["normalised"] for r in runs.values()) / len(runs), 3),
                "kinds": {k: round(sum(v) / len(v), 3) for k, v in sorted(kinds.items())},
                "answers_right": (sum(_answered(r) for r in runs.values())
                                  if all(r["verdict"] for r in runs.values()) else None)}

    def scores(runs: dict[str, dict]) -> dict[str, float]:
        return {c: r["score"] for c, r in runs.items()}

    retried = any(r.get("attempts", 1) > 1 for r in new.values())
    rows = {"before": row(old), **({"after, first attempt": row(new_first)} if retried else {}), "after": row(new)}
    rules = {label: runs for label in RULES if (runs := runs_of(after, label))}
    rows.update({label: row(runs) for label, runs in rules.items()})
    screened = {run: bool((meta.get("recording") or {}).get(PROGRAM_PART)) for run, meta in
                (("before", before["meta"]), ("after", after["meta"]))}
    return {"before": before["meta"]["run_id"], "after": after["meta"]["run_id"], "cases": len(new),
            "screened": screened, "rows": rows,
            "gain": paired_gain(scores(old), scores(new)),
            "first_attempt_gain": paired_gain(scores(old), scores(new_first)) if retried else None,
            "over_rules": {label: paired_gain(scores(runs), scores(new)) for label, runs in rules.items()},
            "moved": sorted(({"case_id": c, "kind": new[c]["kind"], "before": old[c]["score"], "after": new[c]["score"]}
                             for c in new if new[c]["score"] != old[c]["score"]), key=lambda m: m["after"] - m["before"])}


def markdown(found: dict) -> str:
    rows, gain = found["rows"], found["gain"]
    kinds = list(rows["after"]["kinds"])
    screened = found["screened"]
    lines = [f"# The uncompiled citation step, before ({found['before']}) and after ({found['after']})", "",
             f"{found['cases']} held-out cases, the same LM and the same recorded evidence. Code set refs aside before "
             f"the executor was asked: before {'yes' if screened['before'] else 'no'}, after "
             f"{'yes' if screened['after'] else 'no'}. The before row is each case's first attempt.", "",
             "| row | held-out | normalised | right answers | " + " | ".join(kinds) + " |",
             "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in kinds) + " |"]
    for name, row in rows.items():
        right = "-" if row["answers_right"] is None else str(row["answers_right"])
        lines.append(f"| {name} | {row['mean']:.3f} | {row['normalised']:.3f} | {right} | "
                     + " | ".join(f"{row['kinds'].get(k, 0):.2f}" for k in kinds) + " |")
    pct = int(INTERVAL * 100)

    def said(g: dict) -> str:
        return f"{g['gain']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}]"

    lines += ["", f"Gain of after over before: {said(gain)} ({pct}% paired bootstrap interval)."]
    if found["first_attempt_gain"]:
        lines.append(f"Gain of after's first attempt over before: {said(found['first_attempt_gain'])}.")
    lines += [f"After over the {label}: {said(over)}." for label, over in found["over_rules"].items()]
    lines += ["", "Cases that moved (worst first):", ""]
    lines += [f"- {m['case_id']} ({m['kind']}): {m['before']:.2f} -> {m['after']:.2f}" for m in found["moved"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, type=Path)
    parser.add_argument("--after", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        before, after = (json.loads((p / "results.json").read_text(encoding="utf-8")) for p in (args.before, args.after))
        found = compare(before, after)
    except (OSError, json.JSONDecodeError, KeyError, Mismatch) as exc:
        print(f"program_row.py: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    (args.after / "program_row.json").write_text(json.dumps(found, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    text = markdown(found)
    (args.after / "program_row.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A program change measured as one: the uncompiled citation step of two `python optimize.py` runs on
the same LM and the same recorded devset, before and after the change, without the model.

    .venv/bin/python benchmarks/program_row.py --before results/<run> --after results/<run>

Reads each run's results.json. Both runs must have recorded their evidence the same way and run the
same LM (their meta says so), or the rows measure different things: such a pair is refused (exit
2). Prints and writes into the after run's folder (program_row.json, program_row.md) the held-out
mean of each uncompiled program, raw and normalised, the paired gain of after over before with its
90% bootstrap interval, the lookup rule's row from the after run, and the mean per kind, so that
what moved can be read case by case.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from optimization.statistics import INTERVAL, paired_gain  # noqa: E402


class Mismatch(ValueError):
    """The two runs do not measure the same thing."""


def runs_of(results: dict, label: str, split: str = "held-out") -> dict[str, dict]:
    return {r["case_id"]: r for r in results["runs"] if r["label"] == label and r["split"] == split}


def compare(before: dict, after: dict) -> dict:
    for key in ("recording", "lm_identity"):
        if before["meta"].get(key) != after["meta"].get(key):
            raise Mismatch(f"the runs differ in {key}: {before['meta'].get(key)} and {after['meta'].get(key)}")
    old, new, rule = runs_of(before, "uncompiled"), runs_of(after, "uncompiled"), runs_of(after, "rule")
    if not old or set(old) != set(new):
        raise Mismatch("the runs did not score the same held-out cases with their uncompiled program")

    def row(runs: dict[str, dict]) -> dict:
        kinds = defaultdict(list)
        for run in runs.values():
            kinds[run["kind"]].append(run["score"])
        return {"mean": round(sum(r["score"] for r in runs.values()) / len(runs), 3),
                "normalised": round(sum(r["normalised"] for r in runs.values()) / len(runs), 3),
                "kinds": {k: round(sum(v) / len(v), 3) for k, v in sorted(kinds.items())},
                "verdicts_right": sum(r["verdict"] == r["expected_verdict"] for r in runs.values())}

    scores = {label: {c: r["score"] for c, r in runs.items()} for label, runs in (("old", old), ("new", new), ("rule", rule))}
    return {"before": before["meta"]["run_id"], "after": after["meta"]["run_id"], "cases": len(new),
            "rows": {"before": row(old), "after": row(new), **({"rule": row(rule)} if rule else {})},
            "gain": paired_gain(scores["old"], scores["new"]),
            "over_rule": paired_gain(scores["rule"], scores["new"]) if rule else None,
            "moved": sorted(({"case_id": c, "kind": new[c]["kind"], "before": old[c]["score"], "after": new[c]["score"]}
                             for c in new if new[c]["score"] != old[c]["score"]), key=lambda m: m["after"] - m["before"])}


def markdown(found: dict) -> str:
    rows, gain = found["rows"], found["gain"]
    kinds = list(rows["after"]["kinds"])
    lines = [f"# The uncompiled citation step, before ({found['before']}) and after ({found['after']})", "",
             f"{found['cases']} held-out cases, the same LM and the same recorded evidence.", "",
             "| row | held-out | normalised | right verdicts | " + " | ".join(kinds) + " |",
             "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in kinds) + " |"]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['mean']:.3f} | {row['normalised']:.3f} | {row['verdicts_right']} | "
                     + " | ".join(f"{row['kinds'].get(k, 0):.2f}" for k in kinds) + " |")
    pct = int(INTERVAL * 100)
    lines += ["", f"Gain of after over before: {gain['gain']:+.3f} [{gain['low']:+.3f}, {gain['high']:+.3f}] ({pct}% paired "
              "bootstrap interval)."]
    if found["over_rule"]:
        over = found["over_rule"]
        lines.append(f"After over the lookup rule: {over['gain']:+.3f} [{over['low']:+.3f}, {over['high']:+.3f}].")
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

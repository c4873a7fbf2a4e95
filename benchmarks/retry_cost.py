"""What the executor's second attempt costs the narrow diagnoses of a diagnosis benchmark run: read
from the run's transcript, without the model.

    .venv/bin/python benchmarks/retry_cost.py results/bench-<run> [results/bench-<run> ...]

The transcript holds every LM call of the run in order, each with its seconds, and results.json
each question's number of LM calls, so every call is assigned to its question (and the assignment
is checked against the question each call was asked). A retry is an executor call whose
retry_context is not "none"; a diagnosis is narrow when the plan the executor was shown says so.
Per set, the median narrow diagnosis as it ran is set beside the same diagnoses less their retry
calls: what they would have cost had the checks' refusal ended them, measured in the same run.
That baseline leaves in what a retry also changes downstream (the verifier judges the retry's
claims instead of the first attempt's), so it is the cost of the retry call itself. Writes
retry_cost.json and retry_cost.md into each run's folder and prints the table.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.claim_language import field, report_runs, stage_of  # noqa: E402
from devset.questions import every_question  # noqa: E402


def calls_by_question(run: Path) -> list[tuple[dict, list[dict]]]:
    """Each row of the run with the transcript entries of its LM calls."""
    rows = json.loads((run / "results.json").read_text(encoding="utf-8"))["rows"]
    entries = [json.loads(line) for line in (run / "transcript.jsonl").read_text(encoding="utf-8").splitlines()]
    if len(entries) != sum(r["lm_calls"] for r in rows):
        raise ValueError(f"{run}: {len(entries)} transcript entries, but the rows count "
                         f"{sum(r['lm_calls'] for r in rows)} LM calls")
    assigned, start = [], 0
    for row in rows:
        calls = entries[start:start + row["lm_calls"]]
        start += row["lm_calls"]
        assigned.append((row, calls))
    return assigned


def plan_scope(plan: str) -> str | None:
    """The scope of the plan the executor was shown (a JSON object), or None."""
    try:
        value = json.loads(plan)
    except json.JSONDecodeError:
        return None
    return value.get("scope") if isinstance(value, dict) else None


def cost(row: dict, calls: list[dict], question: str | None) -> dict | None:
    """The row's narrow-diagnosis figures, or None when it was not narrow."""
    executor = [c for c in calls if stage_of(c["system"]) == "executor"]
    asked = {field(c["messages"][-1]["text"], "question") for c in calls} - {""}
    if question is not None and asked and asked != {question}:
        raise ValueError(f"{row['id']}: its calls were asked {sorted(asked)}, not {question!r}")
    if not executor or plan_scope(field(executor[0]["messages"][-1]["text"], "plan")) != "narrow":
        return None
    retries = [c for c in executor if field(c["messages"][-1]["text"], "retry_context") not in ("", "none")]
    return {"id": row["id"], "set": row["set"], "seconds": row["seconds"],
            "retry_seconds": round(sum(c["seconds"] for c in retries), 1), "retried": bool(retries)}


def measure(run: Path) -> dict:
    asked = {q["id"]: q["question"] for q in every_question()}
    narrow = [c for row, calls in calls_by_question(run) if (c := cost(row, calls, asked.get(row["id"])))]
    sets = {}
    for name in dict.fromkeys(r["set"] for r in narrow):
        sel = [r for r in narrow if r["set"] == name]
        as_run = statistics.median(r["seconds"] for r in sel)
        without = statistics.median(r["seconds"] - r["retry_seconds"] for r in sel)
        sets[name] = {"narrow": len(sel), "retried": sum(r["retried"] for r in sel),
                      "median_seconds": round(as_run, 1), "median_seconds_without_retry": round(without, 1),
                      "growth": round(as_run / without - 1, 3) if without else None}
    return {"run": run.name, "sets": sets, "rows": narrow}


def table(result: dict) -> str:
    lines = [f"## {result['run']}", "", "| set | narrow diagnoses | retried | median s | median s less the retry calls "
             "| growth |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, t in result["sets"].items():
        growth = "-" if t["growth"] is None else f"{t['growth']:+.1%}"
        lines.append(f"| {name} | {t['narrow']} | {t['retried']} | {t['median_seconds']} | "
                     f"{t['median_seconds_without_retry']} | {growth} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return report_runs(sys.argv[1:] if argv is None else argv, __doc__.split("\n\n")[1], "retry_cost", measure, table)

if __name__ == "__main__":
    sys.exit(main())

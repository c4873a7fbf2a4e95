"""The devset's near misses through a whole diagnosis: does "the pool is exhausted", said of a
healthy pool line, reach the user as PASS?

    .venv/bin/python benchmarks/near_miss_pipeline.py [--lm embedded] [--split held-out|train|all]

The devset scores the citation step on recorded evidence, without the verifier. Here each near-miss
question (a search whose only pool line is healthy stats, `active=14/50, waiting=0`) runs as a user
would run it: planner, tools in the devset's world, executor, code checks, verifier, answer. Each
run writes results/nearmiss-<UTC>/: transcript.jsonl (every LM request and reply), results.json and
report.md. Per case: the verdict, and each claim with its status and whether its text is the
executor's own words or code's quote of the lines it pointed at (a retry that writes no text).

A wrong PASS is a PASS with a verified claim in the executor's own words that says the asked thing
is present, as the devset's metric reads a claim's answer (`devset.metric.polarity`): on a near miss
the evidence says it is absent. A PASS that verified only code's quotes shows the healthy line and
says nothing of its own; it is counted apart.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devset import devset_world, load_devset  # noqa: E402
from devset.metric import polarity  # noqa: E402
from program.entry.api import diagnose  # noqa: E402
from program.lm.engine import resolve_lm  # noqa: E402
from program.lm.transcript import recording_lm  # noqa: E402
from program.store.audit import AuditStore  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results"


def claims_of(result, record) -> list[dict]:
    """Each claim of the diagnosis, with its status, and whether the executor wrote its text."""
    used = next((a for a in record.executor_attempts if a.used), None)
    written = {d.claim_text.strip() for d in used.drafts} if used else set()
    return [{"text": c.claim.claim_text, "status": c.verification_status,
             "own_words": c.claim.claim_text.strip() in written, "says": polarity(c.claim.claim_text, c.claim.claim_type)}
            for c in result.claims]


def row(case: dict, result, store: AuditStore) -> dict:
    record = store.get_session(result.session_id)
    claims = claims_of(result, record)
    verified = [c for c in claims if c["status"] == "verified"]
    wrong = result.verdict == "PASS" and any(c["own_words"] and c["says"] not in case["expected_polarity"]
                                             for c in verified)
    return {"case_id": case["case_id"], "split": case["split"], "question": case["question"], "verdict": result.verdict,
            "wrong_pass": wrong, "quote_only_pass": result.verdict == "PASS" and not any(c["own_words"] for c in verified),
            "claims": claims, "answer": result.answer, "session_id": result.session_id,
            "executor_attempts": len(record.executor_attempts)}


def report(meta: dict, rows: list[dict]) -> str:
    lines = [f"# Near misses through the whole diagnosis, {meta['run']}", "",
             f"LM `{meta['lm']}`, {len(rows)} cases ({meta['split']}), uncompiled program, started {meta['started']}.", "",
             f"PASS: {sum(r['verdict'] == 'PASS' for r in rows)} (wrong: {sum(r['wrong_pass'] for r in rows)}; "
             f"showing only code's quotes: {sum(r['quote_only_pass'] for r in rows)}); "
             f"LOW_CONFID: {sum(r['verdict'] == 'LOW_CONFID' for r in rows)}; "
             f"REJECT: {sum(r['verdict'] == 'REJECT' for r in rows)}.", "",
             "| case | verdict | wrong PASS | executor attempts | claims (status, own words or quote) |",
             "| --- | --- | --- | ---: | --- |"]
    for r in rows:
        said = "; ".join(f"{c['text'][:90]!r} ({c['status']}, {'own words' if c['own_words'] else 'quote'})"
                         for c in r["claims"])
        lines.append(f"| {r['case_id']} | {r['verdict']} | {'yes' if r['wrong_pass'] else 'no'} | "
                     f"{r['executor_attempts']} | {said.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default="embedded", help="the LM to diagnose with (default: embedded)")
    parser.add_argument("--split", choices=("held-out", "train", "all"), default="held-out")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    run = f"nearmiss-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    out = args.out / run
    out.mkdir(parents=True)
    meta = {"run": run, "lm": args.lm, "split": args.split, "started": datetime.now(UTC).isoformat()}
    with devset_world():
        cases = [c for c in load_devset() if c["kind"] == "near_miss" and args.split in ("all", c["split"])]
    lm = recording_lm(resolve_lm(args.lm), out / "transcript.jsonl", serve_repeats=False)
    store = AuditStore("sqlite://")
    rows = []
    with devset_world():
        for case in cases:
            rows.append(row(case, diagnose(case["question"], lm=lm, db=store, compiled=False), store))
            print(f"{case['case_id']}: {rows[-1]['verdict']}{' WRONG' if rows[-1]['wrong_pass'] else ''}", flush=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, ensure_ascii=False, indent=2),
                                      encoding="utf-8")
    text = report(meta, rows)
    (out / "report.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

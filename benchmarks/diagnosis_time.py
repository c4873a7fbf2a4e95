"""Verdicts, cost and time of real diagnoses: the five LM seed cases and the question sets of devset/pipeline/.

    .venv/bin/python benchmarks/diagnosis_time.py                    # embedded default, LM cache off
    .venv/bin/python benchmarks/diagnosis_time.py --lm embedded-small --only seed
    .venv/bin/python benchmarks/diagnosis_time.py --replay results/bench-<run>   # re-score, no model
    .venv/bin/python benchmarks/diagnosis_time.py --lm-server embedded --only seed [--schema none]
        # the same questions through llama-cpp-python's OpenAI-compatible server serving that model

Each run writes results/bench-<UTC>/: transcript.jsonl (every LM request and reply), results.json
and report.md. The questions, and when an answer is right, an unsafe PASS or a wrong PASS, are
devset/questions.py's.
Seconds in a replay are the recorded ones; everything else is recomputed from the transcript.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import dspy

from devset.questions import CHOICES, SETS, ask, every_question, questions
from program.store.audit import AuditStore
from program.lm.engine import EMBEDDED, base_engine, lm_spec, narrows, resolve_lm
from program.stages.compiled import load_from
from program.stages.pipeline import Diagnosis
from program.lm.transcript import recording_lm, replaying_lm

# The label of the program that runs unless --compiled names another beside it.
UNCOMPILED = "uncompiled"


def real_logs(folder: Path, write: bool) -> Path:
    """The run's copy of the real logs: written by the real programs when recording (links made
    relative, so the folder can move), read as kept when replaying."""
    logs = folder / "logs"
    if write:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.support.real_logs import write_real_logs

        write_real_logs(logs)
        for link in [p for p in logs.rglob("*") if p.is_symlink()]:
            target = link.resolve()
            link.unlink()
            link.symlink_to(os.path.relpath(target, link.parent))
    return logs


def make_lm(spec: str, transcript: Path, replay: dict | None) -> dspy.LM:
    """The LM to record through, or (replay: the recorded run's meta) the recorded run's replay, told
    what the recorded LM's engine said (a server's narrowing and schema)."""
    base = resolve_lm(spec)
    if replay is not None:
        return replaying_lm(base, transcript, narrows=replay.get("narrows", False),
                            supports_response_schema=replay.get("supports_response_schema", True))
    try:
        # It times diagnose(), which has no repeat cache: every call goes to the model.
        return recording_lm(base, transcript, serve_repeats=False)
    except ValueError as exc:
        sys.exit(str(exc))


def summary(rows: list[dict]) -> dict:
    def part(name):
        sel = [r for r in rows if r["set"] == name]
        return {"questions": len(sel), "right": sum(r["right"] for r in sel),
                "unsafe_pass": sum(r["unsafe_pass"] for r in sel),
                "wrong_pass": sum(r.get("wrong_pass", False) for r in sel),
                "gatekeeper_pass": sum(r["gatekeeper"] == "pass/none" for r in sel)} if sel else None

    return {**{name: part(name) for name in SETS},
            "median_seconds": statistics.median(r["seconds"] for r in rows),
            "median_lm_calls": statistics.median(r["lm_calls"] for r in rows),
            "median_prompt_tokens": statistics.median(r["prompt_tokens"] for r in rows),
            "median_completion_tokens": statistics.median(r["completion_tokens"] for r in rows),
            "verifier_judgements": sum(r["verifier_judged"] for r in rows),
            "retries": sum(r.get("executor_attempts", 1) > 1 for r in rows),
            "retries_repeated": sum(r.get("retry_repeated", False) for r in rows),
            "verifier_disagreements": sum(r["overrides"].count("verdict.verifier_disagreement") for r in rows),
            "second_opinions": sum(r.get("second_opinions", 0) for r in rows)}


def set_table(totals: dict) -> list[str]:
    lines = ["| set | right | unsafe PASS | wrong PASS | gatekeeper pass |", "| --- | --- | --- | --- | --- |"]
    for name in SETS:
        if totals.get(name):
            t = totals[name]
            lines.append(f"| {name} | {t['right']} of {t['questions']} | {t['unsafe_pass']} | {t.get('wrong_pass', '-')} | "
                         f"{t['gatekeeper_pass']} of {t['questions']} |")
    return lines


def compared(meta: dict, rows: list[dict], totals: dict) -> list[str]:
    """The compiled program beside the uncompiled one: each's sets, and every question whose verdict
    or rightness differs between them."""
    name = Path(meta["compiled"]).stem
    both: dict[str, dict] = {}
    for row in rows:
        both.setdefault(row["id"], {})[row.get("program", UNCOMPILED)] = row
    moved = [f"- {qid}: uncompiled {pair[UNCOMPILED]['verdict']} ({'right' if pair[UNCOMPILED]['right'] else 'wrong'}), "
             f"compiled {pair[name]['verdict']} ({'right' if pair[name]['right'] else 'wrong'})"
             for qid, pair in both.items() if (pair[UNCOMPILED]["verdict"], pair[UNCOMPILED]["right"])
             != (pair[name]["verdict"], pair[name]["right"])]
    c = totals["compiled"]
    return ["", f"## The compiled program `{meta['compiled']}`, asked the same questions after the uncompiled one", "",
            *set_table(c), "",
            f"Median per diagnosis: {c['median_seconds']} s, {c['median_prompt_tokens']} prompt + "
            f"{c['median_completion_tokens']} completion tokens.", "",
            "Questions whose verdict or rightness differs between the two programs:" if moved
            else "No question's verdict or rightness differs between the two programs.", *moved]


def report(meta: dict, rows: list[dict], totals: dict) -> str:
    lines = [f"# Diagnosis benchmark {meta['run']}", "",
             f"LM `{meta['lm']}`, LM cache off, {meta['mode']}. Started {meta['started']}.", "",
             *(["## The uncompiled program", ""] if meta.get("compiled") else []), *set_table(totals)]
    lines += ["", f"Median per diagnosis: {totals['median_seconds']} s, {totals['median_lm_calls']} LM calls, "
              f"{totals['median_prompt_tokens']} prompt + {totals['median_completion_tokens']} completion tokens. "
              f"The verifier judged {totals['verifier_judgements']} claim(s); code disagreed with "
              f"{totals['verifier_disagreements']} of its 'contradicted' verdicts, and asked it again, without the "
              f"question, {totals.get('second_opinions', 0)} time(s). The executor was asked again in "
              f"{totals['retries']} diagnosis(es); {totals['retries_repeated']} of those retries wrote the refused "
              "claims again word for word (no revision)."]
    if meta.get("compiled"):
        lines += compared(meta, rows, totals)
    lines += ["", "| question | program | set | verdict | expected | right | gatekeeper | claims verified | forbidden "
              "| seconds | LM calls | prompt | completion |", "| --- " * 13 + "|"]
    for r in rows:
        lines.append(f"| {r['id']} | {r.get('program', UNCOMPILED)} | {r['set']} | {r['verdict']} | {r['expected']} | "
                     f"{'yes' if r['right'] else 'no'} | "
                     f"{r['gatekeeper']} | {r['verified']} of {r['claims']} | {', '.join(r['forbidden_hits']) or '-'} | "
                     f"{r['seconds']} | {r['lm_calls']} | {r['prompt_tokens']} | {r['completion_tokens']} |")
    return "\n".join(lines) + "\n"


def lm_server(stack: ExitStack, model: str, schema: str | None) -> str:
    """Start llama-cpp-python's server for `model` for this run; the LM string that reaches it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the server's launcher lives with the tests
    from tests.support.lm_server import llama_cpp_server

    os.environ["DIAGNOSIS_LM_API_BASE"] = stack.enter_context(llama_cpp_server(model))
    if schema:
        os.environ["DIAGNOSIS_LM_SCHEMA"] = schema
    return "openai/qwen"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm", default=EMBEDDED, help="model (default: the embedded default)")
    parser.add_argument("--lm-server", help="serve this embedded model with llama-cpp-python's server and use that")
    parser.add_argument("--schema", choices=("auto", "json_schema", "gbnf", "json_object", "none"),
                        help="DIAGNOSIS_LM_SCHEMA for --lm-server")
    parser.add_argument("--only", choices=CHOICES, default="all")
    parser.add_argument("--out", default="results", help="folder for the run's directory")
    parser.add_argument("--replay", help="a run directory to re-score from its transcript, without the model")
    parser.add_argument("--ids", help="comma-separated question ids: only these of the set")
    parser.add_argument("--compiled", help="a compiled program (compiled/diagnosis-<run>.json): ask every question "
                                           "of the uncompiled program and then of this one, in the same run")
    args = parser.parse_args(argv)
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    with ExitStack() as stack:
        if args.lm_server and not args.replay:
            args.lm = lm_server(stack, args.lm_server, args.schema)
        return bench(args)


def bench(args) -> int:
    """Record a run of the questions, or replay a recorded one."""
    if args.replay:
        source = Path(args.replay)
        recorded = json.loads((source / "results.json").read_text(encoding="utf-8"))
        meta = {**recorded["meta"], "mode": f"replayed from {source}"}
        out, transcript = source, source / "transcript.jsonl"
        asked = [q for q in every_question() if q["id"] in {r["id"] for r in recorded["rows"]}]
        seconds = {(r["id"], r.get("program", UNCOMPILED)): r["seconds"] for r in recorded["rows"]}
    else:
        run = "bench-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        out = Path(args.out) / run
        out.mkdir(parents=True, exist_ok=True)
        transcript = out / "transcript.jsonl"
        meta = {"run": run, "lm": lm_spec(args.lm), "mode": "recorded", "started": datetime.now(UTC).isoformat(),
                "compiled": args.compiled}
        asked, seconds = questions(args.only), {}
        if args.ids:
            wanted = set(args.ids.split(","))
            asked = [q for q in asked if q["id"] in wanted]
    lm = make_lm(meta["lm"], transcript, meta if args.replay else None)
    if not args.replay:
        engine = base_engine(lm)
        meta.update(narrows=narrows(lm), supports_response_schema=bool(getattr(engine, "supports_response_schema", False)))
        if args.lm_server:
            meta.update(lm_server=args.lm_server, schema=engine.describe())
    store = AuditStore("sqlite://")
    logs = real_logs(out, write=not args.replay) if any(q["set"] == "reallogs" for q in asked) else None
    compiled = meta.get("compiled")
    programs = [UNCOMPILED] + ([Path(compiled).stem] if compiled else [])
    rows, unrecorded = [], {}
    for n, question in enumerate(asked, start=1):
        if question["set"] == "reallogs":
            os.environ["DIAGNOSIS_LOGS_DIR"] = str(logs)
        else:
            os.environ.pop("DIAGNOSIS_LOGS_DIR", None)
        for label in programs:
            started = time.perf_counter()
            missing = getattr(lm.engine, "missing", 0)
            program = Diagnosis(store=store) if label == UNCOMPILED else load_from(Path(compiled), store, lm)
            row = {**ask(question, program, lm, store), "program": label}
            if args.replay:
                unrecorded[row["id"], label] = lm.engine.missing - missing
            row["seconds"] = seconds.get((row["id"], label), round(time.perf_counter() - started, 1))
            rows.append(row)
            print(f"[{n}/{len(asked)}] {row['id']}{f' ({label})' if compiled else ''}: {row['verdict']} (expected "
                  f"{row['expected']}) {'right' if row['right'] else 'WRONG'}{' UNSAFE' if row['unsafe_pass'] else ''}, "
                  f"{row['seconds']} s, {row['lm_calls']} calls", flush=True)
    totals = summary([r for r in rows if r["program"] == UNCOMPILED])
    if compiled:
        totals["compiled"] = summary([r for r in rows if r["program"] != UNCOMPILED])
    text = report(meta, rows, totals)
    if args.replay:
        def key(row: dict) -> tuple[str, str]:
            return row["id"], row.get("program", UNCOMPILED)

        moved = [f"{now['id']}: recorded {then['verdict']}, now {now['verdict']}"
                 + (f" ({unrecorded[key(now)]} request(s) the recorded run never made: the program's prompts "
                    "changed since)" if unrecorded[key(now)] else " (same requests: the code reads them differently)")
                 for now, then in zip(rows, recorded["rows"], strict=True) if now["verdict"] != then["verdict"]]
        # A question that sent a request the run never made was not replayed whole, though its verdict held.
        unreplayed = [f"{now['id']}: {unrecorded[key(now)]} request(s) the recorded run never made, verdict "
                      f"{now['verdict']} as recorded" for now, then in zip(rows, recorded["rows"], strict=True)
                      if unrecorded[key(now)] and now["verdict"] == then["verdict"]]
        print(f"replay reproduces every recorded verdict: {not moved}")
        for line in moved:
            print(f"  moved: {line}")
        print(f"every request was recorded: {not unreplayed and not any(unrecorded.values())}")
        for line in unreplayed:
            print(f"  not replayed whole: {line}")
        print(text)
        return 0 if not moved else 1
    (out / "results.json").write_text(json.dumps({"meta": meta, "summary": totals, "rows": rows}, ensure_ascii=False,
                                                 indent=2), encoding="utf-8")
    (out / "report.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

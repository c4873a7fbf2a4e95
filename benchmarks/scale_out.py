"""Diagnoses per minute with 1, 2 and 4 `serve` workers against one LM server and one PostgreSQL.

    flock /tmp/gd-model.lock .venv/bin/python benchmarks/scale_out.py                 # the 1.5B, 8 alerts
    flock /tmp/gd-model.lock .venv/bin/python benchmarks/scale_out.py --model embedded-small --alerts 12

A llama-cpp-python server (`python -m llama_cpp.server`, its `--cache` on), started anew for each
worker count so that no configuration reads the prompt states of the one before, serves the model on a
loopback port, one PostgreSQL server runs from Debian's binaries, and for each worker count N a new
database gets N `python -m program serve` processes, each running one diagnosis at a time
(DIAGNOSIS_SERVE_CONCURRENCY=1) with `DIAGNOSIS_LM=openai/qwen` against that server. The same
alerts, each a different alert name and service (so no LM request repeats), are posted at once to
the first worker's Alertmanager webhook; the workers drain the one queue of the database. Printed
for each N: the diagnoses per minute from the post to the last stored diagnosis, and the median
prompt and written tokens, LM calls and seconds per diagnosis, from the stored audit records. The
extrapolation in docs/server.md uses those token counts.

Writes results/scale-<UTC>/results.json and report.md; each configuration's audit records stay in
results.json (verdict, tokens, LM calls, seconds), and every LM request and reply of a worker is in
transcript-<N>-worker<n>.jsonl, recorded by the worker (benchmarks/recorded_serve.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("order-service", "payment-service", "user-service", "inventory-service", "notification-service",
            "api-gateway")
ALERTS = ("HighMemoryUsage", "HighCPUUsage", "SlowResponse", "PodOOMKilled", "SlowQuery", "HighErrorRate")


def alert_pairs(count: int) -> list[tuple[str, str]]:
    """`count` distinct (alert name, service) pairs, the fixture's firing ones first."""
    firing = [("HighCPUUsage", "payment-service"), ("HighMemoryUsage", "order-service"),
              ("SlowResponse", "user-service"), ("PodOOMKilled", "notification-service"),
              ("SlowQuery", "inventory-service")]
    others = [(a, s) for s in SERVICES for a in ALERTS if (a, s) not in firing]
    return (firing + others)[:count]


def database(admin_url: str) -> str:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"scale_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as db:
        db.execute(text(f"CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0"))
    admin.dispose()
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def run_config(workers: int, db: str, lm_url: str, pairs: list[tuple[str, str]], out: Path) -> dict:
    from tests.support.prometheus_server import free_port
    from tests.support.servers import stop_process
    from tests.support.webhooks import firing, webhook

    processes, urls = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(workers):
            port = free_port()
            env = {**os.environ, "DIAGNOSIS_LM": "openai/qwen", "DIAGNOSIS_LM_API_BASE": lm_url,
                   "DIAGNOSIS_SERVE_CONCURRENCY": "1", "DIAGNOSIS_SERVE_QUEUE": "1000", "DIAGNOSIS_COMPILED_DIR": tmp,
                   "DSPY_CACHEDIR": f"{tmp}/dspy-{n}",
                   "DIAGNOSIS_TRANSCRIPT": str(out / f"transcript-{workers}-worker{n}.jsonl")}
            command = [sys.executable, str(ROOT / "benchmarks" / "recorded_serve.py"), "--db", db, "serve",
                       "--port", str(port)]
            log = open(f"{tmp}/worker-{n}.log", "w")
            processes.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log))
            urls.append(f"http://127.0.0.1:{port}")
        try:
            for url in urls:
                _wait(f"{url}/healthz")
            bodies = [webhook(firing(alert, service)) for alert, service in pairs]
            began = time.perf_counter()
            with httpx.Client(timeout=60) as client:
                for body in bodies:
                    client.post(f"{urls[0]}/v1/alertmanager", json=body).raise_for_status()
                sessions = _drained(client, urls[0], len(bodies))
            drained = time.perf_counter() - began
        finally:
            for process in processes:
                stop_process(process, timeout=15)
    return {"workers": workers, "alerts": len(bodies), "seconds": round(drained, 1),
            "per_minute": round(len(bodies) / drained * 60, 2), "sessions": sessions}


def _wait(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    sys.exit(f"{url} did not answer in {timeout} s")


def _drained(client: httpx.Client, url: str, count: int, timeout: float = 3600) -> list[dict]:
    """Every session's record once all `count` have ended."""
    deadline = time.monotonic() + timeout
    while True:
        listed = client.get(f"{url}/v1/sessions", params={"limit": 1000}).json()["sessions"]
        if len(listed) >= count and all(s["status"] in ("completed", "failed", "interrupted") for s in listed):
            break
        if time.monotonic() > deadline:
            sys.exit(f"the queue did not drain in {timeout} s: {[s['status'] for s in listed]}")
        time.sleep(1)
    records = []
    for summary in listed:
        record = client.get(f"{url}/v1/sessions/{summary['session_id']}").json()["session"]
        usage = record.get("usage") or {}
        records.append({"session_id": record["session_id"], "query": record["query"], "verdict": record["verdict"],
                        "status": record["status"],
                        "prompt_tokens": sum(u["prompt_tokens"] for u in usage.values()),
                        "completion_tokens": sum(u["completion_tokens"] for u in usage.values()),
                        "lm_calls": sum(u["lm_calls"] for u in usage.values()),
                        "seconds": round(sum(u["seconds"] for u in usage.values()), 1)})
    return records


def needed(per: dict, per_hour: int) -> dict:
    """What `per_hour` alerts an hour asks of the LM server, at the measured tokens per diagnosis."""
    return {"per_hour": per_hour, "per_minute": round(per_hour / 60, 2),
            "prompt_tokens_per_second": round(per["prompt_tokens"] * per_hour / 3600, 1),
            "written_tokens_per_second": round(per["completion_tokens"] * per_hour / 3600, 1)}


def size_from(results: Path, per_hour: int) -> int:
    """The sizing at the tokens per diagnosis a recorded diagnosis benchmark run measured."""
    rows = json.loads(results.read_text(encoding="utf-8"))["rows"]
    for name, pick in (("median", statistics.median), ("mean", statistics.mean)):
        per = {"prompt_tokens": round(pick(r["prompt_tokens"] for r in rows)),
               "completion_tokens": round(pick(r["completion_tokens"] for r in rows))}
        need = needed(per, per_hour)
        print(f"{results.parent.name}, {len(rows)} diagnoses, {name}: {per['prompt_tokens']} prompt and "
              f"{per['completion_tokens']} written tokens per diagnosis; {per_hour} alerts an hour "
              f"({need['per_minute']} per minute) asks {need['prompt_tokens_per_second']} prompt tokens/s and "
              f"{need['written_tokens_per_second']} written tokens/s of the LM server")
    seconds = sum(r["seconds"] for r in rows)
    print(f"one warm process there: {len(rows)} diagnoses in {seconds:.0f} s, "
          f"{len(rows) / seconds * 60:.2f} per minute one after another")
    return 0


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))  # the servers' launchers live with the tests
    from tests.support.lm_server import llama_cpp_server
    from tests.support.postgres_server import postgres_server

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="the embedded model the LM server serves")
    parser.add_argument("--lm-url", help="an OpenAI-compatible LM server's root (…/v1) serving `qwen`, instead of "
                                         "starting llama_cpp.server")
    parser.add_argument("--alerts", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--per-hour", type=int, default=100, help="the alert rate to size the LM server for")
    parser.add_argument("--size-from", help="a diagnosis benchmark run's results.json: print what --per-hour asks "
                                            "at its tokens per diagnosis, and run nothing")
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    if args.size_from:
        return size_from(Path(args.size_from), args.per_hour)
    run = "scale-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) / run
    out.mkdir(parents=True)
    meta = {"run": run, "model": args.model, "alerts": args.alerts, "started": datetime.now(UTC).isoformat(),
            "machine": f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start"}
    pairs = alert_pairs(args.alerts)
    configs = []
    with postgres_server() as admin:
        for workers in args.workers:
            # A new LM server for each configuration: its prompt cache would otherwise hand the next
            # configuration the states of the same alerts' prompts, read by the one before.
            with nullcontext(args.lm_url) if args.lm_url else llama_cpp_server(args.model) as lm_url:
                config = run_config(workers, database(admin), lm_url, pairs, out)
            config["load"] = round(os.getloadavg()[0], 2)
            configs.append(config)
            print(f"{workers} worker(s): {config['alerts']} diagnoses in {config['seconds']} s, "
                  f"{config['per_minute']} per minute (load {config['load']})", flush=True)
    rows = [s for c in configs for s in c["sessions"]]
    per = {key: statistics.median(r[key] for r in rows)
           for key in ("prompt_tokens", "completion_tokens", "lm_calls", "seconds")}
    need = needed(per, args.per_hour)
    (out / "results.json").write_text(json.dumps({"meta": meta, "per_diagnosis": per, "needed": need,
                                                  "configs": configs}, ensure_ascii=False, indent=2), encoding="utf-8")
    lines = [f"# Scale-out {run}", "", f"LM server: {args.lm_url or 'llama_cpp.server with `' + args.model + '`'}; {meta['machine']}.", "",
             "| serve workers | diagnoses | seconds | per minute | load |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {c['workers']} | {c['alerts']} | {c['seconds']} | {c['per_minute']} | {c['load']} |" for c in configs]
    verdicts = Counter(r["verdict"] for r in rows)
    lines += ["", f"Per diagnosis (median of {len(rows)}): {per['prompt_tokens']} prompt tokens, "
              f"{per['completion_tokens']} written tokens, {per['lm_calls']} LM calls, {per['seconds']} s in the "
              f"stages. Verdicts: {dict(verdicts)}.", "",
              f"{args.per_hour} alerts an hour is {need['per_minute']} diagnoses per minute: the LM server must "
              f"sustain {need['prompt_tokens_per_second']} prompt tokens/s and {need['written_tokens_per_second']} "
              f"written tokens/s (these medians times {args.per_hour}, over 3,600 s), before any prefix cache."]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

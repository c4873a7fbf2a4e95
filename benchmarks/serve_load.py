"""Throughput and accept latency of `python -m program serve` under a burst of Alertmanager webhooks.

    .venv/bin/python benchmarks/serve_load.py                      # 50 webhooks at once, queue 20
    .venv/bin/python benchmarks/serve_load.py --alerts 200 --queue 100 --delay 0
    .venv/bin/python benchmarks/serve_load.py --db postgresql+psycopg://postgres@127.0.0.1:55432/empty

A server runs in a subprocess on a loopback port with a new SQLite audit file (or `--db`) and the scripted LM of
tests/support/alert_lm.py (`--delay` seconds in each of its LM calls; no model runs), against the
fixture world. Each webhook carries one firing alert and is posted from a thread of its own, all at
once. Printed: how many were accepted (202) and refused (503), the p50 and p99 seconds to answer a
webhook, the webhooks answered per second, and the diagnoses per second until every accepted alert
had been diagnosed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> int:
    sys.path.insert(0, str(ROOT))  # the scripted LM and the server's launcher live with the tests
    from tests.support.serve_process import ServerProcess
    from tests.support.webhooks import firing, post_all, webhook

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alerts", type=int, default=50)
    parser.add_argument("--queue", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds in each scripted LM call")
    parser.add_argument("--db", help="audit database URL (default: a new SQLite file); a PostgreSQL one must be empty")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {"DIAGNOSIS_SERVE_QUEUE": str(args.queue), "DIAGNOSIS_SERVE_CONCURRENCY": str(args.concurrency),
               "DIAGNOSIS_COMPILED_DIR": tmp}
        server = ServerProcess(args.db or f"sqlite:///{tmp}/audit.db", delay=args.delay, env=env).wait_healthy()
        try:
            bodies = [webhook(firing("LoadTest", f"service-{n:04d}")) for n in range(args.alerts)]
            began = time.perf_counter()
            answers = post_all(f"{server.url}/v1/alertmanager", bodies, timeout=30)
            answered = time.perf_counter() - began
            accepted = sum(a.status == 202 for a in answers)
            while any(s["status"] not in ("completed", "failed", "interrupted") for s in
                      httpx.get(f"{server.url}/v1/sessions", params={"limit": 1000}, timeout=10).json()["sessions"]):
                time.sleep(0.05)
            drained = time.perf_counter() - began
        finally:
            server.stop()
    seconds = [a.seconds for a in answers]
    print(f"webhooks: {args.alerts} at once; queue {args.queue}; {args.concurrency} diagnoses at a time; "
          f"scripted LM, {args.delay:g} s per call")
    print(f"accepted (202): {accepted}; refused (503, Retry-After): {sum(a.status == 503 for a in answers)}; "
          f"other: {sum(a.status not in (202, 503) for a in answers)}")
    print(f"answer to a webhook: p50 {percentile(seconds, 0.5) * 1000:.0f} ms, "
          f"p99 {percentile(seconds, 0.99) * 1000:.0f} ms, mean {statistics.mean(seconds) * 1000:.0f} ms")
    print(f"webhooks answered per second: {args.alerts / answered:.0f} (all in {answered:.2f} s)")
    print(f"diagnoses per second: {accepted / drained:.1f} ({accepted} accepted, all stored in {drained:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How fast a log search reads a large directory, against `grep -F` on the same files, in one run.

    .venv/bin/python benchmarks/log_throughput.py [--size 1G] [--dir DIR] [--out results]

Writes a directory of the formats a search reads (nginx access and error logs, PostgreSQL's stderr
log, RFC 3164 syslog, JSON lines, Docker json-file, plain text with stack traces) up to `--size`
bytes, unless `--dir` names one, then times:
- `grep -F -r -c` for the searched phrase: the baseline, a C program that only looks for bytes;
- the first search with `DIAGNOSIS_LOGS_MAX_BYTES` set to the directory's size: listing, reading,
  decoding, each line read by its format, records joined and indexed;
- the same search again, and a second phrase, on the readings cached by the first (files unchanged).
It prints MB/s for each, the lines matched (grep counts lines, the search records), and the peak
resident memory, and writes them to results/logthroughput-<time>/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.sources.interfaces import LogQuery  # noqa: E402
from tools.sources.logs.directory import LogDirectory, max_bytes  # noqa: E402
from tools.sources.active import active_sources  # noqa: E402

PHRASE = "too many clients"
SECOND = "Connection refused"
START = datetime(2026, 12, 1, tzinfo=UTC)


def _lines(kind: str, rng: random.Random):
    """Endless lines of one format; about one in two thousand holds the searched phrase."""
    n = 0
    while True:
        n += 1
        when = START + timedelta(milliseconds=37 * n)
        hit = rng.random() < 0.0005
        if kind == "nginx":
            status = 502 if hit else rng.choice((200, 200, 200, 304, 404))
            yield (f'10.0.{n % 250}.{n % 200} - - [{when:%d/%b/%Y:%H:%M:%S} +0000] "GET /api/v1/items/{n} HTTP/1.1" '
                   f'{status} {rng.randint(100, 9000)} "-" "python-httpx/0.27.0"')
        elif kind == "nginx-error":
            yield (f"{when:%Y/%m/%d %H:%M:%S} [error] 12#12: *{n} connect() failed (111: "
                   f"{SECOND if hit else 'Connection timed out'}) while connecting to upstream, client: 10.0.0.1")
        elif kind == "postgres":
            text = "FATAL:  sorry, too many clients already" if hit else f"LOG:  checkpoint complete: wrote {n % 900} buffers"
            yield f"{when:%Y-%m-%d %H:%M:%S}.{n % 1000:03d} UTC [{4000 + n % 50}] {text}"
        elif kind == "syslog":
            yield f"{when:%b %e %H:%M:%S} web1 payment-service[77]: charge {n} {'failed: too many clients' if hit else 'ok'}"
        elif kind == "json":
            yield json.dumps({"ts": when.isoformat(), "level": "error" if hit else "info", "service": "cart",
                              "msg": "too many clients on pool" if hit else f"cart {n} updated", "latency_ms": n % 97})
        elif kind == "docker":
            inner = json.dumps({"level": "info", "msg": f"worker {n} tick"})
            yield json.dumps({"log": inner + "\n", "stream": "stdout", "time": when.isoformat()})
        else:
            yield f"{when:%Y-%m-%d %H:%M:%S},{n % 1000:03d} INFO [main] c.a.Worker - job {n} done"
            if hit:
                yield "java.lang.IllegalStateException: too many clients"
                yield "\tat c.a.Worker.run(Worker.java:42)"


FILES = {"api-gateway/access.log": "nginx", "api-gateway/error.log": "nginx-error", "orders-db/postgresql.log": "postgres",
         "syslog": "syslog", "cart/app.jsonl": "json", "worker/container.log": "docker", "batch/app.log": "text"}


def write_directory(root: Path, size: int) -> None:
    rng = random.Random(7)
    each = size // len(FILES)
    for name, kind in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        written = 0
        with path.open("w", encoding="utf-8") as handle:
            lines = _lines(kind, rng)
            while written < each:
                chunk = "\n".join(next(lines) for _ in range(2000)) + "\n"
                handle.write(chunk)
                written += len(chunk.encode())


def _grep(root: Path, phrase: str) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(["grep", "-F", "-r", "-c", phrase, str(root)], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    return seconds, sum(int(line.rsplit(":", 1)[1]) for line in done.stdout.splitlines() if ":" in line)


def _search(source: LogDirectory, phrase: str) -> tuple[float, int]:
    started = time.perf_counter()
    hits = source.search(LogQuery(text=phrase, service=None, level=None, limit=20))
    return time.perf_counter() - started, hits.total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G", help="bytes of logs to write (K, M, G); ignored with --dir")
    parser.add_argument("--dir", help="a directory of logs to measure instead of a written one")
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.dir) if args.dir else Path(scratch) / "logs"
        if not args.dir:
            write_directory(root, max_bytes(args.size))
        total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        mb = total / 1e6
        rows = {"bytes": total, "files": sum(1 for p in root.rglob("*") if p.is_file())}
        for label, (seconds, found) in (("grep -F", _grep(root, PHRASE)), ("grep -F, second phrase", _grep(root, SECOND))):
            rows[label] = {"seconds": round(seconds, 3), "mb_per_s": round(mb / seconds, 1), "matched": found}
        source = LogDirectory(root, active_sources().synonyms, limit=total + 1)
        for label, phrase in (("search, first (read, parse, index)", PHRASE), ("search, again (cached)", PHRASE),
                              ("search, second phrase (cached)", SECOND)):
            seconds, found = _search(source, phrase)
            rows[label] = {"seconds": round(seconds, 3), "mb_per_s": round(mb / seconds, 1), "matched": found}
        rows["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        rows["cpu"] = os.cpu_count()
    print(f"{total / 2**20:.0f} MiB in {rows['files']} files")
    for label, row in rows.items():
        if isinstance(row, dict):
            print(f"{label:40} {row['seconds']:8.2f} s {row['mb_per_s']:9.1f} MB/s  matched {row['matched']}")
    print(f"peak resident memory {rows['peak_rss_mib']} MiB")
    out = Path(args.out) / f"logthroughput-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    out.mkdir(parents=True)
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Peak memory and time of one log search over directories shaped to cost the most per byte read,
for this code and, in the same run, for another revision of it.

    .venv/bin/python benchmarks/log_memory.py [--size 64M] [--baseline REV] [--shapes a,b] [--out results]

Shapes, each about `--size` bytes and searched with the read bound set to `--size`:
- typical: the mix of formats benchmarks/log_throughput.py writes;
- short lines: one file of two-byte lines (`a\\n`), the most records a byte can hold;
- one long line: a single line of non-ASCII text, which Python holds at four bytes a character;
- many files: 20,000 files of one line each, in 20 directories (their number, not --size, is the shape);
- partial entries: one container message a Kubernetes runtime wrote in 100-byte partial (`P`) entries.

Each search runs in a child process of its own, so that its peak resident memory (ru_maxrss) is its
own; the child's import of the program is in that figure too, and printed on its own (`imports`).
A child that runs past --timeout seconds is stopped and reported as such.
With --baseline, the same searches run on a checkout of that revision (a temporary `git worktree`),
one after the other with this code's. The figures go to results/logmemory-<time>/results.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.log_throughput import write_directory  # noqa: E402
from tools.sources.logs.directory import max_bytes  # noqa: E402

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tools.sources.interfaces import LogQuery
from tools.sources.logs.directory import LogDirectory
from tools.sources.fixture import DEFAULT_WORLD_DIR, load_synonyms
from tools.text.search import read_query, words
words("warm up")
imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
source = LogDirectory(Path(sys.argv[2]), load_synonyms(Path(DEFAULT_WORLD_DIR) / "synonyms.json"), limit=int(sys.argv[3]))
started = time.perf_counter()
hits = source.search(LogQuery(text=sys.argv[4], service=None, level=None, limit=20))
print(json.dumps({"seconds": round(time.perf_counter() - started, 2), "matched": hits.total,
                  "unread": len(hits.unread), "imports_mib": round(imports),
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
"""

SHAPES = ("typical", "short lines", "one long line", "many files", "partial entries")
QUERY = {"typical": "too many clients", "short lines": "needle", "one long line": "needle", "many files": "needle",
         "partial entries": "needle"}
POD = "pods/shop_orders-7d9f8c6b5d-x2x4q_0b1c2d3e-aaaa-bbbb-cccc-123456789abc/app"


def write_shape(shape: str, root: Path, size: int) -> None:
    if shape == "typical":
        write_directory(root, size)
        return
    (root / "svc").mkdir(parents=True)
    if shape == "short lines":
        (root / "svc" / "short.log").write_bytes(b"a\n" * (size // 2 - 8) + b"needle\n")
    elif shape == "one long line":
        word = "blob 🙂 ".encode()
        (root / "svc" / "long.log").write_bytes(b"2026-12-01 10:00:00 ERROR " + word * (size // len(word) - 8)
                                                + b" needle\n")
    elif shape == "partial entries":
        (root / "svc").rmdir()
        (root / POD).mkdir(parents=True)
        entry = b"2026-12-01T10:00:00.100000000Z stdout P " + b"x" * 58 + b"\n"
        (root / POD / "0.log").write_bytes(entry * (size // len(entry)) + b"2026-12-01T10:00:00.2Z stdout F needle\n")
    else:
        (root / "svc").rmdir()
        for n in range(20_000):
            directory = root / f"svc{n % 20}"
            directory.mkdir(exist_ok=True)
            (directory / f"f{n}.log").write_text(f"2026-12-01 10:00:00 ERROR event {n} needle failed\n",
                                                 encoding="utf-8")


def measure(code: Path, root: Path, size: int, shape: str, timeout: float) -> dict:
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(code), str(root), str(size), QUERY[shape]],
                              capture_output=True, text=True, cwd=code, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"failed": f"ran past {timeout:g} s and was stopped"}
    if done.returncode != 0:
        return {"failed": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="64M", help="bytes of each shape and the read bound (K, M, G)")
    parser.add_argument("--baseline", help="a git revision to measure the same way, in the same run")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"a comma-separated subset of: {', '.join(SHAPES)}")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one search may take")
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    size = max_bytes(args.size)
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if unknown := [s for s in shapes if s not in SHAPES]:
        parser.error(f"unknown shapes: {', '.join(unknown)}")
    rows: dict = {"size_bytes": size, "baseline": args.baseline, "timeout_seconds": args.timeout, "shapes": {}}
    with tempfile.TemporaryDirectory() as scratch:
        codes = {"this code": ROOT}
        if args.baseline:
            checkout = Path(scratch) / "baseline"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(checkout), args.baseline],
                           check=True, capture_output=True)
            codes = {f"baseline {args.baseline}": checkout, **codes}
        try:
            for shape in shapes:
                root = Path(scratch) / shape.replace(" ", "-")
                write_shape(shape, root, size)
                rows["shapes"][shape] = {name: measure(code, root, size, shape, args.timeout)
                                         for name, code in codes.items()}
                for name, row in rows["shapes"][shape].items():
                    print(f"{shape:14} {name:24} {json.dumps(row)}", flush=True)
        finally:
            if args.baseline:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(checkout)],
                               capture_output=True)
    out = Path(args.out) / f"logmemory-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    out.mkdir(parents=True)
    (out / "results.json").write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`make run` after `make install`, timed as a new user meets it, and after the machine is warmed.

    .venv/bin/python benchmarks/make_run.py       # it takes the model lock itself, per command

In order, each timed from start to exit (wall clock), each model command under the model lock
(/tmp/gd-model.lock, let go between commands), with an empty probe cache and an empty prefix cache
of this run's own (DIAGNOSIS_PROBE_CACHE, DIAGNOSIS_PREFIX_CACHE) and a new DSPy cache directory for
every command, so nothing from earlier runs on this machine helps:
  1. `make install` (an installed tree: only the check that nothing changed);
  2. `make run`: the first diagnosis on a machine that has saved nothing (a fresh clone's first run);
  3. `make run` again: the probe and the three stage prefixes it used are now saved;
  4. `python -m program.entry.warm`, in a new empty cache: what warming every stage ahead costs;
  5. `make run` after that warm-up: the first diagnosis of a machine warmed after its install.
The model file is already assembled (`make install` assembles it). `make run` prints its stage
lines, which are kept with each command's output in the run's folder.

Writes results/makerun-<UTC>/: results.json, report.md and each command's stdout and stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path

from machine import model_lock

ROOT = Path(__file__).resolve().parents[1]


def timed(name: str, command: list[str], env: dict, out: Path, lock: bool) -> dict:
    """Run `command` from the repository root; its wall seconds, exit code and load average."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as dspy_cache:
        env = {**env, "DSPY_CACHEDIR": dspy_cache}
        with model_lock() if lock else nullcontext():
            started = time.perf_counter()
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            seconds = time.perf_counter() - started
    (out / f"{name}.stdout").write_text(done.stdout, encoding="utf-8")
    (out / f"{name}.stderr").write_text(done.stderr, encoding="utf-8")
    row = {"step": name, "command": " ".join(command), "seconds": round(seconds, 1), "exit": done.returncode,
           "load": round(load, 2)}
    print(f"{name}: {row['seconds']} s, exit {row['exit']} (load {row['load']})", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    run = "makerun-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) / run
    out.mkdir(parents=True)
    meta = {"run": run, "started": datetime.now(UTC).isoformat(),
            "machine": f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start"}
    python = str(ROOT / ".venv" / "bin" / "python")
    rows = []
    with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
        fresh = {**os.environ, "DIAGNOSIS_PREFIX_CACHE": f"{first}/prefixes", "DIAGNOSIS_PROBE_CACHE": f"{first}/probes"}
        warmed = {**os.environ, "DIAGNOSIS_PREFIX_CACHE": f"{second}/prefixes",
                  "DIAGNOSIS_PROBE_CACHE": f"{second}/probes"}
        rows.append(timed("1-make-install", ["make", "install"], fresh, out, lock=False))
        rows.append(timed("2-make-run-nothing-saved", ["make", "run"], fresh, out, lock=True))
        rows.append(timed("3-make-run-again", ["make", "run"], fresh, out, lock=True))
        rows.append(timed("4-warm", [python, "-m", "program.entry.warm"], warmed, out, lock=True))
        rows.append(timed("5-make-run-after-warm", ["make", "run"], warmed, out, lock=True))
    meta["finished_load"] = round(os.getloadavg()[0], 2)
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2), encoding="utf-8")
    lines = [f"# `make run` after `make install`, {run}", "", f"{meta['machine']}; started {meta['started']}.", "",
             "| step | command | wall seconds | exit | load |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['step']} | `{r['command'].replace(python, '.venv/bin/python')}` | {r['seconds']} | {r['exit']} | "
              f"{r['load']} |" for r in rows]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text, encoding="utf-8")
    print(text)
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

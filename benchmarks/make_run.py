"""`make run` after `make install`, timed as a new user meets it, and on a machine that saved nothing.

    .venv/bin/python benchmarks/make_run.py       # it takes the model lock itself, per command

`make install` ends with the warm-up (`python -m program.entry.warm`, stamp `.venv/.warmed`), which
saves the engine probe and every stage prefix. In order, each timed from start to exit (wall
clock), each under the model lock (/tmp/gd-model.lock, let go between commands), with a new DSPy
cache directory for every command and a probe and prefix cache of this run's own
(DIAGNOSIS_PROBE_CACHE, DIAGNOSIS_PREFIX_CACHE), empty at first, so nothing from earlier runs on
this machine helps:
  1. `make install` with `.venv/.warmed` removed: on a built tree, what a fresh clone's install
     does after building the environment (the warm-up);
  2. `make run`: the first diagnosis after that install;
  3. `make run` in another empty cache: a machine whose cache is gone, or whose warm-up failed;
  4. `make run` again there: its probe and the three stage prefixes it used are now saved.
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
        installed = {**os.environ, "DIAGNOSIS_PREFIX_CACHE": f"{first}/prefixes", "DIAGNOSIS_PROBE_CACHE": f"{first}/probes"}
        bare = {**os.environ, "DIAGNOSIS_PREFIX_CACHE": f"{second}/prefixes", "DIAGNOSIS_PROBE_CACHE": f"{second}/probes"}
        (ROOT / ".venv" / ".warmed").unlink(missing_ok=True)
        rows.append(timed("1-make-install-warm-up", ["make", "install"], installed, out, lock=True))
        rows.append(timed("2-make-run-after-install", ["make", "run"], installed, out, lock=True))
        rows.append(timed("3-make-run-nothing-saved", ["make", "run"], bare, out, lock=True))
        rows.append(timed("4-make-run-again", ["make", "run"], bare, out, lock=True))
    # The warm-up of step 1 went to this run's own cache: the next make warms this machine's.
    (ROOT / ".venv" / ".warmed").unlink(missing_ok=True)
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

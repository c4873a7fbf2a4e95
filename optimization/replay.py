"""Re-scoring a run from its own files: its results.json says how it was run and how its evidence
was recorded, its transcript answers every LM request;
nothing calls a model.

A replay sends the requests the run sent and must get every score back. A rescore gives each case
the reply the run got for that question and those observations, whatever the prompt around them
says now, and scores it under this code's metric."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from optimization.report import number


# What a run records of its flags, so that a replay runs the same procedure.
RECORDED_ARGS = ("lm", "optimizers", "k", "threshold", "gepa_calls", "gepa_val", "mipro_trials", "teacher",
                 "reflection_lm", "train_scores")
# Flags added after runs were recorded, with what a run recorded before each one did.
LATER_ARGS = {"guard": "none"}
# The transcript of the whole diagnoses the save guard asked (optimization/guard.py).
GUARD_TRANSCRIPT = "guard.jsonl"


# What a citation reply was written for. The observations hold every label a reply may cite, so a
# reply matched by them cites the same refs it cited then; the retry context tells a second attempt
# from the first.
REPLY_INPUTS = ("question", "observations", "retry_context")


def checkout(root: Path) -> dict | None:
    """The commit the code and the devset were read from, and whether the tree differed from it: a
    replay sends the requests the devset's evidence makes, so a run replays only at its own data.
    None outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": head, "modified": bool(status.strip())}


def other_checkout(recorded: dict, now: dict | None) -> str | None:
    """What a replay should say when the run was recorded at another commit, or None."""
    then = recorded["meta"].get("checkout")
    if not then or not now or then == now:
        return None
    return (f"the run was recorded at {then['commit'][:12]}{' (modified)' if then['modified'] else ''}, this is "
            f"{now['commit'][:12]}{' (modified)' if now['modified'] else ''}: a score that differs may be the "
            f"devset's or the program's change, not the replay's")


class ReplayError(ValueError):
    """The run folder cannot be replayed; the message says what is missing."""


def read_run(folder: Path) -> dict:
    try:
        payload = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ReplayError(f"--replay {folder}: cannot read its results.json: {exc}") from None
    if not (folder / "transcript.jsonl").is_file():
        raise ReplayError(f"--replay {folder}: it has no transcript.jsonl to replay")
    meta = payload.get("meta") if isinstance(payload, dict) else None
    args = meta.get("args") if isinstance(meta, dict) else None
    wanted = {"run_id": str, "wall_seconds": (int, float)}
    if (not isinstance(args, dict) or any(not isinstance(meta.get(k), t) for k, t in wanted.items())
            or any(k not in args for k in RECORDED_ARGS) or not isinstance(payload.get("runs"), list)):
        raise ReplayError(f"--replay {folder}: its results.json does not say how the run was made "
                          f"(meta.run_id, meta.wall_seconds, meta.args with {', '.join(RECORDED_ARGS)}, and runs)")
    return payload


def scores(payload: dict) -> list[tuple]:
    """What a replay must reproduce: every row's every case, its score, verdict and rules, and every
    whole diagnosis the save guard asked: its verdict, whether it was right, and whether it was a
    wrong or unsafe PASS (what the save turned on)."""
    guarded = (payload["meta"].get("guard") or {}).get("rows") or []
    return ([(r["label"], r["case_id"], r["score"], r["verdict"], tuple(r["rules"])) for r in payload["runs"]]
            + [(f"guard {r['program']}", r["id"], r["right"], r["verdict"], (r["wrong_pass"], r["unsafe_pass"]))
               for r in guarded])


def differences(recorded: dict, replayed: dict) -> list[str]:
    before, after = scores(recorded), scores(replayed)
    if before == after:
        return []
    changed = [f"{a[0]} {a[1]}: {a[2]} {a[3]} -> {b[2]} {b[3]}" for a, b in zip(before, after, strict=False) if a != b]
    if len(before) != len(after):
        changed.append(f"{len(before)} scored cases recorded, {len(after)} replayed")
    return changed


def rescored(recorded: dict, payload: dict) -> list[str]:
    """Each row's held-out mean as the run scored it and as this code's metric scores it."""
    before = {r["label"]: r for r in recorded["rows"]}
    lines = [f"re-scored {recorded['meta']['run_id']} under this code's metric (held-out mean, recorded -> now):"]
    for row in payload["rows"]:
        old = (before.get(row["label"]) or {}).get("held_out")
        lines.append(f"  {row['label']}: {number(old)} -> {number(row['held_out'])} "
                     f"(normalised {number(row['held_out_normalised'])})")
    return lines

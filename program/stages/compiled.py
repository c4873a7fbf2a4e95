"""Where compiled programs live, what LM each was compiled for, and when the newest one is loaded.

`python optimize.py` saves `diagnosis-<UTC timestamp>.json` (DSPy's own save: demos and
instructions per predictor) into ``DIAGNOSIS_COMPILED_DIR`` (default: ``compiled/`` in the project),
with the identity of the LM it was compiled for in the file's DSPy metadata (``compiled_for``), and
the question sets its guard asked of it as whole diagnoses (``guarded_on``). Demos and instructions
chosen for one model are tuned to it: `diagnose()` loads the newest file compiled for the LM it
runs, and otherwise runs the uncompiled program and notes why in the audit record. A program
compiled for a hosted LM therefore leaves one compiled for the embedded model in use for that model.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

import dspy

from program.store.audit import AuditStore
from program.lm.engine import describe_identity, lm_identity
from program.stages.pipeline import Diagnosis
from contracts import Finding
from contracts.settings import current, default

log = logging.getLogger(__name__)
PROJECT_DIR = Path(__file__).resolve().parents[2]
COMPILED_FOR = "compiled_for"
GUARDED_ON = "guarded_on"
# Notes of the audit record: which compiled program ran, or why none did.
COMPILED_USED = "compiled.used"
COMPILED_REFUSED = "compiled.refused"


class Unusable(ValueError):
    """A compiled file that this run must not load; the message says why."""


def compiled_dir() -> Path:
    return Path(current().compiled_dir or PROJECT_DIR / default("DIAGNOSIS_COMPILED_DIR"))


def newest_compiled() -> Path | None:
    candidates = _newest_first()
    return candidates[0] if candidates else None


def _newest_first() -> list[Path]:
    directory = compiled_dir()
    return sorted(directory.glob("diagnosis-*.json"), reverse=True) if directory.is_dir() else []


def save_program(citation: dspy.Module, run_id: str, lm, guard_sets: list[str] | None = None) -> Path:
    """The full diagnosis program with `citation` as its citation step (what diagnose() loads),
    saved as compiled for `lm`, with the question sets its guard asked. The file appears whole or
    not at all, so a diagnosis starting meanwhile never reads half a program or one without its LM."""
    directory = compiled_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"diagnosis-{run_id}.json"
    # Not named diagnosis-*.json, so newest_compiled() never picks it up while it is written.
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".partial-", suffix=".json")
    os.close(handle)
    try:
        Diagnosis(citation=citation.deepcopy()).save(temporary)
        state = json.loads(Path(temporary).read_text(encoding="utf-8"))
        state["metadata"][COMPILED_FOR] = lm_identity(lm)
        state["metadata"][GUARDED_ON] = list(guard_sets or [])
        Path(temporary).write_text(json.dumps(state, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return path


def compiled_for(path: Path) -> dict:
    """The identity of the LM the file was compiled for; Unusable when it cannot be read or names none."""
    identity = _metadata(path).get(COMPILED_FOR)
    if not isinstance(identity, dict):
        raise Unusable(f"{path.name} does not record which LM it was compiled for "
                       "(files saved before that was recorded do not)")
    return identity


def guarded_on(path: Path) -> list[str]:
    """The question sets whole diagnoses were asked of before the file was saved (none for files
    saved before that was recorded)."""
    sets = _metadata(path).get(GUARDED_ON)
    return [s for s in sets if isinstance(s, str)] if isinstance(sets, list) else []


def _metadata(path: Path) -> dict:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Unusable(f"{path.name} cannot be read ({type(exc).__name__}: {exc})") from None
    metadata = state.get("metadata") if isinstance(state, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def compiled_for_lm(lm) -> Path | None:
    """The newest file compiled for `lm`: files compiled for other LMs are passed over, and the
    search stops at a file that cannot say which LM it was compiled for (Unusable), because that
    one may be the newest for `lm`."""
    current = lm_identity(lm)
    for path in _newest_first():
        if compiled_for(path) == current:
            return path
    return None


def load_program(store: AuditStore | None, lm) -> tuple[Diagnosis | None, Finding | None]:
    """The newest program compiled for `lm`, with a note naming it; otherwise None with a note saying
    why the run goes uncompiled (None, None when nothing was ever compiled)."""
    newest = newest_compiled()
    if newest is None:
        return None, None
    current = lm_identity(lm)
    try:
        path = compiled_for_lm(lm) or newest
        program = _load(path, store, current)
    except Unusable as exc:
        log.warning("%s; running the uncompiled program", exc)
        return None, Finding(rule=COMPILED_REFUSED, message=f"{exc}: running uncompiled")
    log.info("loaded compiled program %s", path)
    return program, Finding(rule=COMPILED_USED,
                            message=f"compiled program {path}, compiled for {describe_identity(current)}")


def load_from(path: Path, store: AuditStore | None, lm) -> Diagnosis:
    """The program compiled at `path`, which must have been compiled for `lm` (Unusable otherwise):
    for comparing a compiled program with the uncompiled one on the same questions."""
    return _load(path, store, lm_identity(lm))


def _load(path: Path, store: AuditStore | None, current: dict) -> Diagnosis:
    saved = compiled_for(path)
    if saved != current:
        said, uses = describe_identity(saved), describe_identity(current)
        if said == uses:  # the same name over other weights or another file: show what differs
            said, uses = json.dumps(saved, sort_keys=True), json.dumps(current, sort_keys=True)
        raise Unusable(f"{path.name} was compiled for {said}, this run uses {uses}")
    program = Diagnosis(store=store)
    try:
        program.load(str(path))
    except Exception as exc:  # DSPy raises what the state's shape provokes; a bad file never stops a diagnosis
        raise Unusable(f"{path.name} cannot be loaded ({type(exc).__name__}: {exc})") from None
    return program

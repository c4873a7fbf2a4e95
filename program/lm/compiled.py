"""Where compiled programs live and how the newest one is loaded.

`python optimize.py` saves `diagnosis-<UTC timestamp>.json` (DSPy's own save: demos and
instructions per predictor) into ``DIAGNOSIS_COMPILED_DIR`` (default: ``compiled/`` in the project).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from program.entry.audit import AuditStore
from program.lm.pipeline import Diagnosis

log = logging.getLogger(__name__)
PROJECT_DIR = Path(__file__).resolve().parents[2]


def compiled_dir() -> Path:
    return Path(os.environ.get("DIAGNOSIS_COMPILED_DIR") or PROJECT_DIR / "compiled")


def newest_compiled() -> Path | None:
    directory = compiled_dir()
    if not directory.is_dir():
        return None
    candidates = sorted(directory.glob("diagnosis-*.json"))
    return candidates[-1] if candidates else None


def load_program(store: AuditStore | None = None, path: Path | None = None) -> Diagnosis | None:
    """The newest compiled program, or None when there is none or it cannot be loaded (the
    uncompiled program is used; a file saved for another program's stages, such as one from before
    the citation step became a module, is named in the log)."""
    path = path or newest_compiled()
    if path is None:
        return None
    program = Diagnosis(store=store)
    try:
        program.load(str(path))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("compiled program %s cannot be loaded (%s: %s); running the uncompiled program",
                    path, type(exc).__name__, exc)
        return None
    log.info("loaded compiled program %s", path)
    return program

"""Why a run's record could not be written, kept where the next process finds it.

A run whose save fails on a full disk may exit before the store can write again, and its row stays
`running`. So each run reserves a small file when it starts, while the disk still has room: its
bytes are written then, so that noting the failure later overwrites blocks already held and needs
no new space (on a copy-on-write filesystem, such as btrfs or ZFS, even an overwrite may need room;
then the note is lost and the run is marked interrupted, as a killed run is). The next writable
store that finds the run's process gone reads the note and marks the run failed, saying why. The
file goes when the run's record is written with its end.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from sqlalchemy.engine import URL

from contracts import Finding
from contracts.record import DiagnosisSession

# A run whose record could not be written (a full disk, a read-only file) ends failed with this
# error once the store can write again.
WRITE_FAILED = "audit.write_failed"
SIZE = 4096
# What the note keeps of the database's error: enough to say what failed, always inside SIZE.
REASON_CHARS = 1000


def notes_directory(parsed: URL, in_memory: bool) -> Path | None:
    """Beside a SQLite file, on its own disk; for a server's database, under the user's home, one
    folder per database. None for an in-memory database: no other process can open it."""
    if in_memory:
        return None
    if parsed.get_backend_name() == "sqlite":
        database = Path(parsed.database)
        return database.with_name(f"{database.name}.unsaved")
    shown = parsed.render_as_string(hide_password=True)
    return Path.home() / ".grounded-diagnosis" / "unsaved" / hashlib.sha256(shown.encode()).hexdigest()[:16]


def ended_unseen(record: DiagnosisSession, unsaved: str | None) -> DiagnosisSession:
    """A run whose process ended mid-way: failed when it noted (`unsaved`) that its record could not
    be written, else interrupted."""
    if unsaved is None:
        status, finding = "interrupted", Finding(
            rule="pipeline.interrupted", message=f"the process {record.process} ended before the run finished")
    else:
        status, finding = "failed", Finding(
            rule=WRITE_FAILED, message=f"the audit store could not write this run's record ({unsaved}), and its "
            f"process {record.process} ended before it could; marked failed when the store could write again")
    return record.model_copy(update={"status": status, "errors": [*record.errors, finding]})


class UnsavedNotes:
    def __init__(self, directory: Path | None):
        self.directory = directory

    def _path(self, session_id: str) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()

    def reserve(self, session_id: str) -> bool:
        """Hold room for the note of a run that starts; False when there is none (the run goes on,
        and a failure it cannot note ends it interrupted)."""
        path = self._path(session_id)
        if path is None:
            return False
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as handle:
                handle.write(b" " * SIZE)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError:
            path.unlink(missing_ok=True)
            return False
        return True

    def note(self, session_id: str, reason: str) -> bool:
        """Write why the run's record could not be saved into its reserved room; False when the run
        reserved none or the write failed."""
        path = self._path(session_id)
        if path is None or not path.is_file():
            return False
        body = json.dumps({"session_id": session_id, "reason": reason[:REASON_CHARS]}).encode("utf-8", "replace")
        try:
            descriptor = os.open(path, os.O_WRONLY)
            try:
                os.pwrite(descriptor, body.ljust(SIZE)[:SIZE], 0)
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        except OSError:
            return False
        return True

    def read(self, session_id: str) -> str | None:
        """The reason noted for the run, None when nothing was noted (or the note cannot be read)."""
        path = self._path(session_id)
        if path is None:
            return None
        try:
            noted = json.loads(path.read_bytes().decode("utf-8").strip() or "null")
        except (OSError, UnicodeDecodeError, ValueError):
            return None
        if isinstance(noted, dict) and noted.get("session_id") == session_id and isinstance(noted.get("reason"), str):
            return noted["reason"]
        return None

    def release(self, session_id: str) -> None:
        path = self._path(session_id)
        if path is not None:
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass

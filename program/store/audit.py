"""Audit store: diagnosis sessions and tool invocations in SQL (SQLite by default, PostgreSQL too).

One URL picks the database: the ``db`` argument, else ``DIAGNOSIS_DB``, else a SQLite file under
``~/.grounded-diagnosis``; a URL of another database, or of an asyncio driver, is an
``AuditURLError``. Every write is its own transaction; a session is saved with an upsert, so
concurrent writers of one session never collide, but a run claims its session id first, and an id
already recorded is refused, so two runs never share a record. Stores creating the schema of a new
database at once do not collide. A store opened ``read_only`` never creates a database or a table.
Faults of the database itself (a missing file, a corrupted page, a foreign schema, a full disk, a
row that is not a session) become an ``AuditStoreError`` that says what is wrong; one record that
cannot be read is an ``UnreadableRecord`` naming its id, and the store stays usable. A run killed
mid-way is marked ``interrupted`` when the next writable store opens. A run whose record could not be
written (a full disk) is marked ``failed`` with ``audit.write_failed`` by the next store of its
process that writes to that database (``mark_unsaved``), and, once that process has ended, by the
next writable store that opens, from the note the run left in room it reserved when it began
(``unsaved``): no run stays ``running`` for ever.

A session can also be queued to run later (``enqueue``, status ``pending``: an alert a server
accepted). A worker takes the oldest with ``claim_pending`` (``claimed`` by its process; on
PostgreSQL with ``SELECT … FOR UPDATE SKIP LOCKED``, so the workers of several servers each take
another and none waits on another's lock), and the run that ``claim_session`` starts under that id
in the same process takes the claimed record over. A claim whose process died before its run began
goes back to ``pending``.

What a database or JSON cannot hold is changed in code before anything is written, the same way on
every backend (``storable``), and the session's record names what changed (``audit.unstorable``):
the record, and so the verdict, never depends on which database keeps it. A URL's password is
hidden in everything written and read (``written``), tool output included: the gatekeeper checks
citations against the text the store keeps.
"""

from __future__ import annotations

import socket
import threading

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from contracts import Finding
from contracts.record import DiagnosisSession
from program.store.errors import AuditStoreError, SessionIdRefused, UnreadableRecord
from program.store.processes import process_dead, this_process
from program.store.records import Records
from program.store.tables import SessionRow
from program.store.unsaved import WRITE_FAILED, UnsavedNotes, ended_unseen, notes_directory

# A bug in deterministic code ends a run as failed with this error, and its traceback in the note.
INTERNAL_ERROR, TRACEBACK = "pipeline.internal_error", "pipeline.traceback"
# Sessions accepted and not yet running: the queue.
PENDING, CLAIMED = "pending", "claimed"
QUEUED = (PENDING, CLAIMED)
# Per database URL, the runs of this process whose last save failed, and why: the next store of
# this process that writes to that database marks each failed, so none stays `running` for ever.
_UNSAVED: dict[str, dict[str, str]] = {}
_UNSAVED_LOCK = threading.Lock()


class AuditStore(Records):
    """The records (program/store/records.py) with the run's lifecycle: a run claims its session id,
    the queue hands out pending sessions, and a run that a killed process or a failed save left
    `running` is marked when a store can."""

    def __init__(self, url: str | None = None, *, read_only: bool = False):
        super().__init__(url, read_only=read_only)
        self._notes = UnsavedNotes(notes_directory(self.parsed_url, self.in_memory))
        if not read_only:
            self.mark_interrupted()
            self.mark_unsaved()

    def mark_interrupted(self) -> list[str]:
        """Sessions left `running` by a process of this host that no longer exists are interrupted;
        sessions such a process had claimed, but whose run never began, are pending again."""
        held = []
        with self._guard(), self._faults("read sessions"), Session(self.engine) as db:
            for session_id, status in db.execute(select(SessionRow.session_id, SessionRow.status)
                                                 .where(SessionRow.status.in_(("running", CLAIMED)))).all():
                try:
                    held.append((self._row(db, session_id), status))
                except UnreadableRecord:
                    continue  # listed by id as unreadable; nothing can be resumed of it
        dead = [(row.session_id, status) for row, status in held
                if isinstance(row.record, dict) and process_dead(str(row.record.get("process") or ""))]
        for session_id, status in dead:
            record = self.get_session(session_id)
            if status == CLAIMED:
                self._set_status(record.model_copy(update={"status": PENDING, "process": ""}), CLAIMED)
                continue
            self.save_session(ended_unseen(record, self._notes.read(session_id)))
        return [session_id for session_id, status in dead if status != CLAIMED]

    def _write(self, record: DiagnosisSession) -> None:
        super()._write(record)
        if record.status != "running":
            self._notes.release(record.session_id)

    def mark_unsaved(self) -> list[str]:
        """Runs of this process whose record could not be saved are failed now that a save can be
        written, their record saying why; a run that cannot be marked yet stays remembered."""
        with _UNSAVED_LOCK:
            waiting = _UNSAVED.pop(self.url, {})
        marked = []
        for session_id, reason in waiting.items():
            try:
                record = self.get_session(session_id)
                if record is not None and record.status in ("running", CLAIMED) and record.process == this_process():
                    finding = Finding(rule=WRITE_FAILED, message=f"the audit store could not write this run's record "
                                      f"({reason}); it was marked failed once the store could write again")
                    self._write(record.model_copy(update={"status": "failed", "errors": [*record.errors, finding]}))
                    marked.append(session_id)
            except AuditStoreError:
                with _UNSAVED_LOCK:
                    _UNSAVED.setdefault(self.url, {}).setdefault(session_id, reason)
        return marked

    def save_session(self, record: DiagnosisSession) -> None:
        """Insert or update in one statement: concurrent savers of one session id never collide. A save
        the database cannot write is remembered, and marked failed by `mark_unsaved` once it can."""
        try:
            self._write(record)
        except SessionIdRefused:
            raise
        except AuditStoreError as exc:
            if record.process == this_process():
                with _UNSAVED_LOCK:
                    _UNSAVED.setdefault(self.url, {})[record.session_id] = str(exc)
                self._notes.note(record.session_id, str(exc))
            raise
        with _UNSAVED_LOCK:
            waiting = _UNSAVED.get(self.url, {}).pop(record.session_id, None)
        if waiting is None and _UNSAVED.get(self.url):
            self.mark_unsaved()

    def enqueue(self, record: DiagnosisSession) -> bool:
        """Record a session to run later, as `record` has it (pending, or claimed by its own process);
        False when its id is recorded already: an alert accepted before is not queued again."""
        if record.status not in QUEUED:
            raise ValueError(f"a queued session is {' or '.join(QUEUED)}, not {record.status}")
        return self._insert_new(record)

    def claim_pending(self, session_id: str | None = None) -> DiagnosisSession | None:
        """The oldest pending session (or the one named), now claimed by this process; None when none
        waits. A row that cannot be read is marked failed, so that it does not block the queue."""
        query = select(SessionRow.session_id).where(SessionRow.status == PENDING)
        if session_id is not None:
            query = query.where(SessionRow.session_id == session_id)
        query = query.order_by(SessionRow.created_at, SessionRow.session_id).limit(1)
        if not self.is_sqlite:
            query = query.with_for_update(skip_locked=True)
        while True:
            with self._guard(), self._faults("claim a session"), Session(self.engine) as db, db.begin():
                found = db.scalars(query).first()
                if found is None:
                    return None
                try:
                    record = self._validate(self._row(db, found)).model_copy(
                        update={"status": CLAIMED, "process": this_process()})
                except UnreadableRecord:
                    db.execute(update(SessionRow).where(SessionRow.session_id == found).values(status="failed"))
                    continue
                # Conditional too: on SQLite another process may have read the same row before this one wrote.
                if self._set_status(record, PENDING, db):
                    return record

    def count_queued(self) -> int:
        with self._guard(), self._faults("count sessions"), Session(self.engine) as db:
            return db.scalar(select(func.count()).select_from(SessionRow).where(SessionRow.status.in_(QUEUED)))

    def _take_over(self, record: DiagnosisSession) -> bool:
        """A session this process claimed from the queue becomes this run's; the run's record keeps
        the queued record's notes (the alert it came from) first. False when it is no such session."""
        with self._guard(), self._faults("claim a session"), Session(self.engine) as db, db.begin():
            row = self._row(db, record.session_id, with_for_update=not self.is_sqlite)
            if row is None or row.status != CLAIMED:
                return False
            queued = self._validate(row)
            if queued.process != this_process():
                return False
            record.notes[:0] = [note for note in queued.notes if note not in record.notes]
            return self._set_status(record, CLAIMED, db)

    def claim_session(self, record: DiagnosisSession) -> None:
        """Record a new run's session, refused when its id is already recorded: held by a live run, or
        by one that ended, unless this process claimed it from the queue (`claim_pending`). Runs under
        one id would share one record and one set of tool calls, which the gatekeeper would take as
        the session's own."""
        if self._insert_new(record) or self._take_over(record):
            self._notes.reserve(record.session_id)
            return
        with self._guard(), self._faults("read a session"), Session(self.engine) as db:
            holder = db.get(SessionRow, record.session_id)
            process = str(holder.record.get("process") or "") if holder and isinstance(holder.record, dict) else ""
            status = holder.status if holder else "unknown"
        if status == "running" and process.rpartition(":")[0] == socket.gethostname() and not process_dead(process):
            raise SessionIdRefused(f"session id {record.session_id!r} is held by a live run in process {process}; "
                                   "a session id names one run: use another, or leave it unset")
        raise SessionIdRefused(f"session id {record.session_id!r} is already recorded (status {status}"
                               + (f", process {process}" if process else "")
                               + "); a session id names one run: use another, or leave it unset")

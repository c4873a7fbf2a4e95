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
from collections.abc import Iterable
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import create_engine, func, inspect, select, text, update
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool
from sqlalchemy.schema import CreateIndex, CreateTable

from contracts import DiagnosisSession, Finding, ToolInvocation
from program.store.errors import AuditStoreError, AuditURLError, SessionIdRefused, UnreadableRecord
from program.store.processes import process_dead, this_process
from program.store.storable import unstorable_note, written
from program.store.tables import (
    Base,
    InvocationRow,
    SessionRow,
    check_row,
    check_session_id,
    insert_for,
    recordable,
    to_invocation,
)
from program.store.unsaved import UnsavedNotes, notes_directory
from program.store.urls import default_db_url, parse_url


# The key of the PostgreSQL advisory lock that serialises creating the schema.
SCHEMA_LOCK = 0x6164_6974
# A bug in deterministic code ends a run as failed with this error, and its traceback in the note.
INTERNAL_ERROR, TRACEBACK = "pipeline.internal_error", "pipeline.traceback"
# Sessions accepted and not yet running: the queue.
PENDING, CLAIMED = "pending", "claimed"
QUEUED = (PENDING, CLAIMED)
# A run whose record could not be written (a full disk, a read-only file) ends failed with this
# error once the store can write again.
WRITE_FAILED = "audit.write_failed"
# Per database URL, the runs of this process whose last save failed, and why: the next store of
# this process that writes to that database marks each failed, so none stays `running` for ever.
_UNSAVED: dict[str, dict[str, str]] = {}
_UNSAVED_LOCK = threading.Lock()


MIN_ID, MAX_ID = -(2**63), 2**63 - 1


class AuditStore:
    def __init__(self, url: str | None = None, *, read_only: bool = False):
        self.url = default_db_url() if url is None else url
        parsed = parse_url(self.url)
        # What messages show: a password in the URL stays out of them.
        self.shown_url = parsed.render_as_string(hide_password=True)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        in_memory = self.is_sqlite and (parsed.database in (None, "", ":memory:") or "mode=memory" in self.url)
        if read_only and self.is_sqlite and not in_memory and not Path(parsed.database).is_file():
            raise AuditStoreError(f"audit database {parsed.database} does not exist")
        kwargs: dict[str, Any] = {}
        if in_memory:
            kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        elif self.is_sqlite:
            kwargs = {"connect_args": {"check_same_thread": False, "timeout": 30}}
        # SQLite allows one writer at a time; serialising here turns "database is locked" into a wait.
        self._lock = threading.Lock() if self.is_sqlite else None
        # Per session id, what its tool calls had changed to be stored, for the note its record gets.
        self._unstorable: dict[str, list[str]] = {}
        self._notes = UnsavedNotes(notes_directory(parsed, in_memory))
        try:
            self.engine = create_engine(self.url, **kwargs)
        except ImportError as exc:
            raise AuditStoreError(f"audit database {self.shown_url}: its driver {parsed.get_driver_name()} is not "
                                  f"installed ({exc}); for PostgreSQL: pip install -e '.[postgres]'") from None
        except (ArgumentError, ValueError, TypeError) as exc:  # an option of the URL the driver cannot take
            raise AuditURLError(f"audit database {self.shown_url}: the URL's options cannot be used: {exc}") from None
        with self._faults("open"):
            if read_only:
                self._check_schema()
            else:
                self._create_schema()
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        if not read_only:
            self.mark_interrupted()
            self.mark_unsaved()

    @contextmanager
    def _faults(self, what: str):
        try:
            yield
        except SQLAlchemyError as exc:
            reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise AuditStoreError(f"audit database {self.shown_url}: cannot {what}: {reason}") from None
        except ValueError as exc:  # a JSON column whose text is not JSON
            raise AuditStoreError(f"audit database {self.shown_url}: cannot {what}: a stored value is not valid JSON "
                                  f"({exc})") from None

    def _create_schema(self) -> None:
        """IF NOT EXISTS, so stores opening one new database at once never collide on a table. PostgreSQL
        also takes a lock for it: there, two such statements at once can still collide on its catalog."""
        with self.engine.begin() as db:
            if not self.is_sqlite:
                encoding = db.execute(text("SHOW server_encoding")).scalar()
                if encoding != "UTF8":
                    raise AuditStoreError(f"audit database {self.shown_url} is encoded {encoding}, which cannot hold "
                                          "every question and log line: the audit store needs a UTF8 database")
                db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
            for table in Base.metadata.sorted_tables:
                db.execute(CreateTable(table, if_not_exists=True))
                for index in table.indexes:
                    db.execute(CreateIndex(index, if_not_exists=True))

    def _check_schema(self) -> None:
        tables = inspect(self.engine).get_table_names()
        for table in Base.metadata.sorted_tables:
            if table.name not in tables:
                raise AuditStoreError(f"{self.shown_url} is not a grounded-diagnosis audit database "
                                      f"(no table {table.name!r}; it has {', '.join(tables) or 'no tables'})")
            columns = {c["name"] for c in inspect(self.engine).get_columns(table.name)}
            missing = sorted({c.name for c in table.columns} - columns)
            if missing:
                raise AuditStoreError(f"{self.shown_url}: table {table.name!r} lacks column(s) {', '.join(missing)}")

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
            unsaved = self._notes.read(session_id)
            if unsaved is None:
                status, finding = "interrupted", Finding(
                    rule="pipeline.interrupted", message=f"the process {record.process} ended before the run finished")
            else:
                status, finding = "failed", Finding(
                    rule=WRITE_FAILED, message=f"the audit store could not write this run's record ({unsaved}), and "
                    f"its process {record.process} ended before it could; marked failed when the store could write again")
            self.save_session(record.model_copy(update={"status": status, "errors": [*record.errors, finding]}))
        return [session_id for session_id, status in dead if status != CLAIMED]

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

    def __deepcopy__(self, memo):
        # A handle to shared storage, not program state: optimizers that copy programs share it.
        return self

    def _guard(self):
        return self._lock if self._lock is not None else nullcontext()

    def add_invocation(self, invocation: ToolInvocation) -> ToolInvocation:
        """Store one tool call as every backend holds it, and return it as stored: what the run goes on
        to read and cite is what the record keeps."""
        check_session_id(invocation.session_id)
        values, changes = written({
            "tool_name": invocation.tool_name, "input": invocation.input, "output": invocation.output,
            "output_preview": invocation.output_preview,
            "retrieval_details": invocation.retrieval_details.model_dump(mode="json"),
            "success": invocation.success, "latency_ms": invocation.latency_ms})
        values.update(session_id=invocation.session_id, created_at=invocation.created_at or datetime.now(UTC))
        check_row(InvocationRow.__table__, values, "record a tool call")
        with self._guard(), self._faults("record a tool call"), Session(self.engine) as db, db.begin():
            row = InvocationRow(**values)
            db.add(row)
            db.flush()
            stored = to_invocation(row)
        if changes:
            self._unstorable.setdefault(invocation.session_id, []).extend(
                f"tool call #{stored.id} {change}" for change in changes)
        return stored

    def get_invocations(self, ids: Iterable[int]) -> dict[int, ToolInvocation]:
        # An id no database column can hold (10**30) is simply not there: the gatekeeper calls it unknown.
        wanted = sorted({i for i in ids if isinstance(i, int) and not isinstance(i, bool) and MIN_ID <= i <= MAX_ID})
        if not wanted:
            return {}
        with self._guard(), self._faults("read tool calls"), Session(self.engine) as db:
            rows = db.scalars(select(InvocationRow).where(InvocationRow.id.in_(wanted))).all()
            return {row.id: to_invocation(row) for row in rows}

    def list_invocations(self, session_id: str) -> list[ToolInvocation]:
        # An id no session can have is simply not there, on every backend (PostgreSQL refuses NUL in a query).
        if not recordable(session_id):
            return []
        with self._guard(), self._faults("read tool calls"), Session(self.engine) as db:
            rows = db.scalars(
                select(InvocationRow).where(InvocationRow.session_id == session_id).order_by(InvocationRow.id)
            ).all()
            return [to_invocation(row) for row in rows]

    def _session_values(self, record: DiagnosisSession) -> dict[str, Any]:
        """The columns of a session as every backend holds them; the record names what had to change."""
        check_session_id(record.session_id)
        payload, changes = written(record.model_dump(mode="json"))
        places = [*changes, *self._unstorable.get(record.session_id, [])]
        if places:
            note = unstorable_note(places).model_dump(mode="json")
            if note not in payload["notes"]:
                payload["notes"].append(note)
        values = {"query": payload["query"], "status": payload["status"], "verdict": payload["verdict"],
                  "answer": payload["answer"], "updated_at": datetime.now(UTC),
                  "self_evaluation": payload["self_evaluation"], "record": payload}
        check_row(SessionRow.__table__, values, "save a session")
        return values

    def _insert_new(self, record: DiagnosisSession) -> bool:
        """Insert the session unless its id is recorded; True when it was inserted."""
        values = self._session_values(record)
        statement = insert_for(self.is_sqlite)(SessionRow).values(
            session_id=record.session_id, created_at=record.created_at or values["updated_at"], **values)
        statement = statement.on_conflict_do_nothing(index_elements=[SessionRow.session_id]).returning(
            SessionRow.session_id)
        with self._guard(), self._faults("save a session"), Session(self.engine) as db, db.begin():
            return db.execute(statement).first() is not None

    def _set_status(self, record: DiagnosisSession, expected: str, db: Session | None = None) -> bool:
        """Save `record` over its row only while the row's status is `expected`; True when it was.
        Within `db`'s transaction when given, else in one of its own."""
        statement = (update(SessionRow)
                     .where(SessionRow.session_id == record.session_id, SessionRow.status == expected)
                     .values(**self._session_values(record)))
        if db is not None:
            return db.execute(statement).rowcount == 1
        with self._guard(), self._faults("save a session"), Session(self.engine) as db, db.begin():
            return db.execute(statement).rowcount == 1

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

    def recorded(self, session_ids: Iterable[str]) -> set[str]:
        """Which of these session ids are recorded, whatever their status."""
        wanted = [i for i in set(session_ids) if recordable(i)]
        if not wanted:
            return set()
        with self._guard(), self._faults("read sessions"), Session(self.engine) as db:
            return set(db.scalars(select(SessionRow.session_id).where(SessionRow.session_id.in_(wanted))).all())

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

    def _write(self, record: DiagnosisSession) -> None:
        values = self._session_values(record)
        statement = insert_for(self.is_sqlite)(SessionRow).values(
            session_id=record.session_id, created_at=record.created_at or values["updated_at"], **values)
        statement = statement.on_conflict_do_update(index_elements=[SessionRow.session_id], set_=values)
        with self._guard(), self._faults("save a session"), Session(self.engine) as db, db.begin():
            db.execute(statement)
        if record.status != "running":
            # The run has ended and its record holds the note: no more tool calls will come for it.
            self._unstorable.pop(record.session_id, None)
            self._notes.release(record.session_id)

    @staticmethod
    def _validate(row: SessionRow) -> DiagnosisSession:
        try:
            # Records written before text was made storable may still hold what JSON cannot print.
            return DiagnosisSession.model_validate(written(row.record)[0])
        except ValidationError as exc:
            raise UnreadableRecord(row.session_id, f"session {row.session_id!r} is stored in a form this version "
                                   f"cannot read: {exc.error_count()} problem(s), first: {exc.errors()[0]['msg']}"
                                   ) from None

    @staticmethod
    def _row(db: Session, session_id: str, **options) -> SessionRow | None:
        """The row of one session; UnreadableRecord when its stored record is not JSON."""
        try:
            return db.get(SessionRow, session_id, **options)
        except ValueError as exc:
            raise UnreadableRecord(session_id, f"session {session_id!r} is stored in a form this version cannot "
                                   f"read: its record is not JSON ({exc})") from None

    def get_session(self, session_id: str) -> DiagnosisSession | None:
        """The session, None when no such id is recorded; UnreadableRecord when its record cannot be read."""
        if not recordable(session_id):
            return None
        with self._guard(), self._faults("read a session"), Session(self.engine) as db:
            row = self._row(db, session_id)
            return None if row is None else self._validate(row)

    def list_sessions(self, limit: int = 20) -> tuple[list[DiagnosisSession], list[UnreadableRecord]]:
        """The newest sessions that can be read, and for each row that cannot, why (with its id)."""
        if not 1 <= limit <= MAX_ID:
            raise ValueError(f"limit must be from 1 to {MAX_ID}")
        good, bad = [], []
        with self._guard(), self._faults("list sessions"), Session(self.engine) as db:
            ids = db.scalars(select(SessionRow.session_id).order_by(SessionRow.created_at.desc()).limit(limit)).all()
        for session_id in ids:
            try:
                good.append(self.get_session(session_id))
            except UnreadableRecord as exc:
                bad.append(exc)
        return good, bad



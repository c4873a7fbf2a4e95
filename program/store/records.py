"""What the audit store reads and writes: the sessions and their tool invocations, each row as every
backend holds it (``storable``), a session's record naming what had to change to be stored."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from contracts import ToolInvocation
from contracts.record import DiagnosisSession
from program.store.database import Database
from program.store.errors import UnreadableRecord
from program.store.storable import unstorable_note, written
from program.store.tables import (
    MAX_ID,
    MIN_ID,
    InvocationRow,
    SessionRow,
    check_row,
    check_session_id,
    insert_for,
    recordable,
    to_invocation,
)


class Records(Database):
    def __init__(self, url: str | None = None, *, read_only: bool = False):
        super().__init__(url, read_only=read_only)
        # Per session id, what its tool calls had changed to be stored, for the note its record gets.
        self._unstorable: dict[str, list[str]] = {}

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

    def recorded(self, session_ids: Iterable[str]) -> set[str]:
        """Which of these session ids are recorded, whatever their status."""
        wanted = [i for i in set(session_ids) if recordable(i)]
        if not wanted:
            return set()
        with self._guard(), self._faults("read sessions"), Session(self.engine) as db:
            return set(db.scalars(select(SessionRow.session_id).where(SessionRow.session_id.in_(wanted))).all())

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

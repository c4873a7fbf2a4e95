"""Audit store: diagnosis sessions and tool invocations in SQL (SQLite by default, PostgreSQL too).

One URL picks the database: the ``db`` argument, else ``DIAGNOSIS_DB``, else a SQLite file under
``~/.grounded-diagnosis``. Every write is its own transaction.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, String, Text, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from sqlalchemy.pool import StaticPool

from signatures.contracts import DiagnosisSession, ToolInvocation


def default_db_url() -> str:
    url = os.environ.get("DIAGNOSIS_DB")
    if url:
        return url
    home = Path.home() / ".grounded-diagnosis"
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'audit.db'}"


class Base(DeclarativeBase):
    pass


class SessionRow(Base):
    __tablename__ = "diagnosis_sessions"

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    query: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    verdict: Mapped[str | None] = mapped_column(String(16), nullable=True)
    answer: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # The design keeps the gatekeeper result at self_evaluation.verifier_evaluation.gatekeeper_result.
    self_evaluation: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)


class InvocationRow(Base):
    __tablename__ = "tool_invocations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(64), index=True)
    tool_name: Mapped[str] = mapped_column(String(64))
    input: Mapped[dict[str, Any]] = mapped_column(JSON)
    output: Mapped[dict[str, Any]] = mapped_column(JSON)
    output_preview: Mapped[str] = mapped_column(Text)
    retrieval_details: Mapped[dict[str, Any]] = mapped_column(JSON)
    success: Mapped[bool] = mapped_column(Boolean)
    latency_ms: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


def _to_invocation(row: InvocationRow) -> ToolInvocation:
    return ToolInvocation(
        id=row.id,
        session_id=row.session_id,
        tool_name=row.tool_name,
        input=row.input,
        output=row.output,
        output_preview=row.output_preview,
        retrieval_details=row.retrieval_details,
        success=row.success,
        latency_ms=row.latency_ms,
        created_at=row.created_at,
    )


class AuditStore:
    def __init__(self, url: str | None = None):
        self.url = url or default_db_url()
        is_sqlite = self.url.startswith("sqlite")
        in_memory = is_sqlite and (self.url in ("sqlite://", "sqlite:///:memory:") or "mode=memory" in self.url)
        kwargs: dict[str, Any] = {}
        if in_memory:
            kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        elif is_sqlite:
            kwargs = {"connect_args": {"check_same_thread": False, "timeout": 30}}
        self.engine = create_engine(self.url, **kwargs)
        Base.metadata.create_all(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # SQLite allows one writer at a time; serialising here turns "database is locked" into a wait.
        self._lock = threading.Lock() if is_sqlite else None

    def __deepcopy__(self, memo):
        # A handle to shared storage, not program state: optimizers that copy programs share it.
        return self

    def _guard(self):
        return self._lock if self._lock is not None else nullcontext()

    def add_invocation(self, invocation: ToolInvocation) -> ToolInvocation:
        with self._guard(), Session(self.engine) as db, db.begin():
            row = InvocationRow(
                session_id=invocation.session_id,
                tool_name=invocation.tool_name,
                input=invocation.input,
                output=invocation.output,
                output_preview=invocation.output_preview,
                retrieval_details=invocation.retrieval_details.model_dump(mode="json"),
                success=invocation.success,
                latency_ms=invocation.latency_ms,
                created_at=invocation.created_at or datetime.now(UTC),
            )
            db.add(row)
            db.flush()
            return _to_invocation(row)

    def get_invocations(self, ids: Iterable[int]) -> dict[int, ToolInvocation]:
        wanted = sorted({i for i in ids if isinstance(i, int) and not isinstance(i, bool)})
        if not wanted:
            return {}
        with self._guard(), Session(self.engine) as db:
            rows = db.scalars(select(InvocationRow).where(InvocationRow.id.in_(wanted))).all()
            return {row.id: _to_invocation(row) for row in rows}

    def list_invocations(self, session_id: str) -> list[ToolInvocation]:
        with self._guard(), Session(self.engine) as db:
            rows = db.scalars(
                select(InvocationRow).where(InvocationRow.session_id == session_id).order_by(InvocationRow.id)
            ).all()
            return [_to_invocation(row) for row in rows]

    def save_session(self, record: DiagnosisSession) -> None:
        now = datetime.now(UTC)
        payload = record.model_dump(mode="json")
        with self._guard(), Session(self.engine) as db, db.begin():
            row = db.get(SessionRow, record.session_id)
            if row is None:
                row = SessionRow(session_id=record.session_id, created_at=record.created_at or now)
                db.add(row)
            row.query = record.query
            row.status = record.status
            row.verdict = record.verdict
            row.answer = record.answer
            row.updated_at = now
            row.self_evaluation = payload["self_evaluation"]
            row.record = payload

    def get_session(self, session_id: str) -> DiagnosisSession | None:
        with self._guard(), Session(self.engine) as db:
            row = db.get(SessionRow, session_id)
            return None if row is None else DiagnosisSession.model_validate(row.record)

    def list_sessions(self, limit: int = 20) -> list[DiagnosisSession]:
        with self._guard(), Session(self.engine) as db:
            rows = db.scalars(select(SessionRow).order_by(SessionRow.created_at.desc()).limit(limit)).all()
            return [DiagnosisSession.model_validate(row.record) for row in rows]

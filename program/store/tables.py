"""The store's two tables, and what a row must be on every database: an id it keeps as it is, and no
value a column would refuse on one backend and take on another."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, String, Table, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from contracts import ToolInvocation
from program.store.errors import AuditStoreError, SessionIdRefused
from program.store.storable import storable, written

# What an integer column holds on every backend (a 64-bit signed integer).
MIN_ID, MAX_ID = -(2**63), 2**63 - 1


class Base(DeclarativeBase):
    pass


class SessionRow(Base):
    __tablename__ = "diagnosis_sessions"

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    query: Mapped[str] = mapped_column(Text)
    # Indexed: the queue is read by status on every accept and every claim.
    status: Mapped[str] = mapped_column(String(16), index=True)
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


def to_invocation(row: InvocationRow) -> ToolInvocation:
    # Rows written before text was made storable may still hold what JSON cannot print.
    stored, _ = written({"input": row.input, "output": row.output, "output_preview": row.output_preview,
                          "retrieval_details": row.retrieval_details})
    output = stored["output"]
    return ToolInvocation(
        id=row.id,
        session_id=row.session_id,
        tool_name=row.tool_name,
        **stored,
        success=row.success,
        # The tool's output names its source; keeping it there needs no column an older database lacks.
        source=str(output.get("source") or "") if isinstance(output, dict) else "",
        latency_ms=row.latency_ms,
        created_at=row.created_at,
    )


def insert_for(is_sqlite: bool):
    if is_sqlite:
        from sqlalchemy.dialects.sqlite import insert
    else:
        from sqlalchemy.dialects.postgresql import insert
    return insert


def recordable(session_id: Any) -> bool:
    return (isinstance(session_id, str) and 0 < len(session_id) <= SessionRow.__table__.c.session_id.type.length
            and not storable(session_id)[1])


def check_session_id(session_id: Any) -> None:
    """An id no store keeps as it is would merge runs whose ids differ only there, so it is refused."""
    if not recordable(session_id):
        raise SessionIdRefused(f"session id {session_id!r} cannot be recorded: a session id is 1 to "
                               f"{SessionRow.__table__.c.session_id.type.length} characters of text, "
                               "without NUL or lone surrogates")


def check_row(table: Table, values: dict[str, Any], what: str) -> None:
    """What a column would refuse on one backend and take on another (SQLite keeps a string longer
    than its column, PostgreSQL refuses it) is refused here, on all of them."""
    for column in table.columns:
        if column.name not in values:
            continue
        value, length = values[column.name], getattr(column.type, "length", None)
        if value is None and not column.nullable:
            raise AuditStoreError(f"cannot {what}: {column.name} has no value")
        if length and isinstance(value, str) and len(value) > length:
            raise AuditStoreError(f"cannot {what}: {column.name} has {len(value)} characters; "
                                  f"the audit store holds at most {length}")

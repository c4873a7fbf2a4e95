"""The audit store's queue of pending sessions, on SQLite and PostgreSQL: an accepted alert is queued
once, claimed by one worker, run under its own id through the normal pipeline, and never lost when a
process dies."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest

from program.entry.api import diagnose
from program.store.audit import AuditStore
from program.store.errors import SessionIdRefused
from program.store.processes import this_process
from contracts import Finding
from contracts.record import DiagnosisSession
from tests.support.alert_lm import alert_lm

QUESTION = '只确认 "order-service" 是否存在 "HighMemoryUsage" 告警'
ORIGIN = Finding(rule="alert.received", message="test: alert HighMemoryUsage")


def pending(session_id: str, minutes: int = 0, **fields) -> DiagnosisSession:
    created = datetime(2026, 12, 1, 10, tzinfo=UTC) + timedelta(minutes=minutes)
    return DiagnosisSession(**{"session_id": session_id, "query": QUESTION, "status": "pending",
                               "created_at": created, "notes": [ORIGIN], **fields})


def dead_process() -> str:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return f"{socket.gethostname()}:{child.stdout.strip()}"


def test_a_session_is_queued_once_and_claimed_oldest_first_by_one_worker(queue_url):
    store = AuditStore(queue_url)
    assert store.enqueue(pending("late", minutes=5)) and store.enqueue(pending("early"))
    assert not store.enqueue(pending("early", query="another question"))
    assert store.recorded(["early", "late", "unknown"]) == {"early", "late"}
    assert store.count_queued() == 2
    claimed = store.claim_pending()
    assert (claimed.session_id, claimed.status, claimed.process) == ("early", "claimed", this_process())
    assert store.get_session("early").status == "claimed" and store.count_queued() == 2
    assert store.claim_pending("late").session_id == "late"
    assert store.claim_pending() is None
    with pytest.raises(ValueError, match="a queued session is pending or claimed, not running"):
        store.enqueue(DiagnosisSession(session_id="x", query="q"))


def test_a_claimed_session_runs_under_its_own_id_and_keeps_where_it_came_from(queue_url):
    store = AuditStore(queue_url)
    store.enqueue(pending("alert-1"))
    claimed = store.claim_pending()
    result = diagnose(claimed.query, lm=alert_lm(), db=store, session_id=claimed.session_id, compiled=False)
    record = store.get_session("alert-1")
    assert result.session_id == "alert-1" and (record.status, record.verdict) == ("completed", "PASS")
    assert record.notes[0] == ORIGIN and store.count_queued() == 0
    assert [inv.session_id for inv in store.list_invocations("alert-1")] == ["alert-1"]
    # Once it ran, the id is a run's like any other: a second run under it is refused.
    with pytest.raises(SessionIdRefused, match="'alert-1' is already recorded .status completed"):
        diagnose(QUESTION, lm=alert_lm(), db=store, session_id="alert-1", compiled=False)


def test_no_run_takes_a_session_that_is_pending_or_claimed_by_another_process(queue_url):
    store = AuditStore(queue_url)
    store.enqueue(pending("waiting"))
    store.enqueue(pending("theirs", status="claimed", process="elsewhere.example:1"))
    for session_id, status in (("waiting", "pending"), ("theirs", "claimed")):
        with pytest.raises(SessionIdRefused, match=f"already recorded .status {status}"):
            diagnose(QUESTION, lm=alert_lm(), db=store, session_id=session_id, compiled=False)
    assert store.list_invocations("waiting") == [] and store.get_session("theirs").status == "claimed"


def test_a_claim_whose_process_died_before_its_run_began_is_pending_again(queue_url):
    store = AuditStore(queue_url)
    store.enqueue(pending("orphan", status="claimed", process=dead_process()))
    store.save_session(pending("killed", status="running", process=dead_process()))
    reopened = AuditStore(queue_url)
    orphan = reopened.get_session("orphan")
    assert (orphan.status, orphan.process) == ("pending", "")
    assert reopened.get_session("killed").status == "interrupted"
    assert reopened.claim_pending().session_id == "orphan"


def test_workers_in_eight_threads_claim_each_pending_session_exactly_once(queue_url):
    store = AuditStore(queue_url)
    ids = [f"alert-{n:02d}" for n in range(40)]
    for n, session_id in enumerate(ids):
        store.enqueue(pending(session_id, minutes=n))
    claims: list[str] = []
    lock = threading.Lock()

    def worker():
        while (record := AuditStore(queue_url).claim_pending()) is not None:
            with lock:
                claims.append(record.session_id)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(claims) == ids


def test_a_pending_row_that_cannot_be_read_is_marked_failed_and_does_not_block_the_queue(queue_url):
    from sqlalchemy import update

    from program.store.tables import SessionRow

    store = AuditStore(queue_url)
    store.enqueue(pending("broken"))
    store.enqueue(pending("fine", minutes=1))
    with store.engine.begin() as db:
        db.execute(update(SessionRow).where(SessionRow.session_id == "broken").values(record={"not": "a session"}))
    assert store.claim_pending().session_id == "fine"
    with store.engine.connect() as db:
        assert db.scalar(SessionRow.__table__.select().with_only_columns(SessionRow.status)
                         .where(SessionRow.session_id == "broken")) == "failed"

import os
import socket
import sqlite3
import subprocess
import sys
import threading
import uuid

import pytest

from program.entry.audit import AuditStore, AuditStoreError, this_process
from signatures.contracts import (
    DiagnosisSession,
    GatekeeperResult,
    SelfEvaluation,
    VerifierEvaluation,
)
from tests.support.servers import missing_server
from tools.recorder import ToolInvocationRecorder


def _session(session_id: str) -> DiagnosisSession:
    gate = GatekeeperResult(status="fail", severity="reject", failed_rules=["evidence.raw_path"],
                            errors=[{"rule": "evidence.raw_path", "message": "raw_path '$.alerts[99]' is not among refs"}])
    return DiagnosisSession(
        session_id=session_id, query="q", status="completed", verdict="REJECT",
        self_evaluation=SelfEvaluation(verifier_evaluation=VerifierEvaluation(gatekeeper_result=gate, verdict="REJECT")),
    )


def test_session_round_trip_keeps_gatekeeper_result_where_the_design_puts_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    AuditStore(url).save_session(_session("s1"))
    loaded = AuditStore(url).get_session("s1")
    gate = loaded.self_evaluation.verifier_evaluation.gatekeeper_result
    assert gate.severity == "reject" and gate.failed_rules == ["evidence.raw_path"]
    assert AuditStore(url).get_session("missing") is None


def test_saving_twice_updates_in_place(store):
    record = _session("s1")
    store.save_session(record)
    store.save_session(record.model_copy(update={"answer": "final"}))
    assert store.get_session("s1").answer == "final"
    assert [s.session_id for s in store.list_sessions()[0]] == ["s1"]


def _in_eight_threads(work) -> None:
    """Run work(n) for n in 0..7 at once; every exception is collected so the assertion names it."""
    errors = []

    def guarded(n):
        try:
            work(n)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def _eight_writers(store: AuditStore, prefix: str) -> list[int]:
    """Eight threads record 20 calls and save a session each; returns every recorded id."""

    def work(n):
        rec = ToolInvocationRecorder(store, f"{prefix}-{n}")
        for _ in range(20):
            rec.call("query_logs", query="HikariCP", service="order-service")
        store.save_session(_session(f"{prefix}-{n}"))

    _in_eight_threads(work)
    fresh = AuditStore(store.url)
    return [inv.id for n in range(8) for inv in fresh.list_invocations(f"{prefix}-{n}")]


def test_eight_threads_on_a_file_database_lose_nothing(tmp_path):
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    ids = _eight_writers(store, "t")
    assert len(ids) == 160 and len(set(ids)) == 160
    assert len(AuditStore(store.url).list_sessions(limit=100)[0]) == 8


def test_postgresql_round_trip_and_eight_writers():
    """Runs in every CI run: .ci/run starts a PostgreSQL server on loopback and sets the URL."""
    url = os.environ.get("DIAGNOSIS_TEST_POSTGRES")
    if not url:
        missing_server("DIAGNOSIS_TEST_POSTGRES is not set: no PostgreSQL server on this machine (.ci/run starts one)")
    store = AuditStore(url)
    prefix = f"pg-{uuid.uuid4().hex[:8]}"
    ids = _eight_writers(store, prefix)
    assert len(ids) == 160 and len(set(ids)) == 160
    loaded = store.get_session(f"{prefix}-0")
    assert loaded.self_evaluation.verifier_evaluation.gatekeeper_result.failed_rules == ["evidence.raw_path"]
    _eight_savers_of_one_session(store, f"{prefix}-same")


def _eight_savers_of_one_session(store: AuditStore, session_id: str) -> None:
    _in_eight_threads(lambda n: store.save_session(_session(session_id).model_copy(update={"answer": f"writer {n}"})))
    assert store.get_session(session_id).answer.startswith("writer ")


def test_eight_stores_saving_one_session_at_once_do_not_collide(tmp_path):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    AuditStore(url)
    _in_eight_threads(lambda n: AuditStore(url).save_session(_session("same").model_copy(update={"answer": f"w {n}"})))
    assert AuditStore(url).get_session("same").answer.startswith("w ")


def test_reading_never_creates_a_database(tmp_path):
    path = tmp_path / "nothing.db"
    with pytest.raises(AuditStoreError, match="does not exist"):
        AuditStore(f"sqlite:///{path}", read_only=True)
    assert not path.exists()


def test_a_foreign_schema_is_named(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("create table customers (id integer)")
    with pytest.raises(AuditStoreError, match="not a grounded-diagnosis audit database"):
        AuditStore(f"sqlite:///{path}", read_only=True)


def test_a_corrupted_file_is_an_error_not_a_traceback(tmp_path):
    path = tmp_path / "audit.db"
    AuditStore(f"sqlite:///{path}").save_session(_session("s1"))
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)
    path.write_bytes(bytes(data))
    with pytest.raises(AuditStoreError):
        store = AuditStore(f"sqlite:///{path}", read_only=True)
        store.get_session("s1")


def test_one_bad_row_does_not_hide_the_good_ones(tmp_path):
    path = tmp_path / "audit.db"
    store = AuditStore(f"sqlite:///{path}")
    for session_id in ("good-1", "not-json", "not-a-session", "good-2"):
        store.save_session(_session(session_id))
    with sqlite3.connect(path) as db:
        db.execute("update diagnosis_sessions set record = '{oops' where session_id = 'not-json'")
        db.execute("update diagnosis_sessions set record = '{\"x\": 1}' where session_id = 'not-a-session'")
    good, bad = AuditStore(f"sqlite:///{path}", read_only=True).list_sessions()
    assert sorted(r.session_id for r in good) == ["good-1", "good-2"]
    assert len(bad) == 2 and any("not-a-session" in b for b in bad) and any("JSON" in b for b in bad)
    with pytest.raises(AuditStoreError, match="not-a-session"):
        store.get_session("not-a-session")


def test_a_session_whose_process_died_is_marked_interrupted(tmp_path):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = f"{socket.gethostname()}:{child.stdout.strip()}"
    AuditStore(url).save_session(DiagnosisSession(session_id="killed", query="q", process=dead))
    AuditStore(url).save_session(DiagnosisSession(session_id="alive", query="q", process=this_process()))
    store = AuditStore(url)
    assert store.get_session("killed").status == "interrupted"
    assert "pipeline.interrupted" in [e.rule for e in store.get_session("killed").errors]
    assert store.get_session("alive").status == "running"


def test_an_id_no_column_can_hold_is_simply_unknown(store):
    assert store.get_invocations([10**30, -(10**30)]) == {}

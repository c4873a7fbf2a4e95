import os
import threading
import uuid

from program.audit import AuditStore
from signatures.contracts import DiagnosisSession, GatekeeperResult, SelfEvaluation, VerifierEvaluation
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
    assert [s.session_id for s in store.list_sessions()] == ["s1"]


def _eight_writers(store: AuditStore, prefix: str) -> list[int]:
    """Eight threads record 20 calls and save a session each; returns every recorded id."""
    errors = []

    def work(n):
        try:
            rec = ToolInvocationRecorder(store, f"{prefix}-{n}")
            for _ in range(20):
                rec.call("query_logs", query="HikariCP", service="order-service")
            store.save_session(_session(f"{prefix}-{n}"))
        except Exception as exc:  # collected so the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    fresh = AuditStore(store.url)
    return [inv.id for n in range(8) for inv in fresh.list_invocations(f"{prefix}-{n}")]


def test_eight_threads_on_a_file_database_lose_nothing(tmp_path):
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    ids = _eight_writers(store, "t")
    assert len(ids) == 160 and len(set(ids)) == 160
    assert len(AuditStore(store.url).list_sessions(limit=100)) == 8


if os.environ.get("DIAGNOSIS_TEST_POSTGRES"):
    # Defined only when a server is configured (DIAGNOSIS_TEST_POSTGRES=postgresql+psycopg://...),
    # so a machine without PostgreSQL neither runs nor skips it.
    def test_postgresql_round_trip_and_eight_writers():
        store = AuditStore(os.environ["DIAGNOSIS_TEST_POSTGRES"])
        prefix = f"pg-{uuid.uuid4().hex[:8]}"
        ids = _eight_writers(store, prefix)
        assert len(ids) == 160 and len(set(ids)) == 160
        loaded = store.get_session(f"{prefix}-0")
        assert loaded.self_evaluation.verifier_evaluation.gatekeeper_result.failed_rules == ["evidence.raw_path"]

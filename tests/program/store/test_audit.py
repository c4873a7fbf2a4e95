import json
import multiprocessing
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import uuid
from contextlib import contextmanager

import dspy
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from devset import load_cases
from program.store.audit import AuditStore
from program.store.errors import AuditStoreError
from program.store.processes import this_process
from program.stages.pipeline import Diagnosis
from contracts import EvidenceRef, Finding, GatekeeperResult, RetrievalDetails, ToolInvocation
from contracts.record import DiagnosisSession, SelfEvaluation, VerifierEvaluation
from tests.support.good_lm import good_lm
from tools.functions import TOOLBOX
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
        rec = ToolInvocationRecorder(store, f"{prefix}-{n}", TOOLBOX)
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


def test_postgresql_round_trip_and_eight_writers(postgres_url):
    """Runs in every CI run: .ci/run starts a PostgreSQL server on loopback and sets the URL."""
    store = AuditStore(postgres_url)
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
    assert sorted(b.session_id for b in bad) == ["not-a-session", "not-json"]
    assert any("not JSON" in str(b) for b in bad)
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


# What no backend or JSON holds as it is: lone surrogates of either half, a pair split into two code
# points, and NUL, which PostgreSQL text refuses and SQLite keeps.
UNSTORABLE = "high \ud800, low \udfff, pair \ud83d\ude00, nul \x00."
STORED = "high \ufffd, low \ufffd, pair \U0001f600, nul \ufffd."


def _invocation(session_id: str, **fields) -> ToolInvocation:
    return ToolInvocation(**{"id": 0, "session_id": session_id, "tool_name": "query_logs",
                             "retrieval_details": RetrievalDetails(evidence_status="no_evidence"), **fields})


def test_what_no_backend_can_hold_is_stored_changed_and_the_record_names_it(backend_url):
    store = AuditStore(backend_url)
    session_id = f"u-{uuid.uuid4().hex[:8]}"
    invocation = store.add_invocation(_invocation(
        session_id, input={"query": UNSTORABLE}, output_preview=UNSTORABLE,
        output={"success": True, "logs": [{"message": UNSTORABLE}], "value": float("nan"),
                "nested": {7: {"a set"}, f"key {UNSTORABLE}": None}},
        retrieval_details=RetrievalDetails(evidence_status="supported", message=UNSTORABLE,
                                           evidence_refs=[EvidenceRef(raw_path="$.logs[0]", text=UNSTORABLE)])))
    store.save_session(DiagnosisSession(session_id=session_id, query=UNSTORABLE, answer=UNSTORABLE,
                                        notes=[Finding(rule="x", message=UNSTORABLE)]))

    fresh = AuditStore(backend_url)
    for seen in (invocation, fresh.list_invocations(session_id)[0]):
        assert seen.input == {"query": STORED} and seen.output_preview == STORED
        assert seen.output["logs"] == [{"message": STORED}] and seen.output["value"] is None
        assert seen.output["nested"] == {"7": "{'a set'}", f"key {STORED}": None}
        assert seen.retrieval_details.evidence_refs[0].text == STORED and seen.retrieval_details.message == STORED
    record = fresh.get_session(session_id)
    assert record.query == record.answer == record.notes[0].message == STORED
    (note,) = [n for n in record.notes if n.rule == "audit.unstorable"]
    for field in ("query", "answer", "notes[0].message", f"tool call #{invocation.id} input.query",
                  f"tool call #{invocation.id} output.logs[0].message", f"tool call #{invocation.id} output.value",
                  f"tool call #{invocation.id} retrieval_details.evidence_refs[0].text"):
        assert field in note.message
    json.loads(record.model_dump_json())


def test_a_value_longer_than_its_column_is_refused_on_every_backend(backend_url):
    store = AuditStore(backend_url)
    with pytest.raises(AuditStoreError, match="tool_name has 65 characters"):
        store.add_invocation(_invocation("s-long", **{"tool_name": "t" * 65}))


def test_a_session_id_that_would_change_when_stored_is_refused_and_never_found(backend_url):
    store = AuditStore(backend_url)
    # Two ids that differ only in what no store can hold would become one record.
    for session_id in ("a\ud800", "a\x00", "", "s" * 65):
        with pytest.raises(AuditStoreError, match="session id"):
            store.claim_session(DiagnosisSession(session_id=session_id, query="q"))
        with pytest.raises(AuditStoreError, match="session id"):
            store.add_invocation(_invocation(session_id))
        assert store.get_session(session_id) is None and store.list_invocations(session_id) == []


def test_old_records_with_unstorable_text_still_read(tmp_path):
    """Records written before text was made storable: SQLite kept their JSON-escaped surrogates."""
    path = tmp_path / "audit.db"
    AuditStore(f"sqlite:///{path}").save_session(_session("old"))
    with sqlite3.connect(path) as db:
        db.execute("""update diagnosis_sessions set record = json_set(record, '$.answer', json('"x \\ud800 y"'))""")
    record = AuditStore(f"sqlite:///{path}", read_only=True).get_session("old")
    assert record.answer == "x \ufffd y"
    json.loads(record.model_dump_json())


QUESTION_CASE = "high_memory_positive"


def _diagnose_under(url: str, session_id: str, start, results) -> None:
    """One process's run under a given session id: its calls, or why it was refused."""
    case = next(c for c in load_cases() if c["case_id"] == QUESTION_CASE)
    program = Diagnosis(store=AuditStore(url))
    start.wait()
    try:
        with dspy.context(lm=good_lm(case)):
            done = program(question=case["question"], session_id=session_id)
        results.put(("ran", os.getpid(), [inv.id for inv in done.invocations]))
    except AuditStoreError as exc:
        results.put(("refused", os.getpid(), str(exc)))


def _in_processes(count: int, target, *args, answers: int | None = None) -> list:
    """Run target(*args, start, results) in `count` fresh processes that wait for each other at
    start.wait(); the `answers` (one per process unless said) they put in results."""
    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(count, timeout=300), spawn.Queue()
    workers = [spawn.Process(target=target, args=(*args, start, results)) for _ in range(count)]
    for worker in workers:
        worker.start()
    answers = [results.get(timeout=300) for _ in range(answers or count)]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    return answers


def test_four_processes_under_one_session_id_one_runs_and_three_are_refused(backend_url):
    AuditStore(backend_url)
    shared = f"shared-{uuid.uuid4().hex[:8]}"
    answers = _in_processes(4, _diagnose_under, backend_url, shared)
    ran = [a for a in answers if a[0] == "ran"]
    refused = [a for a in answers if a[0] == "refused"]
    assert len(ran) == 1 and len(refused) == 3, answers
    assert all(re.search(f"session id '{shared}' is (held by a live run|already recorded)", message)
               for _, _, message in refused)
    store = AuditStore(backend_url)
    record = store.get_session(shared)
    assert record.status == "completed" and record.process.endswith(f":{ran[0][1]}")
    # Only the run that holds the id wrote under it: nothing of the refused runs is merged in.
    assert [inv.id for inv in store.list_invocations(shared)] == ran[0][2]


def test_a_session_id_is_refused_while_a_live_run_holds_it_and_after_it_finished(backend_url, cases):
    store, held, done = AuditStore(backend_url), f"held-{uuid.uuid4().hex[:8]}", f"done-{uuid.uuid4().hex[:8]}"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store.claim_session(DiagnosisSession(session_id=held, query="q", process=f"{socket.gethostname()}:{holder.pid}"))
        with pytest.raises(AuditStoreError, match=f"'{held}' is held by a live run in process .*:{holder.pid}"):
            store.claim_session(DiagnosisSession(session_id=held, query="another", process=this_process()))
    finally:
        holder.kill()
        holder.wait()
    assert store.get_session(held).query == "q"

    case = cases[QUESTION_CASE]
    with dspy.context(lm=good_lm(case)):
        first = Diagnosis(store=store)(question=case["question"], session_id=done)
        calls = [inv.id for inv in store.list_invocations(done)]
        with pytest.raises(AuditStoreError, match=f"'{done}' is already recorded .status completed"):
            Diagnosis(store=store)(question="只确认 payment-service 是否存在告警", session_id=done)
    record = store.get_session(done)
    assert record.query == case["question"] and record.answer == first.answer
    assert [inv.id for inv in store.list_invocations(done)] == calls


def _open_and_write(urls: list[str], start, results) -> None:
    """For each URL in turn, released with the other processes: open a store, record a call and a session."""
    for url in urls:
        start.wait()
        try:
            store = AuditStore(url)
            session_id = f"p-{os.getpid()}"
            ToolInvocationRecorder(store, session_id, TOOLBOX).call("query_logs", query="HikariCP", service="order-service")
            store.save_session(_session(session_id))
            results.put((url, "ok"))
        except Exception as exc:
            results.put((url, f"{type(exc).__name__}: {exc}"))


def _opened_at_once(urls: list[str]) -> None:
    """Four processes open each new database at the same moment; each must open it and write."""
    outcomes = _in_processes(4, _open_and_write, urls, answers=4 * len(urls))
    assert [o for o in outcomes if o[1] != "ok"] == []
    for url in urls:
        store = AuditStore(url, read_only=True)
        sessions = store.list_sessions(limit=10)[0]
        assert len(sessions) == 4 and all(len(store.list_invocations(s.session_id)) == 1 for s in sessions)


def test_processes_creating_a_new_sqlite_database_at_once_do_not_collide(tmp_path):
    _opened_at_once([f"sqlite:///{tmp_path / f'audit-{n}.db'}" for n in range(10)])


@contextmanager
def _new_postgresql_databases(server_url: str, count: int, options: str = ""):
    """URLs of `count` new, empty databases on the test server, dropped afterwards."""
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    names = [f"audit_test_{uuid.uuid4().hex[:8]}" for _ in range(count)]
    try:
        with admin.connect() as db:
            for name in names:
                db.execute(text(f'CREATE DATABASE "{name}" {options}'))
        yield [make_url(server_url).set(database=name).render_as_string(hide_password=False) for name in names]
    finally:
        with admin.connect() as db:
            for name in names:
                db.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_processes_creating_the_schema_of_a_new_postgresql_database_at_once_do_not_collide(postgres_url):
    with _new_postgresql_databases(postgres_url, 3) as urls:
        _opened_at_once(urls)


def test_a_postgresql_database_that_cannot_hold_every_character_is_refused_when_opened(postgres_url):
    """A LATIN1 database would take an English question and refuse a Chinese one mid-run."""
    with _new_postgresql_databases(postgres_url, 1, "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' "
                                                    "TEMPLATE template0") as (url,):
        with pytest.raises(AuditStoreError, match="encoded LATIN1"):
            AuditStore(url)


def test_a_log_line_no_backend_can_hold_is_recorded_and_cited_as_stored(backend_url, tmp_path, monkeypatch):
    """The JSONL line once stopped its tool call from being recorded at all."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "app.jsonl").write_text(json.dumps({"time": "10:00", "level": "ERROR", "service": "order-service",
                                                "message": "HikariCP timeout \ud800 after \x00 30000ms"}) + "\n",
                                    encoding="utf-8")
    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(logs))
    store, session_id = AuditStore(backend_url), f"log-{uuid.uuid4().hex[:8]}"
    store.save_session(DiagnosisSession(session_id=session_id, query="q", process=this_process()))
    invocation = ToolInvocationRecorder(store, session_id, TOOLBOX).call("query_logs", query="HikariCP", service="order-service")
    (ref,) = invocation.retrieval_details.evidence_refs
    assert invocation.success and "HikariCP timeout \ufffd after \ufffd 30000ms" in ref.text
    assert store.get_invocations([invocation.id])[invocation.id].retrieval_details.evidence_refs == [ref]
    store.save_session(store.get_session(session_id).model_copy(update={"status": "completed"}))
    (note,) = [n for n in store.get_session(session_id).notes if n.rule == "audit.unstorable"]
    assert f"tool call #{invocation.id} output.logs[0].message" in note.message


def test_the_note_of_a_run_s_tool_calls_survives_a_final_save_that_failed(store, monkeypatch):
    store.claim_session(DiagnosisSession(session_id="s", query="q", process=this_process()))
    call = store.add_invocation(_invocation("s", output={"message": UNSTORABLE}))
    ended = store.get_session("s").model_copy(update={"status": "completed"})
    real_execute = Session.execute

    def full_once(db, statement, *args, **kwargs):
        monkeypatch.setattr(Session, "execute", real_execute)
        raise OperationalError("insert", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr(Session, "execute", full_once)
    with pytest.raises(AuditStoreError, match="database or disk is full"):
        store.save_session(ended)
    store.save_session(ended.model_copy(update={"status": "failed"}))
    (note,) = [n for n in store.get_session("s").notes if n.rule == "audit.unstorable"]
    assert f"tool call #{call.id} output.message" in note.message

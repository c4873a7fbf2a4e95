"""What a webhook sender, a page visitor or a slow client can do to `serve` and `investigate`, with
real parts: the server in a uvicorn subprocess (tests/support/serve_process.py), Debian's
Alertmanager, the command line on a real terminal (a pty). Each test holds the reproduction of
issue 30 and variants written for it."""

from __future__ import annotations

import json
import os
import pty
import select
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import event

from program.entry import cli
from program.entry.guards import KEEP_ALIVE_TIMEOUT, MAX_CONNECTIONS, REQUEST_TIMEOUT
from program.store.audit import WRITE_FAILED, AuditStore
from tests.support.alert_lm import alert_lm
from tests.support.alertmanager_server import running_alertmanager
from tests.support.prometheus_server import free_port
from tests.support.serve_process import ROOT, ServerProcess
from tests.support.servers import Loopback, answer
from tests.support.webhooks import firing, webhook

PASSWORD = "S3cretPw"


@contextmanager
def server(db: str, **kwargs):
    process = ServerProcess(db, **kwargs)
    try:
        yield process.wait_healthy()
    finally:
        process.stop()


def raw_request(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(data)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
        return received


# --- credentials --------------------------------------------------------------------------------

# The URL, then variants: a password holding "@" or an escaped one, https, no user name.
CREDENTIAL_URLS = ["http://am-user:{pw}@{address}/", "http://am-user:{pw}@x@{address}",
                   "http://am-user:{pw}%40x@{address}", "http://:{pw}@{address}"]


@pytest.mark.parametrize("url", CREDENTIAL_URLS)
def test_a_password_in_the_alertmanager_url_is_never_stored_served_or_printed(url, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("program.entry.api.resolve_lm", lambda spec: alert_lm())
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    with running_alertmanager() as alertmanager:
        alertmanager.post({"alertname": "HighMemoryUsage", "service": "order-service"})
        deadline = time.monotonic() + 10
        while not httpx.get(f"{alertmanager.url}/api/v2/alerts").json() and time.monotonic() < deadline:
            time.sleep(0.2)
        secret = url.format(pw=PASSWORD, address=alertmanager.address)
        assert cli.main(["--db", db, "investigate", "--alertmanager-url", secret, "--no-compiled"]) == 0
    printed = capsys.readouterr()
    assert PASSWORD not in printed.out + printed.err
    (record,), _ = AuditStore(db, read_only=True).list_sessions()
    assert record.notes[0].message.startswith("investigate http://") and "***@" in record.notes[0].message
    stored = sqlite3.connect(tmp_path / "audit.db").execute("select record from diagnosis_sessions").fetchone()[0]
    assert PASSWORD not in stored
    with server(db) as api:
        served = httpx.get(f"{api.url}/v1/sessions/{record.session_id}").text
        page = httpx.get(f"{api.url}/sessions/{record.session_id}").text
    assert PASSWORD not in served and PASSWORD not in page and "***@" in served
    # An error line names the URL without its password.
    closed = url.format(pw=PASSWORD, address=f"127.0.0.1:{free_port()}")
    assert cli.main(["--db", db, "investigate", "--alertmanager-url", closed]) == 1
    err = capsys.readouterr().err
    assert "Alertmanager at http://" in err and PASSWORD not in err


def test_a_password_in_the_prometheus_url_stays_out_of_the_record_and_the_answer(monkeypatch, tmp_path):
    from program.entry.api import diagnose

    monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_URL", f"http://prom:{PASSWORD}@127.0.0.1:{free_port()}")
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    result = diagnose('Only confirm whether "order-service" has the "HighMemoryUsage" alert', lm=alert_lm(), db=db,
                      compiled=False)
    assert result.verdict != "PASS"
    assert PASSWORD not in result.model_dump_json() and "prom:***@" in result.model_dump_json()
    with sqlite3.connect(tmp_path / "audit.db") as conn:
        rows = conn.execute("select record from diagnosis_sessions union all select output || retrieval_details "
                            "from tool_invocations").fetchall()
    assert rows and not [row for (row,) in rows if PASSWORD in row]


def test_a_token_in_a_urls_query_is_never_stored_or_printed(monkeypatch, capsys, tmp_path):
    from program.entry.api import diagnose

    token = "qs-" + PASSWORD
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_URL", f"http://127.0.0.1:{free_port()}/?access_token={token}")
    result = diagnose('Only confirm whether "order-service" has the "HighMemoryUsage" alert', lm=alert_lm(), db=db,
                      compiled=False)
    assert result.verdict != "PASS" and token not in result.model_dump_json()
    # A flag's URL: the Alertmanager's error line names it, without its signature.
    signed = f"http://127.0.0.1:{free_port()}/?X-Amz-Signature={token}"
    assert cli.main(["--db", db, "investigate", "--alertmanager-url", signed]) == 1
    err = capsys.readouterr().err
    assert "Alertmanager at http://127.0.0.1" in err and token not in err and "X-Amz-Signature=***" in err
    with sqlite3.connect(tmp_path / "audit.db") as conn:
        rows = conn.execute("select record from diagnosis_sessions union all select output || retrieval_details "
                            "from tool_invocations").fetchall()
    assert rows and not [row for (row,) in rows if token in row]
    assert [row for (row,) in rows if "access_token=***" in row]


def test_a_password_in_the_lm_url_is_sent_as_basic_auth_and_stays_out_of_everything_written(monkeypatch, tmp_path,
                                                                                            capsys):
    import base64

    db = f"sqlite:///{tmp_path / 'audit.db'}"
    monkeypatch.setenv("DIAGNOSIS_LM", "openai/qwen")
    question = "只确认 order-service 是否存在 HighMemoryUsage 告警"
    with Loopback({"/v1/chat/completions": answer(500, {"error": {"message": "overloaded"}})}) as lm_server:
        monkeypatch.setenv("DIAGNOSIS_LM_API_BASE", lm_server.url.replace("http://", f"http://lm:{PASSWORD}@") + "/v1")
        assert cli.main(["--db", db, "ask", question, "--json", "--no-compiled"]) == 0
    # One that is not there at all: its connection error names the URL.
    monkeypatch.setenv("DIAGNOSIS_LM_API_BASE", f"http://lm:{PASSWORD}@127.0.0.1:{free_port()}/v1")
    assert cli.main(["--db", db, "ask", question, "--json", "--no-compiled"]) == 1
    printed = capsys.readouterr()
    assert PASSWORD not in printed.out + printed.err and "lm:***@127.0.0.1" in printed.err
    basic = "Basic " + base64.b64encode(f"lm:{PASSWORD}".encode()).decode()
    assert lm_server.seen and all(request["authorization"] == basic for request in lm_server.seen)
    sessions, _ = AuditStore(db, read_only=True).list_sessions()
    assert len(sessions) == 2 and all(s.verdict != "PASS" for s in sessions)
    assert all(e.rule.startswith("lm.") for s in sessions for e in s.errors)
    with sqlite3.connect(tmp_path / "audit.db") as conn:
        rows = conn.execute("select record from diagnosis_sessions union all select output || retrieval_details "
                            "from tool_invocations").fetchall()
    assert rows and not [row for (row,) in rows if PASSWORD in row]


# --- the Host header ----------------------------------------------------------------------------

# The Host, then variants a DNS-rebinding page could send, and what a loopback server is.
REFUSED_HOSTS = ["evil.example:8080", "evil.example", "127.0.0.1.evil.example", "localhost.evil.example:8080",
                 "[::1]:8080", "127.0.0.2", "0.0.0.0:8080", "evil.example:8080@127.0.0.1"]
ACCEPTED_HOSTS = ["127.0.0.1:{port}", "127.0.0.1", "localhost:{port}", "LOCALHOST", "127.0.0.1.:{port}"]


def test_a_token_less_server_answers_only_the_hosts_it_is_bound_as(tmp_path):
    with server(f"sqlite:///{tmp_path / 'audit.db'}", env={"DIAGNOSIS_API_TOKEN": ""}) as api:
        for host in REFUSED_HOSTS:
            for path in ("/v1/sessions", "/sessions/x", "/healthz"):
                got = httpx.get(f"{api.url}{path}", headers={"Host": host})
                assert got.status_code == 421, (host, path, got.status_code)
                assert "DIAGNOSIS_SERVE_HOSTS" in got.json()["detail"]
        for host in ACCEPTED_HOSTS:
            assert httpx.get(f"{api.url}/v1/sessions", headers={"Host": host.format(port=api.port)}).status_code == 200
        # HTTP/1.0 without a Host header names no host at all.
        assert raw_request(api.port, b"GET /v1/sessions HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 421")


def test_the_hosts_the_user_names_are_answered_too(tmp_path):
    env = {"DIAGNOSIS_API_TOKEN": "", "DIAGNOSIS_SERVE_HOSTS": "diagnosis.internal, Ops.Example."}
    with server(f"sqlite:///{tmp_path / 'audit.db'}", env=env) as api:
        for host in ("diagnosis.internal", "ops.example:8080", "OPS.EXAMPLE"):
            assert httpx.get(f"{api.url}/v1/sessions", headers={"Host": host}).status_code == 200, host
        assert httpx.get(f"{api.url}/v1/sessions", headers={"Host": "evil.example"}).status_code == 421


# --- terminal escapes ---------------------------------------------------------------------------

# The body (ESC c resets a terminal), then other controls a terminal obeys: a title set by
# OSC, a screen cleared by CSI and by its one-byte C1 form, a bell, a carriage return that hides
# what came before, a bidirectional override.
ESCAPES = ["oops \x1bc after-reset", "\x1b]0;owned\x07title", "\x1b[2J\x1b[Hcleared", "\x9b2Jc1", "ring\x07",
           "real error\rfake line", "\u202eesrever"]


def on_a_terminal(args: list[str], env: dict[str, str]) -> bytes:
    """What `python -m program <args>` writes to a terminal (a pty), stdout and stderr alike."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "program", *args], cwd=ROOT, env={**os.environ, **env},
                               stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    output = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the other end closed
                break
            if not chunk:
                break
            output += chunk
        elif process.poll() is not None:
            break
    process.wait(timeout=10)
    os.close(leader)
    return output


@pytest.mark.parametrize("body", ESCAPES)
def test_an_error_body_reaches_a_terminal_escaped(body, tmp_path):
    payload = body.encode("utf-8")
    with Loopback({"/api/v2/alerts": answer(500, payload, "text/plain")}) as alertmanager:
        printed = on_a_terminal(["--db", f"sqlite:///{tmp_path / 'audit.db'}", "investigate", "--alertmanager-url",
                                 alertmanager.url], {"TERM": "xterm-256color", "COLUMNS": "200"})
    assert b"refused" in printed and b"alerts" in printed
    for control in ("\x1bc", "\x1b]", "\x1b[2J", "\x9b", "\x07", "\u202e"):
        assert control.encode("utf-8") not in printed, control
    # Every control is shown as its escape; a carriage return too (a pty shows a newline as \r\n).
    shown = printed.decode("utf-8")
    assert ("\\x1b" in shown or "\\x9b" in shown or "\\x07" in shown or "\\x0d" in shown or "\\u202e" in shown)
    assert "\rfake line" not in shown


def test_json_output_keeps_every_character_as_a_json_escape(tmp_path, store):
    from program.entry.terminal import printable_json

    text = json.dumps({"line": "\x1bc \x9b2J \u202e \u2028"})
    shown = printable_json(text)
    assert json.loads(shown) == json.loads(text) and not any(ch in shown for ch in "\x1b\x9b\u202e\u2028")


# --- slow clients -------------------------------------------------------------------------------


def closed_after(conn: socket.socket, limit: float) -> float:
    """Seconds until the server closed `conn`, reading whatever it sends; fails past `limit`."""
    started = time.monotonic()
    conn.settimeout(limit)
    try:
        while conn.recv(65536):
            pass
    except TimeoutError:
        pytest.fail(f"the server still held the connection after {limit} s")
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def test_a_client_that_stops_mid_request_line_or_stays_idle_is_disconnected(tmp_path):
    with server(f"sqlite:///{tmp_path / 'audit.db'}") as api:
        half = socket.create_connection(("127.0.0.1", api.port))
        half.sendall(b"GET /v1/sess")  # the issue's: half a request line, then nothing
        headers = socket.create_connection(("127.0.0.1", api.port))
        headers.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1")  # headers never ended
        silent = socket.create_connection(("127.0.0.1", api.port))  # connects, sends nothing
        idle = socket.create_connection(("127.0.0.1", api.port))
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # then keeps the connection
        again = socket.create_connection(("127.0.0.1", api.port))
        again.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        time.sleep(1)
        again.sendall(b"GET /heal")  # a second request begun on a kept-alive connection
        for conn, most in ((half, REQUEST_TIMEOUT + 3), (headers, REQUEST_TIMEOUT + 3), (silent, REQUEST_TIMEOUT + 3),
                           (idle, KEEP_ALIVE_TIMEOUT + 3), (again, REQUEST_TIMEOUT + 3)):
            with conn:
                closed_after(conn, most)
        # A client that sends its request whole is answered as before.
        assert httpx.get(f"{api.url}/healthz").status_code == 200


def test_a_body_that_stalls_or_drips_is_cut_at_the_request_deadline_and_a_whole_one_is_answered(tmp_path):
    import threading

    head = (b"POST /v1/alertmanager HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 4000\r\n\r\n")
    with server(f"sqlite:///{tmp_path / 'audit.db'}") as api:
        stalled = socket.create_connection(("127.0.0.1", api.port))
        stalled.sendall(head + b'{"alerts": [')  # the issue's: a body begun, then nothing
        dripping = socket.create_connection(("127.0.0.1", api.port))
        dripping.sendall(head)
        stop = threading.Event()

        def drip():
            # A byte a second: 4,000 s for the body, each byte well inside any idle timeout.
            while not stop.wait(1.0):
                try:
                    dripping.sendall(b" ")
                except OSError:
                    return

        sender = threading.Thread(target=drip, daemon=True)
        sender.start()
        try:
            for conn in (stalled, dripping):
                assert closed_after(conn, REQUEST_TIMEOUT + 3) <= REQUEST_TIMEOUT + 3
        finally:
            stop.set()
            sender.join(timeout=5)
            stalled.close()
            dripping.close()
        # A body sent whole, in pieces, is read and answered.
        whole = json.dumps(webhook(firing())).encode()
        with socket.create_connection(("127.0.0.1", api.port), timeout=10) as conn:
            conn.sendall(head.replace(b"4000", str(len(whole)).encode()))
            for start in range(0, len(whole), 64):
                conn.sendall(whole[start:start + 64])
                time.sleep(0.01)
            assert conn.recv(65536).startswith(b"HTTP/1.1 202")


def test_beyond_the_connection_limit_a_request_is_answered_503(tmp_path):
    with server(f"sqlite:///{tmp_path / 'audit.db'}") as api:
        held = [socket.create_connection(("127.0.0.1", api.port)) for _ in range(MAX_CONNECTIONS)]
        try:
            for conn in held:
                conn.sendall(b"GET /heal")
            time.sleep(0.5)
            assert raw_request(api.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").startswith(
                b"HTTP/1.1 503")
        finally:
            for conn in held:
                conn.close()
        deadline = time.monotonic() + 10
        while httpx.get(f"{api.url}/healthz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert httpx.get(f"{api.url}/healthz").status_code == 200


# --- token settings -----------------------------------------------------------------------------

# The two, then others no Authorization header carries as they are.
UNUSABLE_TOKENS = ["   ", "s3cret-token\n", " s3cret-token", "s3cret token", "tökén", "s3cret\ttoken", "=abc", "\r\n"]


@pytest.mark.parametrize("token", UNUSABLE_TOKENS)
def test_a_token_no_client_can_send_stops_serve_before_it_binds(token, tmp_path):
    port = free_port()
    env = {**os.environ, "DIAGNOSIS_API_TOKEN": token, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "tests.support.serve_process", "--db",
                                f"sqlite:///{tmp_path / 'audit.db'}", "serve", "--port", str(port)],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail("serve started with a token no client can send")
    assert process.returncode == 2 and "DIAGNOSIS_API_TOKEN" in err and "Traceback" not in err


def test_a_token_a_header_carries_is_taken(monkeypatch):
    from program.entry.server import ServeSettings

    for token in ("s3cret-token", "abc.DEF_123~+/==", "x"):
        monkeypatch.setenv("DIAGNOSIS_API_TOKEN", token)
        assert ServeSettings.from_env().token == token


# --- a record that cannot be read ---------------------------------------------------------------

# The (a record that is not JSON), then others: JSON that is not a session, a session of
# another version, a JSON null.
BROKEN_RECORDS = ["{oops", '{"x": 1}', '{"session_id": "s", "query": "q", "status": 7}', "null"]


@pytest.mark.parametrize("broken", BROKEN_RECORDS)
def test_an_unreadable_record_is_named_by_id_and_the_store_stays_usable(broken, tmp_path):
    path = tmp_path / "audit.db"
    db = f"sqlite:///{path}"
    with server(db) as api:
        accepted = httpx.post(f"{api.url}/v1/alertmanager", json=webhook(firing(minute=1), firing(minute=2))).json()
        first, second = (a["session_id"] for a in accepted["accepted"])
        deadline = time.monotonic() + 30
        while any(s["status"] in ("pending", "claimed", "running")
                  for s in httpx.get(f"{api.url}/v1/sessions").json()["sessions"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        with sqlite3.connect(path) as conn:
            conn.execute("update diagnosis_sessions set record = ? where session_id = ?", (broken, first))
        listed = httpx.get(f"{api.url}/v1/sessions").json()
        assert [s["session_id"] for s in listed["sessions"]] == [second]
        assert [u["session_id"] for u in listed["unreadable"]] == [first]
        detail = httpx.get(f"{api.url}/v1/sessions/{first}")
        page = httpx.get(f"{api.url}/sessions/{first}")
        assert 400 <= detail.status_code < 500 and first in detail.json()["detail"]
        assert 400 <= page.status_code < 500 and "The session cannot be read" in page.text
        # The store answers everything else, and takes new work.
        assert httpx.get(f"{api.url}/v1/sessions/{second}").status_code == 200
        more = httpx.post(f"{api.url}/v1/alertmanager", json=webhook(firing(minute=3)))
        assert more.status_code == 202
    # A store opening it again (marking dead processes' runs) is not stopped by it.
    assert AuditStore(db).get_session(second).session_id == second


# --- a full disk --------------------------------------------------------------------------------


def test_a_run_whose_record_could_not_be_written_is_failed_once_the_store_can_write(tmp_path):
    from devset import load_cases
    from program.entry.api import diagnose
    from program.store.errors import AuditStoreError
    from tests.support.good_lm import good_lm, pass_all

    path = tmp_path / "audit.db"
    store = AuditStore(f"sqlite:///{path}")
    limit = {"pages": None}

    @event.listens_for(store.engine, "connect")
    def _limited(conn, _):
        if limit["pages"]:
            conn.execute(f"PRAGMA max_page_count = {limit['pages']}")

    def fill_the_disk(user):
        # SQLite's own "database or disk is full" from here on: the file may not grow by a page.
        with sqlite3.connect(path) as conn:
            limit["pages"] = conn.execute("PRAGMA page_count").fetchone()[0]
        store.engine.dispose()
        return pass_all(user)

    case = next(c for c in load_cases() if c["case_id"] == "high_memory_positive")
    with pytest.raises(AuditStoreError, match="database or disk is full"):
        diagnose(case["question"], lm=good_lm(case, verifier=fill_the_disk), db=store, compiled=False)
    (left,), _ = AuditStore(store.url, read_only=True).list_sessions()
    assert left.status == "running"
    limit["pages"] = None
    store.engine.dispose()
    # The next open of the store, in the process that ran it, ends it.
    record = AuditStore(store.url).get_session(left.session_id)
    assert record.status == "failed"
    (finding,) = [e for e in record.errors if e.rule == WRITE_FAILED]
    assert "database or disk is full" in finding.message


# An `ask` whose disk fills while its verifier runs (SQLite's own "database or disk is full": from
# then on the file may not grow by a page), in its own process, which exits.
FULL_DISK_ASK = """
import sqlite3
import sys

from sqlalchemy import event

import program.entry.api
from devset import load_cases
from program.entry import cli
from program.store.audit import AuditStore
from tests.support.good_lm import good_lm, pass_all

path, stores, limit = sys.argv[1], [], {"pages": None}


def limited(conn, _):
    if limit["pages"]:
        conn.execute(f"PRAGMA max_page_count = {limit['pages']}")


def opened(self, *args, **kwargs):
    plain(self, *args, **kwargs)
    event.listen(self.engine, "connect", limited)
    stores.append(self)


def fill_the_disk(user):
    with sqlite3.connect(path) as conn:
        limit["pages"] = conn.execute("PRAGMA page_count").fetchone()[0]
    for store in stores:
        store.engine.dispose()
    return pass_all(user)


plain, AuditStore.__init__ = AuditStore.__init__, opened
case = next(c for c in load_cases() if c["case_id"] == "high_memory_positive")
program.entry.api.resolve_lm = lambda spec: good_lm(case, verifier=fill_the_disk)
sys.exit(cli.main(["--db", f"sqlite:///{path}", "ask", case["question"], "--no-compiled"]))
"""


def test_an_ask_that_failed_on_a_full_disk_and_exited_is_failed_with_its_reason_at_the_next_open(tmp_path):
    path = tmp_path / "audit.db"
    done = subprocess.run([sys.executable, "-c", FULL_DISK_ASK, str(path)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 1 and "database or disk is full" in done.stderr, done.stderr
    (left,), _ = AuditStore(f"sqlite:///{path}", read_only=True).list_sessions()
    assert left.status == "running"
    # The process is gone, and what it knew of the failure with it: the next open reads its note.
    record = AuditStore(f"sqlite:///{path}").get_session(left.session_id)
    assert record.status == "failed"
    (finding,) = [e for e in record.errors if e.rule == WRITE_FAILED]
    assert "database or disk is full" in finding.message
    assert not [e for e in record.errors if e.rule == "pipeline.interrupted"]
    assert list((tmp_path / "audit.db.unsaved").iterdir()) == []


def test_a_server_marks_its_unwritten_run_failed_at_its_next_save(tmp_path):
    from contracts.record import DiagnosisSession
    from program.store.errors import AuditStoreError
    from program.store.processes import this_process

    path = tmp_path / "audit.db"
    store = AuditStore(f"sqlite:///{path}")
    store.save_session(DiagnosisSession(session_id="run-1", query="q", process=this_process()))
    full = {"on": True}

    @event.listens_for(store.engine, "connect")
    def _limited(conn, _):
        if full["on"]:
            conn.execute("PRAGMA max_page_count = 1")

    store.engine.dispose()
    with pytest.raises(AuditStoreError):
        store.save_session(DiagnosisSession(session_id="run-1", query="q" * 20000, process=this_process(),
                                            status="completed"))
    full["on"] = False
    store.engine.dispose()
    store.save_session(DiagnosisSession(session_id="run-2", query="q", process=this_process()))
    assert store.get_session("run-1").status == "failed"
    assert Path(path).exists()


# --- a page in a browser ------------------------------------------------------------------------


def test_a_cross_origin_page_can_neither_post_json_without_a_preflight_nor_be_granted_one(tmp_path):
    """What a browser lets a page on another origin send without asking first is a "simple" request:
    a body of text/plain, a form or multipart. Every route with a body refuses those; the preflight a
    JSON body needs is never granted (no CORS headers), so a browser would not send it."""
    body = json.dumps(webhook(firing()))
    with server(f"sqlite:///{tmp_path / 'audit.db'}") as api:
        for path, sent in (("/v1/alertmanager", body), ("/v1/diagnose", json.dumps({"question": "q"}))):
            for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
                got = httpx.post(f"{api.url}{path}", content=sent,
                                 headers={"Content-Type": content_type, "Origin": "https://evil.example"})
                assert got.status_code == 422 and "access-control-allow-origin" not in got.headers, (path, content_type)
            preflight = httpx.options(f"{api.url}{path}", headers={"Origin": "https://evil.example",
                                                                  "Access-Control-Request-Method": "POST",
                                                                  "Access-Control-Request-Headers": "content-type"})
            assert "access-control-allow-origin" not in preflight.headers
        listed = httpx.get(f"{api.url}/v1/sessions", headers={"Origin": "https://evil.example"})
        assert listed.status_code == 200 and "access-control-allow-origin" not in listed.headers
        assert listed.json()["sessions"] == []

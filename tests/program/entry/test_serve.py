"""The HTTP API in process (FastAPI's TestClient) with the scripted alert LM: its token, its limits,
its answers to bad requests, the webhook's queue, the diagnoses it runs and the records it serves.
Without `with TestClient(app)` the app's workers do not start, so what is queued stays queued."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from program.entry import cli
from program.entry.alerts import WebhookAlert, queued_session
from program.entry.server import ServeSettings, create_app
from contracts.record import DiagnosisResult
from tests.support.alert_lm import alert_lm, answer
from tests.support.scripted import scripted_lm
from tests.support.webhooks import firing, webhook

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
QUESTION = '只确认 "order-service" 是否存在 "HighMemoryUsage" 告警'


def settings(**changes) -> ServeSettings:
    return ServeSettings(**{"queue": 10, "concurrency": 2, "max_body": 100_000, "token": None, **changes})


@pytest.fixture
def app(store):
    return create_app(store, alert_lm(), settings())


@pytest.fixture
def client(app):
    return TestClient(app)


def wait_until_done(client: TestClient, session_id: str, headers=None, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = client.get(f"/v1/sessions/{session_id}", headers=headers).json()["session"]
        if record["status"] not in ("pending", "claimed", "running"):
            return record
        time.sleep(0.05)
    raise AssertionError(f"{session_id} still {record['status']} after {timeout} s")


def test_every_route_but_healthz_needs_the_token_when_one_is_set(store):
    client = TestClient(create_app(store, alert_lm(), settings(token=TOKEN)))
    assert client.get("/healthz").json() == {"status": "ok"}
    routes = [("get", "/v1/sessions"), ("get", "/v1/sessions/x"), ("get", "/metrics"), ("get", "/sessions/x"),
              ("post", "/v1/diagnose"), ("post", "/v1/alertmanager")]
    for method, path in routes:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            refused = client.request(method, path, headers=headers, json={})
            assert refused.status_code == 401, (path, headers)
            assert refused.headers["WWW-Authenticate"] == "Bearer" and "bearer token" in refused.json()["detail"]
        assert client.request(method, path, headers=AUTH, json={}).status_code != 401
    assert client.get("/v1/sessions", headers=AUTH).status_code == 200


def test_a_body_over_the_limit_is_refused_whether_it_says_its_length_or_not(store):
    client = TestClient(create_app(store, alert_lm(), settings(max_body=1000)))
    big = webhook(*[firing(minute=n % 60, note="x" * 50) for n in range(20)])
    refused = client.post("/v1/alertmanager", json=big)
    assert refused.status_code == 413 and "over 1000 bytes" in refused.json()["detail"]
    chunks = (b'{"version": "4", "status": "firing", "alerts": [' + b" " * 400 for _ in range(3))
    streamed = client.post("/v1/alertmanager", content=chunks, headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413 and "DIAGNOSIS_SERVE_MAX_BODY" in streamed.json()["detail"]
    assert store.count_queued() == 0


@pytest.mark.parametrize(("path", "body", "message"), [
    ("/v1/alertmanager", b"{not json", "the body is not JSON (Expecting property name enclosed in double quotes at"),
    ("/v1/alertmanager", {"version": "3", "status": "firing", "alerts": []}, "body.version: Input should be '4'"),
    ("/v1/alertmanager", {"version": "4", "status": "firing"}, "body.alerts: Field required"),
    ("/v1/alertmanager", webhook(*[firing(minute=1)] * 201), "body.alerts: List should have at most 200 items"),
    ("/v1/alertmanager", webhook({**firing(), "startsAt": "soon"}), "body.alerts[0].startsAt: Input should be"),
    ("/v1/alertmanager", webhook(firing(service="s" * 4001)),
     "body.alerts[0].labels.service: String should have at most"),
    ("/v1/alertmanager", webhook(firing(service="")), "has no service label"),
    ("/v1/diagnose", {"question": ""}, "body.question: String should have at least 1 character"),
    ("/v1/diagnose", {"question": "q", "language": "fr"}, "body.language: Input should be 'zh', 'en' or 'auto'"),
])
def test_a_bad_request_is_a_4xx_that_says_what_is_wrong(client, store, path, body, message):
    answer = (client.post(path, content=body, headers={"Content-Type": "application/json"})
              if isinstance(body, bytes) else client.post(path, json=body))
    assert 400 <= answer.status_code < 500 and message in answer.json()["detail"], answer.text
    assert store.count_queued() == 0 and store.list_sessions()[0] == []


def test_a_listing_limit_out_of_range_and_an_unknown_session_are_4xx(client):
    assert "limit: Input should be greater than or equal to 1" in client.get("/v1/sessions?limit=0").json()["detail"]
    unknown = client.get("/v1/sessions/nope")
    assert unknown.status_code == 404 and unknown.json() == {"detail": "unknown session 'nope'"}


def test_firing_alerts_are_queued_before_the_answer_and_a_second_delivery_adds_nothing(client, store):
    first = client.post("/v1/alertmanager", json=webhook(firing(), firing("HighCPUUsage", "payment-service")))
    assert first.status_code == 202
    accepted = first.json()["accepted"]
    assert [(a["alertname"], a["queued"]) for a in accepted] == [("HighMemoryUsage", True), ("HighCPUUsage", True)]
    for alert in accepted:
        record = store.get_session(alert["session_id"])
        assert record.status == "pending" and record.notes[0].message.startswith("alertmanager webhook:")
    again = client.post("/v1/alertmanager", json=webhook(firing()))
    assert again.status_code == 202 and again.json()["accepted"] == [{**accepted[0], "queued": False}]
    assert store.count_queued() == 2


def test_a_resolved_notification_records_nothing_new(client, store):
    client.post("/v1/alertmanager", json=webhook(firing()))
    resolved = client.post("/v1/alertmanager", json=webhook({**firing(), "status": "resolved"}, status="resolved"))
    assert resolved.status_code == 202 and resolved.json() == {"accepted": [], "refused": [], "resolved": 1}
    (only,), _ = store.list_sessions()
    assert only.status == "pending" and store.count_queued() == 1


def test_an_alert_without_the_service_label_is_refused_by_name_beside_the_accepted_ones(client, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_SERVICE_LABEL", "app")
    mixed = client.post("/v1/alertmanager", json=webhook(firing(minute=1, app="order-service"), firing(minute=2)))
    body = mixed.json()
    assert mixed.status_code == 202 and len(body["accepted"]) == 1
    (refused,) = body["refused"]
    assert "has no app label (DIAGNOSIS_PROMETHEUS_SERVICE_LABEL)" in refused["reason"]


def test_a_full_queue_answers_503_with_retry_after_and_records_nothing_more(store):
    client = TestClient(create_app(store, alert_lm(), settings(queue=2)))
    assert client.post("/v1/alertmanager", json=webhook(firing(minute=1), firing(minute=2))).status_code == 202
    for path, body in (("/v1/alertmanager", webhook(firing(minute=3))), ("/v1/diagnose", {"question": QUESTION})):
        full = client.post(path, json=body)
        assert full.status_code == 503 and int(full.headers["Retry-After"]) >= 1
        assert "the diagnosis queue is full (2 of 2 waiting)" in full.json()["detail"]
    # A delivery of what is queued already is no new work: accepted, not refused.
    assert client.post("/v1/alertmanager", json=webhook(firing(minute=1))).status_code == 202
    assert store.count_queued() == 2 and len(store.list_sessions()[0]) == 2
    assert "diagnosis_refused_requests_total 2.0" in client.get("/metrics").text


def test_queued_alerts_are_diagnosed_in_the_background_and_served_with_their_metrics(app, store):
    # Queued before the server started, as by a server that was restarted: resumed when it starts.
    earlier = queued_session(WebhookAlert.model_validate(firing(minute=9)), "accepted before a restart", "zh")
    store.enqueue(earlier)
    with TestClient(app) as client:
        accepted = client.post("/v1/alertmanager", json=webhook(firing("HighCPUUsage", "payment-service")))
        ids = [earlier.session_id, accepted.json()["accepted"][0]["session_id"]]
        records = [wait_until_done(client, session_id) for session_id in ids]
        assert [(r["status"], r["verdict"]) for r in records] == [("completed", "PASS")] * 2
        detail = client.get(f"/v1/sessions/{ids[0]}").json()
        assert detail["session"]["notes"][0]["message"].startswith("accepted before a restart:")
        assert [inv["tool_name"] for inv in detail["invocations"]] == ["query_metrics"]
        listed = client.get("/v1/sessions").json()
        assert {s["session_id"] for s in listed["sessions"]} == set(ids) and listed["unreadable"] == []
        metrics = client.get("/metrics").text
    assert 'diagnosis_diagnoses_total{verdict="PASS"} 2.0' in metrics
    assert "diagnosis_lm_calls_total 6.0" in metrics and "diagnosis_duration_seconds_count 2.0" in metrics
    assert "diagnosis_queue_length 0.0" in metrics


def test_a_question_is_answered_with_the_diagnosis_result(client, store):
    answer = client.post("/v1/diagnose", json={"question": QUESTION, "language": "en"})
    result = DiagnosisResult.model_validate(answer.json())
    assert (result.verdict, result.language) == ("PASS", "en")
    assert store.get_session(result.session_id).status == "completed"


def test_diagnoses_run_at_once_up_to_the_setting_and_one_at_a_time_on_the_embedded_model(store):
    running, most, lock = [0], [0], threading.Lock()

    def respond(stage, user, demos):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.15)
        with lock:
            running[0] -= 1
        return answer(stage, user)

    app = create_app(store, scripted_lm(respond), settings(concurrency=3))
    with TestClient(app) as client:
        accepted = client.post("/v1/alertmanager", json=webhook(*[firing(minute=n) for n in range(6)])).json()
        for alert in accepted["accepted"]:
            wait_until_done(client, alert["session_id"])
    assert most[0] == 3
    embedded = create_app(store, SimpleNamespace(model="embedded/qwen2.5-coder-1.5b"), settings(concurrency=3))
    assert embedded.state.workers.concurrency == 1


def test_settings_that_cannot_be_used_stop_serve_before_it_binds(monkeypatch, capsys, tmp_path):
    for name, value in (("DIAGNOSIS_SERVE_QUEUE", "0"), ("DIAGNOSIS_SERVE_MAX_BODY", "1MB"),
                        ("DIAGNOSIS_SERVE_CONCURRENCY", "²"), ("DIAGNOSIS_SERVE_QUEUE", "9" * 5000),
                        ("DIAGNOSIS_LANGUAGE", "fr")):
        monkeypatch.setenv(name, value)
        assert cli.main(["--db", f"sqlite:///{tmp_path / 'audit.db'}", "serve"]) == 2
        err = capsys.readouterr().err
        assert name in err and "Traceback" not in err
        monkeypatch.delenv(name)
    with pytest.raises(SystemExit) as usage:
        cli.main(["serve", "--port", "70000"])
    assert usage.value.code == 2 and "a port is at most 65535" in capsys.readouterr().err


def test_questions_waiting_for_the_model_never_hold_the_threads_of_the_other_routes(store):
    release = threading.Event()

    def respond(stage, user, demos):
        release.wait(30)
        return answer(stage, user)

    # More waiting questions than Starlette's thread pool (40) has threads, one slot: before, every
    # other route timed out behind them.
    app = create_app(store, scripted_lm(respond), settings(queue=60, concurrency=1))
    with TestClient(app) as client:
        answers: list[int] = []
        askers = [threading.Thread(target=lambda: answers.append(
            client.post("/v1/diagnose", json={"question": QUESTION}).status_code)) for _ in range(50)]
        for asker in askers:
            asker.start()
        deadline = time.monotonic() + 10
        while app.state.workers.queue_length() < 49 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert app.state.workers.queue_length() >= 49
        others: list[int] = []
        probe = threading.Thread(target=lambda: others.extend(
            [client.get("/healthz").status_code,
             client.post("/v1/alertmanager", json=webhook(firing(minute=7))).status_code]), daemon=True)
        probe.start()
        probe.join(5)
        release.set()
        assert others == [200, 202]
        for asker in askers:
            asker.join(60)
    assert answers.count(200) == 50


def test_a_queued_session_whose_run_raises_is_recorded_failed_and_leaves_the_queue(store, monkeypatch):
    from program.entry import workers

    def broken(*args, **kwargs):
        raise RuntimeError("the store went away mid-run")

    monkeypatch.setattr(workers, "diagnose", broken)
    app = create_app(store, alert_lm(), settings())
    with TestClient(app) as client:
        accepted = client.post("/v1/alertmanager", json=webhook(firing(minute=5))).json()
        record = wait_until_done(client, accepted["accepted"][0]["session_id"])
    assert record["status"] == "failed" and store.count_queued() == 0
    assert record["errors"][-1]["rule"] == "serve.run_failed" and "went away mid-run" in record["errors"][-1]["message"]

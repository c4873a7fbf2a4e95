"""`python -m program serve`: the HTTP API (FastAPI on uvicorn).

| route | what |
| --- | --- |
| `POST /v1/diagnose` | `{question, language?}` -> the DiagnosisResult, once the diagnosis ran |
| `POST /v1/alertmanager` | Alertmanager's webhook (version 4) -> 202 with a session id per firing alert |
| `GET /v1/sessions`, `GET /v1/sessions/{id}` | the audit records (and a session's tool calls) as JSON |
| `GET /sessions/{id}` | the audit page (program/entry/page.py) |
| `GET /healthz`, `GET /metrics` | liveness; Prometheus metrics |

Safe by default: it binds 127.0.0.1 and answers only requests whose Host header is a name it is bound
as (127.0.0.1 and localhost there), or one DIAGNOSIS_SERVE_HOSTS names, so a page that rebinds a DNS
name to this machine reads nothing; DIAGNOSIS_API_TOKEN, when set, is the bearer token of every
route but /healthz; a body over DIAGNOSIS_SERVE_MAX_BODY bytes is refused (413) before it is read
whole; a body that is not the route's model is a 422 naming the first wrong part. A full queue
answers 503 with Retry-After. A client has REQUEST_TIMEOUT seconds (guards.py) to send each request
whole (its line, headers and body) and KEEP_ALIVE_TIMEOUT idle seconds between requests, and at most MAX_CONNECTIONS
connections are served at once (beyond them, 503). Settings that cannot be used (a token that no
header can carry, a number that is not one) stop the server before it binds.
"""

from __future__ import annotations

import asyncio
import copy
import re
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import anyio
import dspy
from fastapi import APIRouter, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, Field

from program.entry import page
from program.entry.guards import (
    HOSTS,
    KEEP_ALIVE_TIMEOUT,
    MAX_CONNECTIONS,
    TOKEN,
    BearerToken,
    BodyLimit,
    RequestDeadline,
    HostCheck,
    HostNames,
    accepted_hosts,
    bearer_token,
)
from program.entry.terminal import PrintableRecords
from program.entry.alerts import AlertError, WebhookPayload, alert_language, alert_name, queued_session
from program.store.audit import AuditStore
from program.store.errors import AuditStoreError, UnreadableRecord
from program.entry.workers import QueueFull, Workers
from program.lm.engine import is_embedded
from contracts import MAX_TEXT_CHARS, Language, ToolInvocation
from contracts.record import DiagnosisResult, DiagnosisSession
from tools.sources.http import first_problem
from contracts.settings import current, value_or_default

# The whole numbers the server reads; their defaults are contracts/settings.py's.
COUNTS = ("DIAGNOSIS_SERVE_QUEUE", "DIAGNOSIS_SERVE_CONCURRENCY", "DIAGNOSIS_SERVE_MAX_BODY")
SETTINGS = (TOKEN, HOSTS, *COUNTS)
MAX_LISTED = 1000
# A session whose stored record this version cannot read: the request is fine and so is the store.
UNREADABLE_STATUS = 422
# Threads beyond the queue's and the workers' for questions that are only to be refused.
SPARE_THREADS = 8


@dataclass(frozen=True)
class ServeSettings:
    queue: int
    concurrency: int
    max_body: int
    token: str | None
    # zh, en or auto, the answer's language (code's sentences and the LM stages'); None: DIAGNOSIS_LANGUAGE.
    language: str | None = None
    # The Host header values answered (see `accepted_hosts`); None: any (an app built in a test).
    hosts: HostNames | None = None

    @classmethod
    def from_env(cls, language: str | None = None, host: str = "127.0.0.1") -> ServeSettings:
        """The settings of a server bound to `host`; ValueError naming the setting when one cannot be used."""
        alert_language(language)
        values = {}
        for name in COUNTS:
            raw = value_or_default(name)
            if not re.fullmatch(r"[0-9]{1,12}", raw) or int(raw) < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {raw[:40]!r}")
            values[name] = int(raw)
        return cls(queue=values["DIAGNOSIS_SERVE_QUEUE"], concurrency=values["DIAGNOSIS_SERVE_CONCURRENCY"],
                   max_body=values["DIAGNOSIS_SERVE_MAX_BODY"], token=bearer_token(current().api_token),
                   language=language, hosts=accepted_hosts(host, current().serve_hosts or ""))


class DiagnoseRequest(BaseModel):
    question: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    language: Literal["zh", "en", "auto"] | None = None


class AcceptedAlert(BaseModel):
    session_id: str
    alertname: str
    # False: the same firing of this alert was accepted before, and this delivery added nothing.
    queued: bool


class RefusedAlert(BaseModel):
    alertname: str
    reason: str


class WebhookAnswer(BaseModel):
    accepted: list[AcceptedAlert]
    refused: list[RefusedAlert] = []
    resolved: int = 0


class SessionSummary(BaseModel):
    session_id: str
    status: str
    verdict: str | None
    query: str
    created_at: datetime | None


class UnreadableSession(BaseModel):
    session_id: str
    reason: str


class SessionList(BaseModel):
    sessions: list[SessionSummary]
    # Rows whose stored record this version cannot read, each by its id.
    unreadable: list[UnreadableSession] = []


class SessionDetail(BaseModel):
    session: DiagnosisSession
    invocations: list[ToolInvocation]


class Metrics:
    def __init__(self, queue_length):
        self.registry = CollectorRegistry()
        self.diagnoses = Counter("diagnosis_diagnoses", "Diagnoses run by this server, by verdict", ["verdict"],
                                 registry=self.registry)
        self.seconds = Histogram("diagnosis_duration_seconds", "How long a diagnosis took",
                                 buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600), registry=self.registry)
        self.lm_calls = Counter("diagnosis_lm_calls", "LM calls of the diagnoses run by this server",
                                registry=self.registry)
        self.refused = Counter("diagnosis_refused_requests", "Requests refused because the queue was full",
                               registry=self.registry)
        Gauge("diagnosis_queue_length", "Sessions queued and not yet running, and questions waiting for a slot",
              registry=self.registry).set_function(queue_length)

    def observe(self, result: DiagnosisResult, seconds: float) -> None:
        self.diagnoses.labels(verdict=result.verdict).inc()
        self.seconds.observe(seconds)
        self.lm_calls.inc(sum(usage.lm_calls for usage in result.usage.values()))


def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, QueueFull):
        request.app.state.metrics.refused.inc()
        return JSONResponse({"detail": str(exc)}, 503, headers={"Retry-After": str(exc.retry_after)})
    return JSONResponse({"detail": f"the audit store cannot be used: {exc}"}, 503)


def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0]
    if first["type"] == "json_invalid":
        # Its place is a character offset, not a field.
        error = first.get("ctx", {}).get("error", "")
        return JSONResponse({"detail": f"bad request: the body is not JSON ({error} at character {first['loc'][-1]})"},
                            422)
    return JSONResponse({"detail": f"bad request: {first_problem(exc.errors(), '')}"}, 422)


def create_app(store: AuditStore, lm: dspy.BaseLM, settings: ServeSettings) -> FastAPI:
    """The app; its workers start and stop with it. `app.state.store` is the audit store the routes read."""
    concurrency = 1 if is_embedded(lm) else settings.concurrency
    workers = Workers(store, lm, concurrency=concurrency, limit=settings.queue)
    metrics = Metrics(workers.queue_length)
    workers.observe = metrics.observe

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        workers.start()
        yield
        await asyncio.to_thread(workers.stop)

    app = FastAPI(title="Grounded Diagnosis", lifespan=lifespan)
    app.state.store, app.state.workers, app.state.metrics, app.state.settings = store, workers, metrics, settings
    app.add_middleware(BodyLimit, limit=settings.max_body)
    if settings.token is not None:
        app.add_middleware(BearerToken, token=settings.token)
    if settings.hosts is not None:
        app.add_middleware(HostCheck, hosts=settings.hosts)
    app.add_exception_handler(QueueFull, _unavailable)
    app.add_exception_handler(AuditStoreError, _unavailable)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.include_router(_routes())
    app.include_router(page.router)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def _waiting_room(app: FastAPI) -> anyio.CapacityLimiter:
    """Enough threads for every question the queue admits and every diagnosis running, and some to
    spare, so that a question beyond the limit reaches its 503 at once instead of waiting for a thread."""
    if getattr(app.state, "waiting_room", None) is None:
        settings = app.state.settings
        app.state.waiting_room = anyio.CapacityLimiter(settings.queue + settings.concurrency + SPARE_THREADS)
    return app.state.waiting_room


def _routes() -> APIRouter:
    router = APIRouter()

    @router.post("/v1/diagnose")
    async def diagnose_question(body: DiagnoseRequest, request: Request) -> DiagnosisResult:
        app = request.app
        try:
            # Threads of its own: questions waiting for the model must never hold the threads that
            # every other route (the webhook, /healthz) runs on.
            return await anyio.to_thread.run_sync(app.state.workers.diagnose_now, body.question,
                                                  body.language or app.state.settings.language,
                                                  limiter=_waiting_room(app))
        except ValueError as exc:
            raise HTTPException(422, f"bad request: {exc}") from None

    @router.post("/v1/alertmanager", status_code=202)
    def alertmanager(payload: WebhookPayload, request: Request) -> WebhookAnswer:
        return _accept(payload, request.app.state.workers, alert_language(request.app.state.settings.language))

    @router.get("/v1/sessions")
    def sessions(request: Request, limit: int = Query(20, ge=1, le=MAX_LISTED)) -> SessionList:
        good, bad = request.app.state.store.list_sessions(limit=limit)
        return SessionList(sessions=[SessionSummary(**r.model_dump(include=set(SessionSummary.model_fields)))
                                     for r in good],
                           unreadable=[UnreadableSession(session_id=b.session_id, reason=str(b)) for b in bad])

    @router.get("/v1/sessions/{session_id}")
    def session(session_id: str, request: Request) -> SessionDetail:
        store = request.app.state.store
        try:
            record = store.get_session(session_id)
        except UnreadableRecord as exc:
            # This one record, not the store: the store answers every other request.
            raise HTTPException(UNREADABLE_STATUS, str(exc)) from None
        if record is None:
            raise HTTPException(404, f"unknown session {session_id[:80]!r}")
        return SessionDetail(session=record, invocations=store.list_invocations(session_id))

    @router.get("/metrics")
    def prometheus_metrics(request: Request) -> Response:
        return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return router


def _accept(payload: WebhookPayload, workers: Workers, language: Language) -> WebhookAnswer:
    """Every firing alert that can be diagnosed is queued (or was, by an earlier delivery); a resolved
    one records nothing. An alert without the service label is refused with the reason."""
    records, refused = [], []
    for alert in payload.alerts:
        if alert.status != "firing":
            continue
        try:
            records.append((alert, queued_session(alert, "alertmanager webhook", language)))
        except AlertError as exc:
            refused.append(RefusedAlert(alertname=alert_name(alert), reason=str(exc)))
    if refused and not records:
        raise HTTPException(422, "; ".join(r.reason for r in refused[:3]))
    queued = workers.accept([record for _, record in records])
    accepted = [AcceptedAlert(session_id=r.session_id, alertname=alert_name(a), queued=r.session_id in queued)
                for a, r in records]
    resolved = sum(alert.status == "resolved" for alert in payload.alerts)
    return WebhookAnswer(accepted=accepted, refused=refused, resolved=resolved)


def serve(store: AuditStore, lm: dspy.BaseLM, settings: ServeSettings, host: str, port: int) -> None:
    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    # The workers' lines (what ran, what failed) beside uvicorn's own, in its format; every line
    # printable (program.entry.terminal): a request or an error may carry terminal controls.
    logging = copy.deepcopy(LOGGING_CONFIG)
    logging["loggers"]["program.entry"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    logging["filters"] = {"printable": {"()": PrintableRecords}}
    for handler in logging["handlers"].values():
        handler["filters"] = ["printable"]
    uvicorn.run(create_app(store, lm, settings), host=host, port=port, log_config=logging, http=RequestDeadline,
                timeout_keep_alive=KEEP_ALIVE_TIMEOUT, limit_concurrency=MAX_CONNECTIONS)


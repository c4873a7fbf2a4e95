"""`python -m program serve`: the HTTP API (FastAPI on uvicorn).

| route | what |
| --- | --- |
| `POST /v1/diagnose` | `{question, language?}` -> the DiagnosisResult, once the diagnosis ran |
| `POST /v1/alertmanager` | Alertmanager's webhook (version 4) -> 202 with a session id per firing alert |
| `GET /v1/sessions`, `GET /v1/sessions/{id}` | the audit records (and a session's tool calls) as JSON |
| `GET /sessions/{id}` | the audit page (program/entry/page.py) |
| `GET /healthz`, `GET /metrics` | liveness; Prometheus metrics |

Safe by default: it binds 127.0.0.1; DIAGNOSIS_API_TOKEN, when set, is the bearer token of every
route but /healthz; a body over DIAGNOSIS_SERVE_MAX_BODY bytes is refused (413) before it is read
whole; a body that is not the route's model is a 422 naming the first wrong part. A full queue
answers 503 with Retry-After. Settings that cannot be used stop the server before it binds.
"""

from __future__ import annotations

import asyncio
import copy
import hmac
import os
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
from program.entry.alerts import AlertError, WebhookPayload, alert_language, alert_name, queued_session
from program.store.audit import AuditStore, AuditStoreError
from program.entry.workers import QueueFull, Workers
from program.lm.engine import is_embedded
from signatures.contracts import MAX_TEXT_CHARS, DiagnosisResult, DiagnosisSession, Language, ToolInvocation
from tools.sources.http import first_problem

TOKEN = "DIAGNOSIS_API_TOKEN"
DEFAULTS = {"DIAGNOSIS_SERVE_QUEUE": 100, "DIAGNOSIS_SERVE_CONCURRENCY": 4, "DIAGNOSIS_SERVE_MAX_BODY": 2**20}
SETTINGS = (TOKEN, *DEFAULTS)
MAX_LISTED = 1000
# Threads beyond the queue's and the workers' for questions that are only to be refused.
SPARE_THREADS = 8


@dataclass(frozen=True)
class ServeSettings:
    queue: int
    concurrency: int
    max_body: int
    token: str | None
    # zh, en or auto for the sentences code writes; None: DIAGNOSIS_LANGUAGE.
    language: str | None = None

    @classmethod
    def from_env(cls, language: str | None = None) -> ServeSettings:
        """ValueError naming the setting when one cannot be used."""
        alert_language(language)
        values = {}
        for name, default in DEFAULTS.items():
            raw = os.environ.get(name) or str(default)
            if not re.fullmatch(r"[0-9]{1,12}", raw) or int(raw) < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {raw[:40]!r}")
            values[name] = int(raw)
        return cls(queue=values["DIAGNOSIS_SERVE_QUEUE"], concurrency=values["DIAGNOSIS_SERVE_CONCURRENCY"],
                   max_body=values["DIAGNOSIS_SERVE_MAX_BODY"], token=os.environ.get(TOKEN) or None,
                   language=language)


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


class SessionList(BaseModel):
    sessions: list[SessionSummary]
    unreadable: list[str] = []


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


class BearerToken:
    """ASGI middleware: every path but /healthz needs `Authorization: Bearer <token>`, the routes of
    other modules (the audit page) and paths that lead nowhere included."""

    OPEN = ("/healthz",)

    def __init__(self, app, token: str):
        self.app, self.token = app, token.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] not in self.OPEN:
            scheme, _, given = dict(scope["headers"]).get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.token):
                detail = "a bearer token is required (Authorization: Bearer <DIAGNOSIS_API_TOKEN>)"
                refused = JSONResponse({"detail": detail}, 401, headers={"WWW-Authenticate": "Bearer"})
                return await refused(scope, receive, send)
        return await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: a body over `limit` bytes is refused, by its Content-Length before it is read,
    and while it is read when it comes in chunks."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit():
            return await JSONResponse({"detail": "Content-Length is not a number"}, 400)(scope, receive, send)
        if len(length) > 20 or int(length) > self.limit:  # longer than any length a body can have
            return await JSONResponse({"detail": self._message()}, 413)(scope, receive, send)
        received = 0

        async def limited():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise HTTPException(413, self._message())
            return message

        await self.app(scope, limited, send)

    def _message(self) -> str:
        return f"the request body is over {self.limit} bytes, the most this server reads (DIAGNOSIS_SERVE_MAX_BODY)"


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
                                     for r in good], unreadable=bad)

    @router.get("/v1/sessions/{session_id}")
    def session(session_id: str, request: Request) -> SessionDetail:
        store = request.app.state.store
        record = store.get_session(session_id)
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

    # The workers' lines (what ran, what failed) beside uvicorn's own, in its format.
    logging = copy.deepcopy(LOGGING_CONFIG)
    logging["loggers"]["program.entry"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    uvicorn.run(create_app(store, lm, settings), host=host, port=port, log_config=logging)


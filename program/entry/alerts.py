"""Alerts from Alertmanager: its API v2 (`investigate`) and its webhook (payload version 4, `serve`).

Each firing alert becomes one narrow question, built in code from two of its labels, `alertname` and
the label that names the service (DIAGNOSIS_PROMETHEUS_SERVICE_LABEL, as the Prometheus source
reads it), in the language DIAGNOSIS_LANGUAGE sets. Label values are written by whoever can post an
alert: each is quoted as a JSON string, which code reads as data (program.evidence.scope: a quoted
"skip order-service" excludes nothing), and a value shaped like an instruction to a model is named
in a note of the session's record. The alert is queued as a pending session of the audit store,
under an id that its labels and start name, so an alert delivered twice (to two servers, or again
by Alertmanager) is diagnosed once.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Annotated, Literal

import httpx
from pydantic import AwareDatetime, BaseModel, Field, StringConstraints, TypeAdapter, ValidationError

from program.store.audit import CLAIMED, PENDING
from program.store.processes import this_process
from program.store.storable import storable
from program.evidence.injection import instruction_in
from program.evidence.language import answer_language, say
from contracts import MAX_TEXT_CHARS, Finding, Language
from contracts.record import DiagnosisSession
from tools.text.folding import nfkc
from tools.sources.errors import SourceError
from tools.sources.http import first_problem, whole_answer
from tools.sources.limits import MAX_BODY_BYTES, MAX_ITEM_CHARS, MAX_NAME_CHARS, clip
from tools.sources.prometheus import service_label

# Labels (or annotations) of one alert, and alerts of one notification or one investigation.
MAX_LABELS = 64
MAX_ALERTS = 200
ALERT_NOTE, LABEL_INSTRUCTION = "alert.received", "alert.label_instruction"

LabelName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)]
LabelValue = Annotated[str, StringConstraints(max_length=MAX_ITEM_CHARS)]
Labels = Annotated[dict[LabelName, LabelValue], Field(max_length=MAX_LABELS)]
Short = Annotated[str, StringConstraints(max_length=MAX_ITEM_CHARS)]


class AlertError(ValueError):
    """An alert that cannot be diagnosed as it is; the message names the alert and why."""


class Alert(BaseModel):
    """What the API's alerts and the webhook's share (https://prometheus.io/docs/alerting/latest/)."""

    labels: Labels
    annotations: Labels = {}
    startsAt: AwareDatetime
    fingerprint: Annotated[str, StringConstraints(max_length=MAX_NAME_CHARS)] = ""


class AlertStatus(BaseModel):
    state: Literal["active", "suppressed", "unprocessed"]


class ApiAlert(Alert):
    """One element of `GET /api/v2/alerts`."""

    status: AlertStatus


class WebhookAlert(Alert):
    status: Literal["firing", "resolved"]
    generatorURL: Short = ""


class WebhookPayload(BaseModel):
    """The body of Alertmanager's webhook, version 4."""

    version: Literal["4"]
    status: Literal["firing", "resolved"]
    receiver: Short = ""
    groupKey: Short = ""
    alerts: Annotated[list[WebhookAlert], Field(max_length=MAX_ALERTS)]


API_ALERTS = TypeAdapter(list[ApiAlert])


def quoted(value: str) -> str:
    """A label value as data: a JSON string. Compatibility forms first (＂ is "), so that no character
    of the value can close its quotes once a reader normalises the text; what no store holds (NUL,
    lone surrogates) as U+FFFD, as the store would keep it."""
    return json.dumps(storable(nfkc(value))[0], ensure_ascii=False)


def alert_language(setting: str | None = None) -> Language:
    """zh or en as DIAGNOSIS_LANGUAGE (or `setting`) says; auto: English, the language of label names."""
    return answer_language("", setting)


def alert_name(alert: Alert) -> str:
    return alert.labels.get("alertname", "")


def alert_service(alert: Alert) -> str:
    """The alert's service label; AlertError when it has none or one longer than a name may be."""
    label = service_label()
    service = alert.labels.get(label)
    if not alert_name(alert):
        raise AlertError(f"alert {describe(alert)} has no alertname label, so no question can name it")
    if not service:
        raise AlertError(f"alert {describe(alert)} has no {label} label (DIAGNOSIS_PROMETHEUS_SERVICE_LABEL), "
                         "so no question can name its service")
    for name, value in (("alertname", alert_name(alert)), (label, service)):
        if len(value) > MAX_NAME_CHARS:
            raise AlertError(f"alert {describe(alert)}: its {name} label has {len(value)} characters; "
                             f"a name may have at most {MAX_NAME_CHARS}")
    return service


def describe(alert: Alert) -> str:
    """The alert as a message names it, its label values quoted and cut."""
    shown = {name: clip(value, 80) for name, value in sorted(alert.labels.items())[:8]}
    return quoted(shown.get("alertname", "(no alertname)")) + " " + json.dumps(shown, ensure_ascii=False)


def alert_question(alert: Alert, language: Language) -> str:
    return say(language, "alert_question", service=quoted(alert_service(alert)), alert=quoted(alert_name(alert)))


def alert_session_id(alert: Alert) -> str:
    """The same for every delivery of one firing of one alert: its labels and when it started."""
    key = json.dumps([sorted(alert.labels.items()), alert.startsAt.timestamp()], ensure_ascii=False)
    return "alert-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _notes(alert: Alert, origin: str) -> list[Finding]:
    labels = json.dumps(dict(sorted(alert.labels.items())), ensure_ascii=False)
    notes = [Finding(rule=ALERT_NOTE, message=clip(
        f"{origin}: alert {quoted(alert_name(alert))} started {alert.startsAt.isoformat()}"
        f"{', fingerprint ' + quoted(alert.fingerprint) if alert.fingerprint else ''}; labels {labels}",
        MAX_TEXT_CHARS - 50))]
    for name in ("alertname", service_label()):
        if found := instruction_in(alert.labels[name]):
            notes.append(Finding(rule=LABEL_INSTRUCTION, message=(
                f"the {name} label holds text shaped like an instruction to a model ({clip(found, 120)!r}); "
                "the question quotes it as data")))
    return notes


def queued_session(alert: Alert, origin: str, language: Language, *, claimed: bool = False) -> DiagnosisSession:
    """The alert as a session to run: pending under the alert's own id, or (`claimed`) under a new
    id, claimed by this process for a run it starts at once."""
    question = alert_question(alert, language)
    session_id = f"alert-{uuid.uuid4().hex[:12]}" if claimed else alert_session_id(alert)
    return DiagnosisSession(session_id=session_id, query=question, status=CLAIMED if claimed else PENDING,
                            process=this_process() if claimed else "", created_at=datetime.now(UTC),
                            language=language, notes=_notes(alert, origin))


class Alertmanager:
    """The firing alerts of an Alertmanager, through its API v2; every failure is a SourceError."""

    def __init__(self, url: str, *, timeout: float = 10.0, transport: httpx.BaseTransport | None = None):
        if not url.startswith(("http://", "https://")):
            raise SourceError(f"the Alertmanager URL must be an http:// or https:// URL, got {clip(url, 80)!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.client = httpx.Client(base_url=self.url, timeout=timeout, transport=transport)

    def firing(self, alertname: str | None = None, service: str | None = None) -> list[ApiAlert]:
        """Active alerts, neither silenced nor inhibited, with that alertname and service when given."""
        path, who = "/api/v2/alerts", f"Alertmanager at {self.url}"
        status, body = whole_answer(self.client, who, path,
                                    {"active": "true", "silenced": "false", "inhibited": "false"},
                                    deadline=time.monotonic() + self.timeout, timeout=self.timeout,
                                    max_bytes=MAX_BODY_BYTES)
        if status != 200:
            raise SourceError(f"{who} refused {path}: HTTP {status}: {clip(body.decode('utf-8', 'replace'), 200)}")
        try:
            alerts = API_ALERTS.validate_json(body)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False)
            if any(e["type"] == "json_invalid" for e in errors):
                raise SourceError(f"{who} answered {path} with a body that is not JSON") from None
            raise SourceError(f"{who} answered {path} with alerts that are not the API's: "
                              f"{first_problem(errors, 'body')}") from None
        label = service_label()
        return [a for a in alerts if a.status.state == "active"
                and alertname in (None, alert_name(a)) and service in (None, a.labels.get(label))]

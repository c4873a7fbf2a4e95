"""Alerts from a real Prometheus server, through its HTTP API (httpx).

`/api/v1/rules?type=alert` gives every alerting rule with its active alerts (state, labels,
annotations, value, activeAt); the rule's expression gives the threshold where it ends in a
comparison with a number; a range query of the expression's left-hand side gives recent samples,
so a trend can be cited. Every alert keeps the fixture's shape, cited as `$.alerts[i]`.

Any failure to get an answer raises `SourceError`, and the invocation fails: it is never a no-hit.
That includes a request that is not answered whole within the timeout (a server that drips its
answer a few bytes at a time included), an answer over MAX_BODY_BYTES, and an answer whose parts
the code reads are not as the API documents them (pydantic models below); the message names the
first part that was wrong. An annotation, which a ref quotes, is cut at MAX_ITEM_CHARS where a
reader can see it, and the alert names what was cut in `cut`.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated, Any, Literal, get_args

import httpx
from pydantic import AfterValidator, BaseModel, Field, StringConstraints, TypeAdapter, ValidationError

from tools.sources.errors import SourceError
from tools.sources.http import first_problem, whole_answer
from tools.sources.interfaces import MetricsSource, Settings
from tools.sources.limits import MAX_BODY_BYTES, MAX_ITEM_CHARS, MAX_NAME_CHARS, clip
from contracts.settings import default, value_or_default

AlertState = Literal["firing", "pending"]
PROMETHEUS_ALERT_STATES = get_args(AlertState)
# "<op> <number>" at the end of a rule's expression: the number is the rule's threshold. Searched
# for, not matched from the start, so that an expression of spaces costs linear time, not quadratic.
COMPARISON = re.compile(r"(?P<op>>=|<=|==|!=|>|<)\s*(?P<number>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*$")
SAMPLE_WINDOW_S = 600
SAMPLE_STEP_S = 60
MAX_SAMPLES = 6


def number_text(value: Any) -> str:
    """A sample value as a reader writes it: 91, 0.93, 1250 (the API sends "9.1e+01")."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{number:.6g}" if not math.isfinite(number) or abs(number) < 1e6 else f"{number:.0f}"


def threshold(expression: str) -> tuple[str, str] | None:
    """(left-hand side, threshold) of an expression that ends in a comparison with a number."""
    comparison = COMPARISON.search(expression)
    lhs = expression[:comparison.start()].strip() if comparison else ""
    return (lhs, comparison["number"]) if lhs else None


def _since(stamp: str) -> str:
    """activeAt without its nanoseconds: 2026-11-30T14:02:11Z."""
    return re.sub(r"\.\d+(?=Z|[+-]\d\d:\d\d$)", "", stamp)


def _a_number(value: str) -> str:
    """A sample value as the API sends it, a string: "9.1e+01", "NaN", "+Inf"."""
    try:
        float(value)
    except ValueError:
        raise ValueError("not a number") from None
    return value


# The parts of the API's answers that the code reads (https://prometheus.io/docs/prometheus/latest/querying/api/).
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)]
SampleValue = Annotated[str, AfterValidator(_a_number)]


class Answer(BaseModel):
    status: Literal["success", "error"]
    data: Any = None
    error: str | None = None


class ActiveAlert(BaseModel):
    labels: dict[Name, Annotated[str, StringConstraints(max_length=MAX_ITEM_CHARS)]]
    annotations: dict[str, str] = {}
    state: AlertState
    activeAt: Name | None = None
    value: SampleValue


class AlertingRule(BaseModel):
    type: Literal["alerting"]
    name: Name
    query: Annotated[str, StringConstraints(max_length=MAX_ITEM_CHARS)]
    alerts: list[ActiveAlert] = []


class RecordingRule(BaseModel):
    type: Literal["recording"]


class RuleGroup(BaseModel):
    rules: list[Annotated[AlertingRule | RecordingRule, Field(discriminator="type")]]


class Rules(BaseModel):
    groups: list[RuleGroup]


class Series(BaseModel):
    metric: dict[str, str]
    values: list[tuple[float, SampleValue]]


class Matrix(BaseModel):
    resultType: Literal["matrix"]
    result: list[Series]


RULES = TypeAdapter(Rules)
LABEL_VALUES = TypeAdapter(list[Name])
MATRIX = TypeAdapter(Matrix)


def _problem(exc: ValidationError, root: str) -> str:
    return first_problem(exc.errors(include_url=False, include_input=False), root)


def _clipped(values: dict[str, str], field: str, cut: list[str]) -> dict[str, str]:
    """Keys and values cut to size, in key order; `cut` gets the place of each one that was cut."""
    out = {}
    for key, value in sorted(values.items()):
        short = clip(key, MAX_NAME_CHARS)
        if short != key or len(value) > MAX_ITEM_CHARS:
            cut.append(f"{field}.{short}")
        out[short] = clip(value)
    return out


# When the tool call running in this context must end: every request of one call shares it.
_call_deadline: ContextVar[float | None] = ContextVar("prometheus_call_deadline", default=None)


# What the settings' defaults are, for a server built without them (contracts/settings.py).
DEFAULT_LABEL = default("DIAGNOSIS_PROMETHEUS_SERVICE_LABEL")
DEFAULT_TIMEOUT = float(default("DIAGNOSIS_PROMETHEUS_TIMEOUT"))


def service_label(value: str | None = None) -> str:
    """The alert label that names the service: `value` (a setting's), else
    DIAGNOSIS_PROMETHEUS_SERVICE_LABEL, else its default. Alertmanager's alerts are read by it too."""
    return value or value_or_default("DIAGNOSIS_PROMETHEUS_SERVICE_LABEL")


def _timeout(raw: str | None) -> float:
    if raw is None:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise SourceError(f"DIAGNOSIS_PROMETHEUS_TIMEOUT must be a positive number of seconds, got {raw!r}")
    return seconds


class Prometheus(MetricsSource):
    # The settings it is built from, besides DIAGNOSIS_PROMETHEUS_URL (tools/sources/active.py).
    OPTIONS = ("DIAGNOSIS_PROMETHEUS_SERVICE_LABEL", "DIAGNOSIS_PROMETHEUS_TIMEOUT")

    @classmethod
    def from_settings(cls, url: str, settings: Settings) -> Prometheus:
        if not url.startswith(("http://", "https://")):
            raise SourceError(f"DIAGNOSIS_PROMETHEUS_URL must be an http:// or https:// URL, got {url!r}")
        return cls(url, service_label=service_label(settings["DIAGNOSIS_PROMETHEUS_SERVICE_LABEL"]),
                   timeout=_timeout(settings["DIAGNOSIS_PROMETHEUS_TIMEOUT"]))

    def __init__(self, url: str, *, service_label: str = DEFAULT_LABEL, timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None):
        self.url = url.rstrip("/")
        self.service_label = service_label
        # httpx bounds each connect and read by the timeout; _get bounds the whole request by it, and
        # `call` the whole of one tool call (the rules, then a range query per alert).
        self.timeout = timeout
        self.client = httpx.Client(base_url=self.url, timeout=timeout, transport=transport)
        self.alert_states = PROMETHEUS_ALERT_STATES

    @property
    def label(self) -> str:
        return f"prometheus {self.url}"

    @contextmanager
    def call(self) -> Iterator[None]:
        """One tool call (or one reading of the catalog): all its requests end within the timeout."""
        token = _call_deadline.set(time.monotonic() + self.timeout) if _call_deadline.get() is None else None
        try:
            yield
        finally:
            if token is not None:
                _call_deadline.reset(token)

    def _get(self, path: str, data: TypeAdapter, **params: Any) -> Any:
        """The answer's data as `data` reads it, or SourceError saying what was wrong."""
        status, body = self._whole_answer(path, params)
        try:
            answer = Answer.model_validate_json(body)
        except ValidationError as exc:
            if any(e["type"] == "json_invalid" for e in exc.errors()):
                raise SourceError(f"Prometheus at {self.url} answered {path} with HTTP {status} "
                                  f"and a body that is not JSON") from None
            if status == 200:
                raise SourceError(f"Prometheus at {self.url} answered {path} with a body that is not the API's: "
                                  f"{_problem(exc, 'body')}") from None
            answer = None
        if answer is None or status != 200 or answer.status != "success":
            error = answer.error if answer is not None else None
            raise SourceError(f"Prometheus at {self.url} refused {path}: HTTP {status}"
                              + (f": {clip(error, MAX_NAME_CHARS)}" if error else ""))
        try:
            return data.validate_python(answer.data)
        except ValidationError as exc:
            raise SourceError(f"Prometheus at {self.url} answered {path} with data that is not the API's: "
                              f"{_problem(exc, 'data')}") from None

    def _whole_answer(self, path: str, params: dict[str, Any]) -> tuple[int, bytes]:
        """The status and body of one GET, within the timeout and within the deadline of the call it belongs to."""
        deadline = min(time.monotonic() + self.timeout, _call_deadline.get() or math.inf)
        return whole_answer(self.client, f"Prometheus at {self.url}", path, params, deadline=deadline,
                            timeout=self.timeout, max_bytes=MAX_BODY_BYTES)

    def _rules(self) -> list[AlertingRule]:
        rules = self._get("/api/v1/rules", RULES, type="alert")
        return [rule for group in rules.groups for rule in group.rules if isinstance(rule, AlertingRule)]

    def alert_names(self) -> tuple[str, ...]:
        return tuple(sorted({rule.name for rule in self._rules()}))

    def services(self) -> tuple[str, ...]:
        return tuple(sorted(self._get(f"/api/v1/label/{self.service_label}/values", LABEL_VALUES)))

    def alerts(self) -> list[dict[str, Any]]:
        """Every active alert of every alerting rule, in the `$.alerts[i]` shape, without samples."""
        alerts = []
        for rule in self._rules():
            compared = threshold(rule.query)
            for active in rule.alerts:
                service = active.labels.get(self.service_label)
                if service is not None and len(service) > MAX_NAME_CHARS:
                    raise SourceError(f"Prometheus at {self.url} answered /api/v1/rules with a {self.service_label} "
                                      f"label of {len(service)} characters; a name may have at most {MAX_NAME_CHARS}")
                cut: list[str] = []
                alert: dict[str, Any] = {
                    "name": rule.name,
                    "state": active.state,
                    "service": service,
                    "current": number_text(active.value),
                }
                if compared:
                    alert["threshold"] = number_text(compared[1])
                if active.activeAt is not None:
                    alert["active_since"] = _since(active.activeAt)
                alert["annotations"] = _clipped(active.annotations, "annotations", cut)
                alert["expression"] = rule.query
                # Whole: the samples are found by them, and a ref shows only the service's.
                alert["labels"] = dict(sorted(active.labels.items()))
                if cut:
                    alert["cut"] = cut
                alerts.append(alert)
        return alerts

    def with_samples(self, alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Recent values of each alert's expression (its left-hand side when it ends in a threshold),
        for the alert's own series."""
        end = time.time()
        out = []
        for alert in alerts:
            compared = threshold(alert["expression"])
            expression = compared[0] if compared else alert["expression"]
            matrix = self._get("/api/v1/query_range", MATRIX, query=expression, start=end - SAMPLE_WINDOW_S, end=end,
                               step=SAMPLE_STEP_S)
            own = alert["labels"]
            values: list[str] = []
            for series in matrix.result:
                if all(own.get(k) == v for k, v in series.metric.items() if k != "__name__"):
                    values = [number_text(value) for _, value in series.values]
                    break
            out.append({**alert, "samples": values[-MAX_SAMPLES:]})
        return out

"""Alerts from a real Prometheus server, through its HTTP API (httpx).

`/api/v1/rules?type=alert` gives every alerting rule with its active alerts (state, labels,
annotations, value, activeAt); the rule's expression gives the threshold where it ends in a
comparison with a number; a range query of the expression's left-hand side gives recent samples,
so a trend can be cited. Every alert keeps the fixture's shape, cited as `$.alerts[i]`.

Any failure to get an answer (refused, timed out, an HTTP error, a body that is not the API's
JSON) raises `SourceError`: the invocation fails, it is never a no-hit.
"""

from __future__ import annotations

import re
import time
from typing import Any

import httpx

from tools.sources.errors import SourceError

ALERT_STATES = ("firing", "pending")
# "<expression> <op> <number>" at the end of a rule: the number is the rule's threshold.
COMPARISON = re.compile(r"^(?P<lhs>.+?)\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<number>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*$",
                        re.DOTALL)
SAMPLE_WINDOW_S = 600
SAMPLE_STEP_S = 60
MAX_SAMPLES = 6


def number_text(value: Any) -> str:
    """A sample value as a reader writes it: 91, 0.93, 1250 (the API sends "9.1e+01")."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{number:.6g}" if abs(number) < 1e6 else f"{number:.0f}"


def _since(stamp: Any) -> str:
    """activeAt without its nanoseconds: 2026-11-30T14:02:11Z."""
    return re.sub(r"\.\d+(?=Z|[+-]\d\d:\d\d$)", "", str(stamp))


class Prometheus:
    def __init__(self, url: str, *, service_label: str = "service", timeout: float = 5.0,
                 transport: httpx.BaseTransport | None = None):
        self.url = url.rstrip("/")
        self.service_label = service_label
        self.client = httpx.Client(base_url=self.url, timeout=timeout, transport=transport)
        self.alert_states = ALERT_STATES

    @property
    def label(self) -> str:
        return f"prometheus {self.url}"

    def _get(self, path: str, **params: Any) -> Any:
        try:
            response = self.client.get(path, params=params)
        except httpx.TimeoutException:
            raise SourceError(f"Prometheus at {self.url} timed out on {path}") from None
        except httpx.HTTPError as exc:
            raise SourceError(f"Prometheus at {self.url} could not be reached on {path}: "
                              f"{type(exc).__name__}: {exc}") from None
        try:
            body = response.json()
        except ValueError:
            raise SourceError(f"Prometheus at {self.url} answered {path} with HTTP {response.status_code} "
                              f"and a body that is not JSON") from None
        if response.status_code != 200 or not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise SourceError(f"Prometheus at {self.url} refused {path}: HTTP {response.status_code}"
                              + (f": {error}" if error else ""))
        return body.get("data")

    def _rules(self) -> list[dict[str, Any]]:
        data = self._get("/api/v1/rules", type="alert")
        groups = data.get("groups") if isinstance(data, dict) else None
        if not isinstance(groups, list):
            raise SourceError(f"Prometheus at {self.url} sent rules without a list of groups")
        return [rule for group in groups if isinstance(group, dict)
                for rule in group.get("rules") or [] if isinstance(rule, dict) and rule.get("type") == "alerting"]

    def alert_names(self) -> tuple[str, ...]:
        return tuple(sorted({str(rule.get("name")) for rule in self._rules()}))

    def services(self) -> tuple[str, ...]:
        values = self._get(f"/api/v1/label/{self.service_label}/values")
        if not isinstance(values, list):
            raise SourceError(f"Prometheus at {self.url} sent label values that are not a list")
        return tuple(sorted(str(v) for v in values))

    def alerts(self) -> list[dict[str, Any]]:
        """Every active alert of every alerting rule, in the `$.alerts[i]` shape, without samples."""
        alerts = []
        for rule in self._rules():
            expression = str(rule.get("query", ""))
            comparison = COMPARISON.match(expression)
            for active in rule.get("alerts") or []:
                if not isinstance(active, dict):
                    continue
                labels = active.get("labels") if isinstance(active.get("labels"), dict) else {}
                annotations = active.get("annotations") if isinstance(active.get("annotations"), dict) else {}
                alert: dict[str, Any] = {
                    "name": str(rule.get("name")),
                    "state": str(active.get("state")),
                    "service": labels.get(self.service_label),
                    "current": number_text(active.get("value")),
                }
                if comparison:
                    alert["threshold"] = number_text(comparison["number"])
                alert["active_since"] = _since(active.get("activeAt"))
                alert["annotations"] = {str(k): str(v) for k, v in sorted(annotations.items())}
                alert["expression"] = expression
                alert["labels"] = {str(k): str(v) for k, v in sorted(labels.items())}
                alerts.append(alert)
        return alerts

    def with_samples(self, alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Recent values of each alert's expression (its left-hand side when it ends in a threshold),
        for the alert's own series."""
        end = time.time()
        out = []
        for alert in alerts:
            comparison = COMPARISON.match(alert["expression"])
            expression = comparison["lhs"] if comparison else alert["expression"]
            data = self._get("/api/v1/query_range", query=expression, start=end - SAMPLE_WINDOW_S, end=end,
                             step=SAMPLE_STEP_S)
            series = data.get("result") if isinstance(data, dict) else None
            if not isinstance(series, list):
                raise SourceError(f"Prometheus at {self.url} sent a range query result that is not a list")
            own = alert["labels"]
            values: list[str] = []
            for entry in series:
                metric = entry.get("metric", {}) if isinstance(entry, dict) else {}
                if all(own.get(k) == v for k, v in metric.items() if k != "__name__"):
                    values = [number_text(pair[1]) for pair in entry.get("values") or []
                              if isinstance(pair, list) and len(pair) == 2]
                    break
            out.append({**alert, "samples": values[-MAX_SAMPLES:]})
        return out

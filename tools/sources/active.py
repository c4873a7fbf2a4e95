"""Which source answers each tool, chosen by settings; the fixture world is the default for each.

| setting | source |
| --- | --- |
| `DIAGNOSIS_PROMETHEUS_URL` | query_metrics reads that Prometheus server's alerting rules |
| `DIAGNOSIS_PROMETHEUS_SERVICE_LABEL` | the alert label that names the service (default `service`) |
| `DIAGNOSIS_PROMETHEUS_TIMEOUT` | seconds a whole request to the server may take, answer included (default 5) |
| `DIAGNOSIS_LOGS_DIR` | query_logs searches the `*.log` and `*.jsonl` regular files under that directory |
| `DIAGNOSIS_RUNBOOKS_DIR` | lookup_knowledge ranks the Markdown runbooks (regular files) in that directory |
| `DIAGNOSIS_SYNONYMS` | a JSON file of synonym groups for log search and scope (default: the world's) |
| `DIAGNOSIS_WORLD` | the fixture world directory behind every tool not set above |
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from tools.sources.errors import SourceError
from tools.sources.fixture import FixtureLogs, FixtureMetrics
from tools.sources.logs import LogDirectory
from tools.sources.prometheus import Prometheus
from tools.sources.runbooks import RunbookDirectory
from tools.world import DEFAULT_WORLD_DIR, WorldError, get_world, load_synonyms

SETTINGS = ("DIAGNOSIS_WORLD", "DIAGNOSIS_PROMETHEUS_URL", "DIAGNOSIS_PROMETHEUS_SERVICE_LABEL",
            "DIAGNOSIS_PROMETHEUS_TIMEOUT", "DIAGNOSIS_LOGS_DIR", "DIAGNOSIS_RUNBOOKS_DIR", "DIAGNOSIS_SYNONYMS")


@dataclass(frozen=True)
class Sources:
    metrics: FixtureMetrics | Prometheus
    logs: FixtureLogs | LogDirectory
    runbooks: RunbookDirectory
    synonyms: dict[str, tuple[str, ...]]


def _timeout(raw: str | None) -> float:
    if raw is None:
        return 5.0
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise SourceError(f"DIAGNOSIS_PROMETHEUS_TIMEOUT must be a positive number of seconds, got {raw!r}")
    return seconds


def _build(env: dict[str, str | None]) -> Sources:
    world_dir = Path(env["DIAGNOSIS_WORLD"] or DEFAULT_WORLD_DIR)
    url = env["DIAGNOSIS_PROMETHEUS_URL"]
    if url is not None and not url.startswith(("http://", "https://")):
        raise SourceError(f"DIAGNOSIS_PROMETHEUS_URL must be an http:// or https:// URL, got {url!r}")
    fixture_needed = not (url and env["DIAGNOSIS_LOGS_DIR"] and env["DIAGNOSIS_RUNBOOKS_DIR"])
    try:
        world = get_world() if fixture_needed else None
        synonyms = load_synonyms(Path(env["DIAGNOSIS_SYNONYMS"] or world_dir / "synonyms.json"))
    except WorldError as exc:
        raise SourceError(str(exc)) from None
    metrics = (Prometheus(url, service_label=env["DIAGNOSIS_PROMETHEUS_SERVICE_LABEL"] or "service",
                          timeout=_timeout(env["DIAGNOSIS_PROMETHEUS_TIMEOUT"]))
               if url else FixtureMetrics(world))
    logs = LogDirectory(Path(env["DIAGNOSIS_LOGS_DIR"])) if env["DIAGNOSIS_LOGS_DIR"] else FixtureLogs(world)
    runbooks = RunbookDirectory(Path(env["DIAGNOSIS_RUNBOOKS_DIR"]) if env["DIAGNOSIS_RUNBOOKS_DIR"]
                                else world_dir / "runbooks")
    return Sources(metrics=metrics, logs=logs, runbooks=runbooks, synonyms=synonyms)


_lock = threading.Lock()
_built: dict[tuple, Sources] = {}


def active_sources() -> Sources:
    """The sources the current settings name; a setting that cannot be used raises SourceError."""
    env = {name: os.environ.get(name) or None for name in SETTINGS}
    key = tuple(env.values())
    with _lock:
        if key not in _built:
            _built[key] = _build(env)
        return _built[key]

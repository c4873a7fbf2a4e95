"""The fixture world: services, alerts, logs, runbooks and search synonyms, loaded from data files,
and served as a source of every kind: its alerts answer query_metrics, its log records query_logs,
its runbooks directory lookup_knowledge. It answers every tool no setting points elsewhere.

The files under ``tools/world/`` are the single source of truth; a reviewer reads them directly.
Set ``DIAGNOSIS_WORLD`` to point the tools at another directory with the same layout.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.settings import current, default
from tools.text.jsonlines import json_lines
from tools.sources.errors import SourceError
from tools.sources.interfaces import MetricsSource
from tools.sources.logs.formats import parse_json
from tools.sources.logs.levels import LOG_LEVELS
from tools.sources.logs.records import RecordLines, RecordLogSource, Searched
from tools.sources.runbooks import Runbook, RunbookDirectory, load_runbook

# The project directory the default names its folder in (contracts/settings.py).
DEFAULT_WORLD_DIR = Path(__file__).resolve().parents[2] / default("DIAGNOSIS_WORLD")
FIXTURE_ALERT_STATES = ("firing", "resolved")
ALERT_FIELDS = ("name", "state", "service", "current", "threshold", "duration", "description", "samples")
LOG_FIELDS = ("timestamp", "level", "service", "message")


class WorldError(RuntimeError):
    """A fixture file is missing or malformed; the message names the file and the problem."""


@dataclass(frozen=True)
class World:
    root: Path
    services: tuple[dict[str, Any], ...]
    alerts: tuple[dict[str, Any], ...]
    logs: tuple[dict[str, Any], ...]
    runbooks: tuple[Runbook, ...]
    synonyms: dict[str, tuple[str, ...]]

    @property
    def service_names(self) -> frozenset[str]:
        return frozenset(s["name"] for s in self.services)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorldError(f"fixture file missing: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WorldError(f"fixture file {path} is not valid JSON: {exc}") from None


def _require(record: Any, fields: tuple[str, ...], where: str) -> None:
    if not isinstance(record, dict):
        raise WorldError(f"{where}: expected an object, got {type(record).__name__}")
    missing = [f for f in fields if f not in record]
    if missing:
        raise WorldError(f"{where}: missing field(s) {', '.join(missing)}")


def _load_logs(path: Path) -> list[dict[str, Any]]:
    """The world's log records, read as JSON lines (tools/sources/logs/formats.py), as a log
    directory's JSON lines are; every record must name its time, level, service and message."""
    logs = []
    for where, line, record in json_lines(path, WorldError, "the fixture's logs"):
        _require(record, LOG_FIELDS, where)
        entry = parse_json(line)
        if entry is None or entry.format != "json":
            raise WorldError(f"{where} is not a JSON log record")
        if record["level"] not in LOG_LEVELS or entry.level != record["level"]:
            raise WorldError(f"{where}: level {record['level']!r} is not one of {LOG_LEVELS}")
        logs.append({"timestamp": entry.timestamp, "level": entry.level, "service": entry.service,
                     "message": entry.message, "source": f"{path.name}:{where.rsplit(':', 1)[1]}", "format": entry.format})
    return logs


def load_synonyms(path: Path) -> dict[str, tuple[str, ...]]:
    """Groups of query terms that name the same concept; keys starting with "_" are comments."""
    raw = _read_json(path)
    if not isinstance(raw, dict) or not all(
            isinstance(terms, list) and all(isinstance(t, str) for t in terms)
            for group, terms in raw.items() if not group.startswith("_")):
        raise WorldError(f"{path}: expected an object of synonym groups, each a list of terms")
    return {group: tuple(term.casefold() for term in terms) for group, terms in raw.items() if not group.startswith("_")}


def load_world(directory: Path | str | None = None) -> World:
    root = Path(directory or current().world or DEFAULT_WORLD_DIR)
    if not root.is_dir():
        raise WorldError(f"fixture world directory not found: {root}")
    services = _read_json(root / "services.json")
    if not isinstance(services, list):
        raise WorldError(f"{root / 'services.json'}: expected a list of services")
    for i, s in enumerate(services):
        _require(s, ("name",), f"services.json[{i}]")
    alerts = _read_json(root / "alerts.json")
    if not isinstance(alerts, list):
        raise WorldError(f"{root / 'alerts.json'}: expected a list of alerts")
    for i, a in enumerate(alerts):
        _require(a, ALERT_FIELDS, f"alerts.json[{i}]")
    synonyms = load_synonyms(root / "synonyms.json")
    runbook_paths = sorted((root / "runbooks").glob("*.md"))
    if not runbook_paths:
        raise WorldError(f"no runbooks found under {root / 'runbooks'}")
    try:
        runbooks = tuple(load_runbook(p) for p in runbook_paths)
    except SourceError as exc:
        raise WorldError(str(exc)) from None
    return World(
        root=root,
        services=tuple(services),
        alerts=tuple(alerts),
        logs=tuple(_load_logs(root / "logs.jsonl")),
        runbooks=runbooks,
        synonyms=synonyms,
    )


_lock = threading.Lock()
_cached: dict[str, World] = {}


def get_world() -> World:
    key = current().world or str(DEFAULT_WORLD_DIR)
    with _lock:
        if key not in _cached:
            _cached[key] = load_world(key)
        return _cached[key]


class FixtureMetrics(MetricsSource):
    alert_states = FIXTURE_ALERT_STATES

    def __init__(self, world: World):
        self.world = world

    @property
    def label(self) -> str:
        return f"fixture world {self.world.root}"

    def alerts(self) -> list[dict[str, Any]]:
        return [dict(a) for a in self.world.alerts]

    def alert_names(self) -> tuple[str, ...]:
        return tuple(sorted({a["name"] for a in self.world.alerts}))

    def services(self) -> tuple[str, ...]:
        return tuple(sorted(self.world.service_names))


class FixtureLogs(RecordLogSource):
    def __init__(self, world: World, synonyms: dict[str, tuple[str, ...]]):
        super().__init__(synonyms)
        self.world = world
        self.lines = RecordLines(world.logs)

    @property
    def label(self) -> str:
        return f"fixture world {self.world.root}"

    def searched(self, service: str | None) -> Searched:
        return Searched(parts=(self.lines,), services=self.world.service_names)


def fixture_sources(world: World, synonyms: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """The world's source of each kind, keyed as tools/sources/active.py names the kinds."""
    return {"metrics": FixtureMetrics(world), "logs": FixtureLogs(world, synonyms),
            "runbooks": RunbookDirectory(world.root / "runbooks")}

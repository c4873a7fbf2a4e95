"""The fixture world: services, alerts, logs, runbooks and search synonyms, loaded from data files,
and served as a source of every kind: its alerts answer query_metrics, its log records query_logs,
its runbooks directory lookup_knowledge. It answers every tool no setting points elsewhere.

The files under ``tools/world/`` are the single source of truth; a reviewer reads them directly.
Set ``DIAGNOSIS_WORLD`` to point the tools at another directory with the same layout, or at an
overlay: a directory whose ``world.json`` names the world it ``extends`` (a path relative to it)
and holds only what it adds. Its services and alerts follow the base's, its log records are merged
with the base's by time (the base's first at the same instant; its own are labelled
`<directory>/logs.jsonl:N`), and its runbooks directory and synonyms, when it has them, replace the
base's.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import datetime
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
    runbooks_dir: Path
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


def _load_logs(path: Path, label: str | None = None) -> list[dict[str, Any]]:
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
                     "message": entry.message, "source": f"{label or path.name}:{where.rsplit(':', 1)[1]}", "format": entry.format})
    return logs


def load_synonyms(path: Path) -> dict[str, tuple[str, ...]]:
    """Groups of query terms that name the same concept; keys starting with "_" are comments."""
    raw = _read_json(path)
    if not isinstance(raw, dict) or not all(
            isinstance(terms, list) and all(isinstance(t, str) for t in terms)
            for group, terms in raw.items() if not group.startswith("_")):
        raise WorldError(f"{path}: expected an object of synonym groups, each a list of terms")
    return {group: tuple(term.casefold() for term in terms) for group, terms in raw.items() if not group.startswith("_")}


def _list(path: Path, fields: tuple[str, ...], what: str) -> list[dict[str, Any]]:
    items = _read_json(path)
    if not isinstance(items, list):
        raise WorldError(f"{path}: expected a list of {what}")
    for i, item in enumerate(items):
        _require(item, fields, f"{path.name}[{i}]")
    return items


def _runbooks(directory: Path) -> tuple[Runbook, ...]:
    paths = sorted(directory.glob("*.md"))
    if not paths:
        raise WorldError(f"no runbooks found under {directory}")
    try:
        return tuple(load_runbook(p) for p in paths)
    except SourceError as exc:
        raise WorldError(str(exc)) from None


def synonyms_file(root: Path) -> Path:
    """The synonyms file a world directory reads: its own, else that of the world it extends."""
    seen = set()
    while not (root / "synonyms.json").exists() and (root / "world.json").exists() and root not in seen:
        seen.add(root)
        declared = _read_json(root / "world.json")
        if not isinstance(declared, dict) or not isinstance(declared.get("extends"), str):
            break
        root = (root / declared["extends"]).resolve()
    return root / "synonyms.json"


def _when(record: dict[str, Any]) -> tuple[int, float | str]:
    """A record's time as an instant, so that times written with other offsets fall in order; a time
    that is no ISO 8601 instant sorts after every one, by its text."""
    stamp = str(record["timestamp"])
    try:
        return 0, datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 1, stamp


def _base(root: Path, seen: tuple[Path, ...]) -> World | None:
    """The world `root` extends, per its world.json; None for a whole world."""
    if not (root / "world.json").exists():
        return None
    declared = _read_json(root / "world.json")
    if not isinstance(declared, dict) or not isinstance(declared.get("extends"), str):
        raise WorldError(f"{root / 'world.json'}: expected an object whose \"extends\" is the path of the world it adds to")
    base = (root / declared["extends"]).resolve()
    if base in seen:
        raise WorldError(f"{root / 'world.json'}: {base} extends itself round a loop")
    return load_world(base, (*seen, base))


def load_world(directory: Path | str | None = None, seen: tuple[Path, ...] = ()) -> World:
    root = Path(directory or current().world or DEFAULT_WORLD_DIR)
    if not root.is_dir():
        raise WorldError(f"fixture world directory not found: {root}")
    base = _base(root, seen or (root.resolve(),))
    if base is None:
        return World(root=root, runbooks_dir=root / "runbooks",
                     services=tuple(_list(root / "services.json", ("name",), "services")),
                     alerts=tuple(_list(root / "alerts.json", ALERT_FIELDS, "alerts")),
                     logs=tuple(_load_logs(root / "logs.jsonl")), runbooks=_runbooks(root / "runbooks"),
                     synonyms=load_synonyms(root / "synonyms.json"))

    def own(name: str, fields: tuple[str, ...], what: str) -> tuple[dict[str, Any], ...]:
        return tuple(_list(root / name, fields, what)) if (root / name).exists() else ()

    logs = _load_logs(root / "logs.jsonl", f"{root.name}/logs.jsonl") if (root / "logs.jsonl").exists() else []
    runbooks_dir = root / "runbooks" if (root / "runbooks").is_dir() else base.runbooks_dir
    return World(root=root, runbooks_dir=runbooks_dir,
                 services=base.services + own("services.json", ("name",), "services"),
                 alerts=base.alerts + own("alerts.json", ALERT_FIELDS, "alerts"),
                 # A stable sort: records of one time keep their order, the base's first.
                 logs=tuple(sorted([*base.logs, *logs], key=_when)),
                 runbooks=_runbooks(runbooks_dir) if runbooks_dir != base.runbooks_dir else base.runbooks,
                 synonyms=load_synonyms(root / "synonyms.json") if (root / "synonyms.json").exists() else base.synonyms)


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
            "runbooks": RunbookDirectory(world.runbooks_dir)}

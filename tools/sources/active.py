"""Which source answers each tool, chosen by settings: BACKENDS maps each setting to the source it
turns on, and the fixture world answers every tool that no set setting points elsewhere. Each
setting's default is declared in contracts/settings.py.

| setting | source |
| --- | --- |
| `DIAGNOSIS_PROMETHEUS_URL` | query_metrics reads that Prometheus server's alerting rules |
| `DIAGNOSIS_PROMETHEUS_SERVICE_LABEL` | the alert label that names the service |
| `DIAGNOSIS_PROMETHEUS_TIMEOUT` | seconds a whole request to the server may take, answer included |
| `DIAGNOSIS_LOGS_DIR` | query_logs searches every regular file under that directory, each read by its format (docs/sources.md) |
| `DIAGNOSIS_RUNBOOKS_DIR` | lookup_knowledge ranks the Markdown runbooks (regular files) in that directory |
| `DIAGNOSIS_SYNONYMS` | a JSON file of synonym groups for log search and scope (default: the world's) |
| `DIAGNOSIS_WORLD` | the fixture world directory behind every tool not set above |
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from tools.sources.errors import SourceError
from tools.sources.fixture import (
    DEFAULT_WORLD_DIR,
    WorldError,
    fixture_sources,
    get_world,
    load_synonyms,
    synonyms_file,
)
from tools.sources.interfaces import LogSource, MetricsSource, RunbookSource, Settings
from tools.sources.logs.directory import LogDirectory
from tools.sources.prometheus import Prometheus
from tools.sources.runbooks import RunbookDirectory
from contracts.settings import value

KINDS = {"metrics": MetricsSource, "logs": LogSource, "runbooks": RunbookSource}
# The setting that turns each source on. The source class implements one interface of KINDS, is
# built by `from_settings(the setting's value, Settings)`, and names in OPTIONS any further
# settings it reads. A new backend is its file and one line here.
BACKENDS: dict[str, type] = {
    "DIAGNOSIS_PROMETHEUS_URL": Prometheus,
    "DIAGNOSIS_LOGS_DIR": LogDirectory,
    "DIAGNOSIS_RUNBOOKS_DIR": RunbookDirectory,
}


def setting_names() -> tuple[str, ...]:
    """Every setting that decides a source, those of the backends registered now included."""
    named = [name for setting, source in BACKENDS.items() for name in (setting, *getattr(source, "OPTIONS", ()))]
    return ("DIAGNOSIS_WORLD", *named, "DIAGNOSIS_SYNONYMS")


SETTINGS = setting_names()


@dataclass(frozen=True)
class Sources:
    metrics: MetricsSource
    logs: LogSource
    runbooks: RunbookSource
    synonyms: dict[str, tuple[str, ...]]


def _kind(source: type) -> str:
    kinds = [kind for kind, interface in KINDS.items() if issubclass(source, interface)]
    if len(kinds) != 1:
        raise TypeError(f"{source.__name__} must implement one of MetricsSource, LogSource and RunbookSource")
    return kinds[0]


def _chosen(env: dict[str, str | None]) -> dict[str, tuple[str, type]]:
    """The setting and source class that answer each kind a set setting chooses."""
    chosen: dict[str, tuple[str, type]] = {}
    for setting, source in BACKENDS.items():
        if env[setting] is None:
            continue
        kind = _kind(source)
        if kind in chosen:
            raise SourceError(f"{chosen[kind][0]} and {setting} both choose the {kind} source; set only one of them")
        chosen[kind] = (setting, source)
    return chosen


def _build(env: dict[str, str | None]) -> Sources:
    chosen = _chosen(env)
    world_dir = Path(env["DIAGNOSIS_WORLD"] or DEFAULT_WORLD_DIR)
    try:
        world = get_world() if len(chosen) < len(KINDS) else None
        synonyms = load_synonyms(Path(env["DIAGNOSIS_SYNONYMS"] or synonyms_file(world_dir)))
    except WorldError as exc:
        raise SourceError(str(exc)) from None
    settings = Settings(values=env, synonyms=synonyms)
    built = {kind: source.from_settings(env[setting], settings) for kind, (setting, source) in chosen.items()}
    if world is not None:
        fixture = fixture_sources(world, synonyms)
        built.update({kind: fixture[kind] for kind in KINDS if kind not in chosen})
    return Sources(**built, synonyms=synonyms)


_lock = threading.Lock()
_built: dict[tuple, Sources] = {}


def active_sources() -> Sources:
    """The sources the current settings name; a setting that cannot be used raises SourceError."""
    env = {name: value(name) for name in setting_names()}
    key = (tuple(env.items()), tuple(BACKENDS.items()))
    with _lock:
        if key not in _built:
            _built[key] = _build(env)
        return _built[key]

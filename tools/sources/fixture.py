"""The fixture world as a source of every kind: its alerts answer query_metrics, its log records
query_logs, its runbooks directory lookup_knowledge. It answers every tool no setting points elsewhere."""

from __future__ import annotations

from typing import Any

from tools.sources.interfaces import MetricsSource
from tools.sources.logs.records import RecordLines, RecordLogSource, Searched
from tools.sources.runbooks import RunbookDirectory
from tools.world import ALERT_STATES, World


class FixtureMetrics(MetricsSource):
    alert_states = ALERT_STATES

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

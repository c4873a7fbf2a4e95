"""The fixture world as a source: its alerts answer query_metrics, its log records query_logs."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from tools.sources.logs import LogRecords
from tools.world import ALERT_STATES, World


class FixtureMetrics:
    alert_states = ALERT_STATES

    def __init__(self, world: World):
        self.world = world

    @property
    def label(self) -> str:
        return f"fixture world {self.world.root}"

    def call(self) -> AbstractContextManager[None]:
        """One tool call: the fixture answers at once, so there is no deadline to keep."""
        return nullcontext()

    def alerts(self) -> list[dict[str, Any]]:
        return [dict(a) for a in self.world.alerts]

    def with_samples(self, alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return alerts

    def alert_names(self) -> tuple[str, ...]:
        return tuple(sorted({a["name"] for a in self.world.alerts}))

    def services(self) -> tuple[str, ...]:
        return tuple(sorted(self.world.service_names))


class FixtureLogs:
    def __init__(self, world: World):
        self.world = world

    @property
    def label(self) -> str:
        return f"fixture world {self.world.root}"

    def records(self) -> LogRecords:
        return LogRecords(label=self.label, records=self.world.logs, services=self.world.service_names)

"""What a source must answer, one interface per tool: alerts, log lines, runbook sections.

The tools check their arguments, filter and word the answer; a source only fetches. Every method
may raise SourceError (the source could not answer), which the tool turns into a failed call,
never a no-hit. A log search whose query the source cannot read raises UnreadableQuery, which the
tool reports as a bad argument. What a source left out or cut goes in its `notes`, which the tool
adds to the message of the call (tools/sources/limits.py says how much a source may hand over).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any


class MetricsSource(ABC):
    """Alerts in the `$.alerts[i]` shape: name, state, service, and whatever fields the source has."""

    # The states its alerts can be in, which query_metrics accepts as `state`.
    alert_states: tuple[str, ...]

    @property
    @abstractmethod
    def label(self) -> str:
        """Which source answered, as each invocation records it."""

    def call(self) -> AbstractContextManager[None]:
        """One tool call (or one reading of the catalog), whose requests share its deadline; a source
        that answers at once has no deadline to keep."""
        return nullcontext()

    @abstractmethod
    def alerts(self) -> list[dict[str, Any]]:
        """Every active alert, without samples."""

    def with_samples(self, alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The alerts with their recent values (`samples`), for the few a call returns."""
        return alerts

    @abstractmethod
    def alert_names(self) -> tuple[str, ...]:
        """The names of the alerts the source can raise, sorted."""

    @abstractmethod
    def services(self) -> tuple[str, ...]:
        """The services it has series for, sorted."""


@dataclass(frozen=True)
class LogQuery:
    """One log search, its arguments already checked by the tool."""

    text: str
    service: str | None
    # One of tools.sources.logs.levels.LOG_LEVELS, or None for every level.
    level: str | None
    limit: int
    # The share of the query's concepts a line must have (tools/text/search.py). Only code asks for
    # less than all, to look again before an all-clear; a source that cannot match a share must
    # return more lines rather than fewer, or a wrongly worded "nothing found" could pass.
    min_share: float = 1.0


@dataclass(frozen=True)
class LogHits:
    # The lines returned (at most the query's limit, best matches first, then shown oldest first),
    # each with timestamp, level, service and message.
    logs: tuple[dict[str, Any], ...]
    # How many lines matched in all.
    total: int
    # The services the source knows: a no-hit for a service not among them names them.
    services: frozenset[str]
    notes: tuple[str, ...] = ()
    skipped_files: int = 0
    # What in the query's scope the search did not read, each place named (a file it could not open,
    # the part of a file past the read bound). A search that found nothing proves absence only when
    # this is empty, so a source that cannot say what it read must say so here.
    unread: tuple[str, ...] = ()


class UnreadableQuery(ValueError):
    """A query the source cannot search with (it names nothing to look for)."""


class LogSource(ABC):
    """Log lines, each with timestamp, level, service and message, searched where they are kept."""

    @property
    @abstractmethod
    def label(self) -> str:
        """Which source answered, as each invocation records it."""

    @abstractmethod
    def search(self, query: LogQuery) -> LogHits:
        """The lines that match the query, searched where the lines are."""

    @abstractmethod
    def services(self) -> Iterable[str]:
        """The services whose lines the source holds, for the catalog."""


@dataclass(frozen=True)
class RunbookHits:
    # Sections ranked best first, each with title, source, content and score.
    blocks: tuple[dict[str, Any], ...]
    notes: tuple[str, ...] = ()
    skipped_files: int = 0


class RunbookSource(ABC):
    """Runbook sections, which say what to check and are never evidence of what is happening."""

    @property
    @abstractmethod
    def label(self) -> str:
        """Which source answered, as each invocation records it."""

    @abstractmethod
    def search(self, query: str, top_k: int) -> RunbookHits:
        """At most top_k sections that concern the query; none when nothing does."""


@dataclass(frozen=True)
class Settings:
    """What a source is built from: the value of each source setting (None when unset) and the
    synonym groups the catalog and log search share."""

    values: Mapping[str, str | None]
    synonyms: dict[str, tuple[str, ...]]

    def __getitem__(self, name: str) -> str | None:
        # Only the settings the registry names are here, so a source cannot read one the cache ignores.
        return self.values[name]

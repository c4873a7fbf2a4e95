"""What the active sources know about: services, alert names, log levels, alert states, synonyms.

The program reads names from here (for the tool-call grammar, the scope of a question and the
relevance of a claim), never from a source directly, so any source only has to answer these.
A source that cannot answer leaves its names out and says why in `problems`; the tool calls to it
then fail on their own, and a diagnosis built on them cannot pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.sources.active import active_sources
from tools.sources.errors import SourceError
from tools.sources.logs.levels import LOG_LEVELS


@dataclass(frozen=True)
class Catalog:
    services: tuple[str, ...]
    alert_names: tuple[str, ...]
    log_levels: tuple[str, ...]
    alert_states: tuple[str, ...]
    # Groups of casefolded terms that name the same concept ("hikaricp", "连接池", ...).
    synonyms: dict[str, tuple[str, ...]]
    problems: tuple[str, ...] = field(default=())

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a claim or an answer may only state when its evidence states it."""
        return self.services + self.alert_names + self.alert_states

    def topic_groups(self) -> list[tuple[str, ...]]:
        """Every concept the catalog can name: the synonym groups, each with the alert names that
        spell one of its terms (PodOOMKilled joins oom, oomkilled, outofmemoryerror), and every
        other alert name on its own."""
        groups = [list(group) for group in self.synonyms.values()]
        for name in self.alert_names:
            folded = name.casefold()
            homes = [g for g in groups if folded in g or any(len(term) >= 3 and term in folded for term in g)]
            for group in homes:
                if folded not in group:
                    group.append(folded)
            if not homes:
                groups.append([folded])
        return [tuple(group) for group in groups]


def active_catalog() -> Catalog:
    try:
        sources = active_sources()
    except SourceError as exc:
        return Catalog(services=(), alert_names=(), log_levels=LOG_LEVELS, alert_states=(), synonyms={},
                       problems=(str(exc),))
    services: set[str] = set()
    alert_names: tuple[str, ...] = ()
    problems = []
    try:
        with sources.metrics.call():
            services.update(sources.metrics.services())
            alert_names = sources.metrics.alert_names()
    except SourceError as exc:
        problems.append(f"metrics: {exc}")
    try:
        services.update(sources.logs.services())
    except SourceError as exc:
        problems.append(f"logs: {exc}")
    return Catalog(
        services=tuple(sorted(services)),
        alert_names=tuple(sorted(alert_names)),
        log_levels=LOG_LEVELS,
        alert_states=sources.metrics.alert_states,
        synonyms=dict(sources.synonyms),
        problems=tuple(problems),
    )

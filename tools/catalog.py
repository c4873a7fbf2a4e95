"""What the active evidence source knows about: services, alert names, log levels, synonyms.

The program reads names from here (for the tool-call grammar, the scope of a question and the
relevance of a claim), never from the fixture world directly, so a different source only has to
provide a catalog.
"""

from __future__ import annotations

from dataclasses import dataclass

from tools.world import ALERT_STATES, LOG_LEVELS, get_world


@dataclass(frozen=True)
class Catalog:
    services: tuple[str, ...]
    alert_names: tuple[str, ...]
    log_levels: tuple[str, ...]
    alert_states: tuple[str, ...]
    # Groups of casefolded terms that name the same concept ("hikaricp", "连接池", ...).
    synonyms: dict[str, tuple[str, ...]]

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a claim or an answer may only state when its evidence states it."""
        return self.services + self.alert_names + self.alert_states

    def topic_groups(self) -> list[tuple[str, ...]]:
        """Every concept the catalog can name: the synonym groups, and each alert name on its own
        unless a synonym group already holds it."""
        groups = list(self.synonyms.values())
        grouped = {term for group in groups for term in group}
        groups += [(name.casefold(),) for name in self.alert_names if name.casefold() not in grouped]
        return groups


def active_catalog() -> Catalog:
    world = get_world()
    return Catalog(
        services=tuple(sorted(world.service_names)),
        alert_names=tuple(sorted({a["name"] for a in world.alerts})),
        log_levels=LOG_LEVELS,
        alert_states=ALERT_STATES,
        synonyms=dict(world.synonyms),
    )

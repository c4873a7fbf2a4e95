"""A log source whose lines the program reads itself and searches with tools/search.py: the fixture
world's records, or a directory of log files. What a search left unread in its scope is named."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

from tools.search import read_query
from tools.sources.interfaces import LogHits, LogQuery, LogSource, UnreadableQuery
from tools.sources.logs.reading import Lines, sort_time


@dataclass(frozen=True)
class Searched:
    """What a search runs over: the records of each file read, and what it could not read."""

    parts: tuple[Lines, ...]
    services: frozenset[str]
    # Each said in the message of the search: what was cut, skipped or left out.
    notes: tuple[str, ...] = ()
    # The places in the search's scope whose lines were not searched.
    unread: tuple[str, ...] = ()
    skipped_files: int = 0


class RecordLogSource(LogSource):
    def __init__(self, synonyms: dict[str, tuple[str, ...]]):
        self.synonyms = synonyms

    @abstractmethod
    def searched(self, service: str | None) -> Searched:
        """The records a search for `service` (None: every service) runs over, and what went unread."""

    def services(self) -> frozenset[str]:
        return self.searched(None).services

    def search(self, query: LogQuery) -> LogHits:
        found = self.searched(query.service)
        wanted = read_query(query.text, self.synonyms, found.services)
        if not wanted.concepts and query.service is None and query.level is None:
            raise UnreadableQuery(f"query {query.text!r} names nothing to search for; give a keyword, a service "
                                  "or a level")
        matched = []
        for lines in found.parts:
            for at, hits in lines.index.search(wanted, query.min_share).items():
                record = lines.records[at]
                # A line of a file that holds many services' lines, naming none itself, may be any one's.
                if query.service not in (None, record["service"]) and record.get("service_from") != "file":
                    continue
                # A line whose format gives no level may be of any: a level filter cannot leave it out.
                if query.level is not None and record["level"] not in (query.level, None):
                    continue
                matched.append((hits, sort_time(record), record))
        # The best matches first and, among equals, the newest; shown oldest first.
        matched.sort(key=lambda item: item[1], reverse=True)
        matched.sort(key=lambda item: -item[0])
        kept = sorted((item[2] for item in matched[:query.limit]), key=sort_time)
        return LogHits(logs=tuple(kept), total=len(matched), services=found.services, notes=found.notes,
                       skipped_files=found.skipped_files, unread=found.unread)


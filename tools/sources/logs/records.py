"""A log source whose lines the program reads itself and searches with tools/text/search.py: the fixture
world's records, or a directory of log files. What a search left unread in its scope is named.

Which records a search's filters keep is decided here, for every source alike:
- a service filter keeps a record of that service, compared as a name (NFKC, any case): the service
  its line names, or the service of the file's place, which is the record's too (a JSON line that
  names its logger, a syslog line its program, in the directory of the service they run for); a
  line of a file that holds many services' lines (directly under the root) that names none may be
  any service's and is kept by every filter;
- a level filter keeps a record of that level, or one whose format gives no level (it may be of
  any), or one into which a line of that level was joined (a print of `ERROR: ...` after an INFO
  line is its own word about itself).

The records of a file are held in columns (one string of all messages, arrays of offsets and
codes) rather than a dict each: a file of short lines would otherwise cost some hundreds of bytes
a line, and a search holds up to its bound of them. A record becomes a dict when it is returned.
"""

from __future__ import annotations

import functools
import itertools
import json
from abc import ABC, abstractmethod
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tools.text.folding import fold
from tools.text.search import Index, read_query
from tools.sources.interfaces import LogHits, LogQuery, LogSource, UnreadableQuery
from tools.sources.logs.formats import Entry, sort_key
from tools.sources.logs.levels import LOG_LEVELS
from tools.sources.logs.places import Place
from tools.sources.limits import clip

# Level codes: 0 for a line whose format gives none, then the scale. Bits 3 and up of a record's
# code mark the levels of lines joined into it.
LEVELS = (None, *LOG_LEVELS)
_CODE = {level: code for code, level in enumerate(LEVELS)}
# The field a record gets when its line names a service other than its place's.
PLACE_FIELD = "place_service"
_FIELDS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def level_bit(level: str | None) -> int:
    """The bit that marks a joined line of this level in a record's code (0 for no level)."""
    return 1 << (_CODE[level] + 2) if level else 0


def searchable(record: dict[str, Any], message: str) -> str:
    """What a search reads of a record: its level, service, message and fields."""
    return _searchable(record["level"], str(record["service"]), message, record.get("fields") or ())


def _searchable(level: str | None, service: str, message: str, fields: Iterable) -> str:
    # Nothing around the message where there is nothing to add: a message may be 64 MiB long, and
    # a space at either end would make the index copy it.
    shown = " ".join(f"{k}={v}" for k, v in fields)
    return " ".join(part for part in (level, service, message, shown) if part)


@functools.lru_cache(maxsize=4096)
def service_name(name: str) -> str:
    """A service as log filters compare it: NFKC, any case, no edge spaces."""
    return fold(name).strip()


class Lines(ABC):
    """The records a search runs over, with their index."""

    index: Index

    @abstractmethod
    def __len__(self) -> int:
        """How many records."""

    @abstractmethod
    def record(self, at: int) -> dict[str, Any]:
        """The record as the tool returns it: timestamp, level, service, message, and what else it has."""

    @abstractmethod
    def stamp(self, at: int) -> str:
        """The record's time as written, for ordering."""

    @abstractmethod
    def keeps(self, at: int, service: str | None, level: str | None) -> bool:
        """Whether the filters keep the record; `service` is folded (tools.text.folding.fold)."""


class RecordLines(Lines):
    """Records given as dicts (the fixture world's), kept as they are."""

    def __init__(self, records: Iterable[dict[str, Any]]):
        self.records = tuple(records)
        self.index = Index(searchable(r, r["message"]) for r in self.records)
        self._services = [service_name(str(r["service"])) for r in self.records]

    def __len__(self) -> int:
        return len(self.records)

    def record(self, at: int) -> dict[str, Any]:
        return dict(self.records[at])

    def stamp(self, at: int) -> str:
        return str(self.records[at].get("timestamp") or "")

    def keeps(self, at: int, service: str | None, level: str | None) -> bool:
        record = self.records[at]
        if level is not None and record["level"] not in (level, None):
            return False
        return service is None or self._services[at] == service or record.get("service_from") == "file"


class _Column:
    """Strings kept as one, with where each begins: joined in slices, so no list of all of them is held."""

    SLICE = 4096

    def __init__(self):
        self.parts: list[str] = []
        self.pending: list[str] = []
        self.offsets = array("q", [0])
        self.text = ""

    def add(self, value: str) -> None:
        self.pending.append(value)
        if len(self.pending) >= self.SLICE:
            self._flush()

    def _flush(self) -> None:
        ends = itertools.accumulate(map(len, self.pending), initial=self.offsets[-1])
        self.offsets.extend(itertools.islice(ends, 1, None))
        self.parts.append("".join(self.pending))
        self.pending = []

    def finish(self) -> None:
        self._flush()
        self.text = "".join(self.parts)
        self.parts = []

    def __getitem__(self, at: int) -> str:
        return self.text[self.offsets[at]:self.offsets[at + 1]]


class FileLines(Lines):
    """The records of one log file, in columns; the service of its place for the lines that name none."""

    def __init__(self, name: str, place: Place):
        self.name = name
        self.place = place
        self._place = service_name(place.service)
        self._messages, self._stamps, self._fields = _Column(), _Column(), _Column()
        self._levels = bytearray()
        self._services = array("l")  # an index into _names, or -1: the place's
        self._numbers = array("q")
        self._formats = bytearray()
        self._names: list[str] = []
        self._folded: list[str] = []
        self._codes: dict[str, int] = {}  # a service as a line writes it -> its index in _names
        self._format_names: list[str] = []

    def add(self, entry: Entry, message: str, number: int, joined_levels: int = 0) -> str:
        """Adds a record read from its entry and whole message; returns what a search reads of it."""
        service = entry.service
        fields = entry.fields
        if service is None:
            code = -1
        else:
            code = self._codes.setdefault(service, len(self._names))
            if code == len(self._names):
                self._names.append(service)
                self._folded.append(service_name(service))
            if not self.place.shared and self._folded[code] != self._place:
                fields = (*fields, (PLACE_FIELD, self.place.service))
        if entry.format not in self._format_names:
            self._format_names.append(entry.format)
        self._services.append(code)
        self._levels.append(_CODE[entry.level] | joined_levels)
        self._numbers.append(number)
        self._formats.append(self._format_names.index(entry.format))
        self._messages.add(clip(message))
        self._stamps.add(entry.timestamp)
        self._fields.add(_FIELDS(fields) if fields else "")
        return _searchable(entry.level, service or self.place.service, message, fields)

    def finish(self, texts: Iterable[str]) -> FileLines:
        """Ends the reading: the columns joined and the records' search texts indexed."""
        self.index = Index(texts)
        for column in (self._messages, self._stamps, self._fields):
            column.finish()
        return self

    @property
    def named(self) -> frozenset[str]:
        """The services the lines name, folded."""
        return frozenset(self._folded)

    @property
    def services(self) -> set[str]:
        """The services the lines name, as they write them."""
        return set(self._names)

    def __len__(self) -> int:
        return len(self._numbers)

    def stamp(self, at: int) -> str:
        return self._stamps[at]

    def keeps(self, at: int, service: str | None, level: str | None) -> bool:
        if level is not None:
            code = self._levels[at]
            if code & 7 and LEVELS[code & 7] != level and not code & level_bit(level):
                return False
        if service is None:
            return True
        named = self._services[at]
        if named < 0:
            return self.place.shared or self._place == service
        return self._folded[named] == service or (not self.place.shared and self._place == service)

    def record(self, at: int) -> dict[str, Any]:
        named = self._services[at]
        record = {"timestamp": self._stamps[at], "level": LEVELS[self._levels[at] & 7],
                  "service": self.place.service if named < 0 else self._names[named],
                  "message": self._messages[at], "source": f"{self.name}:{self._numbers[at]}",
                  "format": self._format_names[self._formats[at]],
                  "service_from": self.place.how if named < 0 else "line"}
        if fields := self._fields[at]:
            record["fields"] = json.loads(fields)
        return record


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
        wanted = read_query(query.text, self.synonyms, found.services, implied=query.service)
        if not wanted.concepts and query.service is None and query.level is None:
            raise UnreadableQuery(f"query {query.text!r} names nothing to search for; give a keyword, a service "
                                  "or a level")
        service = None if query.service is None else service_name(query.service)
        matched = []
        for lines in found.parts:
            for at, hits in lines.index.search(wanted, query.min_share).items():
                if lines.keeps(at, service, query.level):
                    matched.append((hits, sort_key(lines.stamp(at)), lines, at))
        # The best matches first and, among equals, the newest; shown oldest first.
        matched.sort(key=lambda item: item[1], reverse=True)
        matched.sort(key=lambda item: -item[0])
        kept = sorted(matched[:query.limit], key=lambda item: item[1])
        return LogHits(logs=tuple(lines.record(at) for _, _, lines, at in kept), total=len(matched),
                       services=found.services, notes=found.notes, skipped_files=found.skipped_files,
                       unread=found.unread)

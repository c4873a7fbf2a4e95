"""Log lines to search where the program holds them: the fixture's records, or a directory of log
files read as they are now, both searched by the matching of tools/search.py.

A directory holds `*.log` files of `[time][LEVEL][service] message` lines and `*.jsonl` files of
JSON objects with time (or timestamp), level, service and message. A line that is neither (or is
not UTF-8, or names a time or service longer than a name may be) is counted and reported with
every search, never dropped silently. Files are re-read when they change, so a search sees lines
written since the last one.

Only regular files inside the directory are read (tools/sources/files.py), each up to its newest
MAX_FILE_BYTES and all of them up to MAX_DIRECTORY_BYTES; a message is cut at MAX_ITEM_CHARS. What
was skipped, read in part or cut is named in the message of every search (tools/sources/limits.py).
"""

from __future__ import annotations

import json
import os
import re
import threading
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.search import line_matches, read_line, read_query
from tools.sources.errors import SourceError
from tools.sources.files import read_bytes, regular_files
from tools.sources.interfaces import LogHits, LogQuery, LogSource, Settings, UnreadableQuery
from tools.sources.limits import (
    MAX_DIRECTORY_BYTES,
    MAX_FILE_BYTES,
    MAX_ITEM_CHARS,
    MAX_NAME_CHARS,
    NAMED_PLACES,
    clip,
    places,
    size_text,
)

LOG_LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
LEVEL_ALIASES = {"WARNING": "WARN", "ERR": "ERROR", "FATAL": "ERROR", "CRITICAL": "ERROR", "TRACE": "DEBUG"}
BRACKETED = re.compile(r"^\[(?P<time>[^\]]+)\]\s*\[(?P<level>[A-Za-z]+)\]\s*\[(?P<service>[^\]]+)\]\s*(?P<message>.*\S)\s*$")


def normal_level(level: Any) -> str | None:
    wanted = LEVEL_ALIASES.get(str(level).strip().upper(), str(level).strip().upper())
    return wanted if wanted in LOG_LEVELS else None


@dataclass(frozen=True)
class LogRecords:
    """What a search runs over: the records, the services they name, and the lines left unread."""

    records: tuple[dict[str, Any], ...]
    services: frozenset[str]
    unparsed: int = 0
    unparsed_where: tuple[str, ...] = ()
    skipped_files: int = 0
    # What the reading left out or cut, each said in the message of every search.
    notes: tuple[str, ...] = ()
    # Each place whose lines were not searched: a no-hit over them proves no absence.
    unread: tuple[str, ...] = ()


def parse_line(line: str) -> dict[str, Any] | None:
    """One log line as a record, or None when it is in neither supported form."""
    text = line.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            return None
        if not isinstance(obj, dict):
            return None
        stamp = obj.get("timestamp", obj.get("time"))
        fields = (stamp, obj.get("level"), obj.get("service"), obj.get("message"))
        if not all(isinstance(f, str) and f.strip() for f in fields):
            return None
        if any(len(f) > MAX_NAME_CHARS for f in fields[:3]):
            return None
        level = normal_level(obj["level"])
        if level is None:
            return None
        return {"timestamp": stamp.strip(), "level": level, "service": obj["service"].strip(),
                "message": obj["message"].strip()}
    match = BRACKETED.match(text)
    if not match or normal_level(match["level"]) is None:
        return None
    if any(len(match[f]) > MAX_NAME_CHARS for f in ("time", "service")):
        return None
    return {"timestamp": match["time"].strip(), "level": normal_level(match["level"]),
            "service": match["service"].strip(), "message": match["message"]}


class RecordLogSource(LogSource):
    """A log source whose lines the program reads itself (`records`) and searches line by line."""

    def __init__(self, synonyms: dict[str, tuple[str, ...]]):
        self.synonyms = synonyms

    @abstractmethod
    def records(self) -> LogRecords:
        """Every line as a record, and what could not be read."""

    def services(self) -> frozenset[str]:
        return self.records().services

    def search(self, query: LogQuery) -> LogHits:
        found = self.records()
        wanted = read_query(query.text, self.synonyms, found.services)
        if not wanted.concepts and query.service is None and query.level is None:
            raise UnreadableQuery(f"query {query.text!r} names nothing to search for; give a keyword, a service "
                                  "or a level")
        scored = []
        for record in found.records:
            if query.service is not None and record["service"] != query.service:
                continue
            if query.level is not None and record["level"] != query.level:
                continue
            matches, word_hits = line_matches(read_line(f"{record['level']} {record['service']} {record['message']}"),
                                              wanted, query.min_share)
            if matches:
                scored.append((-word_hits, record["timestamp"], record))
        scored.sort(key=lambda item: (item[0], item[1]))
        kept = sorted((item[2] for item in scored[:query.limit]), key=lambda r: r["timestamp"])
        notes = found.notes
        if found.unparsed:
            # Lines the search could not read may hold what was asked for: the message must say so.
            notes = (f"{found.unparsed} line(s) in the log files could not be parsed and were not searched "
                     f"(first: {', '.join(found.unparsed_where)})", *notes)
        return LogHits(logs=tuple(kept), total=len(scored), services=found.services, notes=notes,
                       unparsed_lines=found.unparsed, skipped_files=found.skipped_files, unread=found.unread)


class LogDirectory(RecordLogSource):
    @classmethod
    def from_settings(cls, root: str, settings: Settings) -> LogDirectory:
        return cls(Path(root), settings.synonyms)

    def __init__(self, root: Path, synonyms: dict[str, tuple[str, ...]]):
        super().__init__(synonyms)
        self.root = root
        self._lock = threading.Lock()
        # real path -> (what was read: (inode, mtime_ns, size, byte limit), the file's reading)
        self._files: dict[Path, tuple[tuple[int, int, int, int], _FileReading]] = {}

    @property
    def label(self) -> str:
        return f"log directory {self.root}"

    def _read(self, name: str, path: Path, status: os.stat_result, limit: int) -> _FileReading:
        key = (status.st_ino, status.st_mtime_ns, status.st_size, limit)
        cached = self._files.get(path)
        if cached and cached[0] == key:
            return cached[1]
        data, start = read_bytes(path, limit, tail=True)
        reading = _FileReading()
        if start:
            # The newest part of a file too big to read whole begins inside a line: that piece is
            # dropped, and lines are numbered from the first whole one.
            whole = data.find(b"\n") + 1
            data = data[whole:] if whole else b""
            reading.partial = f"{name} is {size_text(status.st_size)}: only its last {size_text(limit)} were read"
            name = f"{name} (from byte {start + whole})"
        for number, raw in enumerate(data.split(b"\n"), start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                reading.unparsed.append(f"{name}:{number}")
                continue
            if not line.strip():
                continue
            record = parse_line(line)
            if record is None:
                reading.unparsed.append(f"{name}:{number}")
                continue
            if len(record["message"]) > MAX_ITEM_CHARS:
                record["message"] = clip(record["message"])
                reading.cut.append(f"{name}:{number}")
            reading.records.append(record)
        self._files[path] = (key, reading)
        return reading

    def records(self) -> LogRecords:
        if not self.root.is_dir():
            raise SourceError(f"log directory {self.root} does not exist")
        listing = regular_files(self.root, ("*.log", "*.jsonl"), recursive=True)
        skipped = list(listing.skipped)
        readings: list[_FileReading] = []
        budget = MAX_DIRECTORY_BYTES
        with self._lock:
            for name, path, status in listing.files:
                if budget <= 0:
                    skipped.append(f"{name} (the {size_text(MAX_DIRECTORY_BYTES)} a search reads were used up)")
                    continue
                limit = min(MAX_FILE_BYTES, budget)
                try:
                    readings.append(self._read(name, path, status, limit))
                except OSError as exc:
                    skipped.append(f"{name} (cannot be read: {exc.strerror or exc})")
                    continue
                budget -= min(status.st_size, limit)
            self._files = {path: self._files[path] for _, path, _ in listing.files if path in self._files}
        if skipped and not readings:
            raise SourceError(f"no log file under {self.root} could be read: {places(skipped)}")
        records = [r for reading in readings for r in reading.records]
        unparsed = [where for reading in readings for where in reading.unparsed]
        cut = [where for reading in readings for where in reading.cut]
        notes = []
        if skipped:
            notes.append(f"{len(skipped)} file(s) were not read: {places(skipped)}")
        notes += [reading.partial for reading in readings if reading.partial]
        if cut:
            notes.append(f"{len(cut)} line(s) longer than {MAX_ITEM_CHARS} characters were cut where marked "
                         f"and searched only that far ({places(cut)})")
        unread = [*skipped, *(reading.partial for reading in readings if reading.partial),
                  *(f"{where} (not parsed)" for where in unparsed), *(f"{where} (cut)" for where in cut)]
        return LogRecords(records=tuple(records), services=frozenset(r["service"] for r in records),
                          unparsed=len(unparsed), unparsed_where=tuple(unparsed[:NAMED_PLACES]),
                          skipped_files=len(skipped), notes=tuple(notes), unread=tuple(unread))


@dataclass
class _FileReading:
    partial: str | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)

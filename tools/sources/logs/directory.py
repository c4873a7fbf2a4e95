"""A directory of log files as they are (`DIAGNOSIS_LOGS_DIR`): every regular file under it, rotated
and compressed ones included, each read by its format (formats.py) with the service of its place
(places.py) for the lines that name none.

A search reads the files of its scope first (the asked service's, and files directly under the
root, which hold many services' lines), then the others, newest first, until it has read
`DIAGNOSIS_LOGS_MAX_BYTES` of text. What of its scope it could not read (a file that cannot be
opened, the older part of a file past the bound) is named in the search's `unread`, so that a
search which found nothing there cannot ground "nothing found". Files are re-read when they change.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from tools.sources.errors import SourceError
from tools.sources.files import regular_files
from tools.sources.interfaces import Settings
from tools.sources.limits import LOG_SEARCH_BYTES, MAX_ITEM_CHARS, places, size_text
from tools.sources.logs.places import Place, Places
from tools.sources.logs.reading import FileReading, UnreadableFile, read_file
from tools.sources.logs.records import RecordLogSource, Searched

SIZE = re.compile(r"^\s*(\d+)\s*(|k|m|g|kb|mb|gb|kib|mib|gib)\s*$", re.IGNORECASE)
UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def max_bytes(value: str | None) -> int:
    """DIAGNOSIS_LOGS_MAX_BYTES: a number of bytes, with an optional K, M or G (binary units)."""
    if value is None:
        return LOG_SEARCH_BYTES
    found = SIZE.match(value)
    if found is None or int(found[1]) == 0:
        raise SourceError(f"DIAGNOSIS_LOGS_MAX_BYTES must be a positive size such as 67108864, 64M or 1G, "
                          f"got {value!r}")
    return int(found[1]) * UNITS[found[2][:1].lower()]


@dataclass(frozen=True)
class _File:
    name: str
    path: Path
    status: os.stat_result
    place: Place

    def in_scope(self, service: str | None) -> bool:
        # Lines of other services' files may name this one too; those files are searched when the
        # bound allows, but only the scope's own files must be read for a search to be complete.
        return service is None or self.place.shared or self.place.service == service


class LogDirectory(RecordLogSource):
    OPTIONS = ("DIAGNOSIS_LOG_SOURCES", "DIAGNOSIS_LOGS_MAX_BYTES")

    @classmethod
    def from_settings(cls, root: str, settings: Settings) -> LogDirectory:
        return cls(Path(root), settings.synonyms, Places.from_file(settings["DIAGNOSIS_LOG_SOURCES"]),
                   max_bytes(settings["DIAGNOSIS_LOGS_MAX_BYTES"]))

    def __init__(self, root: Path, synonyms: dict[str, tuple[str, ...]], where: Places | None = None,
                 limit: int = LOG_SEARCH_BYTES):
        super().__init__(synonyms)
        self.root = root
        self.where = where or Places()
        self.limit = limit
        self._lock = threading.Lock()
        # real path -> (what was read: inode, mtime, size, byte limit; the reading)
        self._files: dict[Path, tuple[tuple[int, int, int, int], FileReading]] = {}

    @property
    def label(self) -> str:
        return f"log directory {self.root}"

    def _reading(self, file: _File, limit: int) -> FileReading:
        status = file.status
        key = (status.st_ino, status.st_mtime_ns, status.st_size, min(limit, status.st_size))
        cached = self._files.get(file.path)
        if cached and cached[0] == key:
            return cached[1]
        reading = read_file(file.path, file.name, limit, file.place)
        self._files[file.path] = (key, reading)
        return reading

    def _listing(self) -> tuple[list[_File], list[str]]:
        if not self.root.is_dir():
            raise SourceError(f"log directory {self.root} does not exist")
        listing = regular_files(self.root, ("*",), recursive=True, walked=True)
        files = [_File(name, path, status, self.where.of(name)) for name, path, status in listing.files]
        return files, list(zip(listing.skipped_names, listing.skipped))

    def _in_scope(self, name: str, service: str | None) -> bool:
        place = self.where.of(name)
        return service is None or place.shared or place.service == service

    def searched(self, service: str | None) -> Searched:
        files, listed = self._listing()
        skipped = [why for _, why in listed]
        unread = [why for name, why in listed if self._in_scope(name, service)]
        # The scope's files first, then the rest; newest first within each.
        files.sort(key=lambda f: f.status.st_mtime_ns, reverse=True)
        files.sort(key=lambda f: not f.in_scope(service))
        parts, notes, cut, budget = [], [], [], self.limit
        with self._lock:
            read_now = set()
            for file in files:
                if budget <= 0:
                    if file.in_scope(service):
                        unread.append(f"{file.name} (past the {size_text(self.limit)} a search reads)")
                    continue
                try:
                    reading = self._reading(file, budget)
                except UnreadableFile as exc:
                    skipped.append(f"{file.name} ({exc})")
                    if file.in_scope(service):
                        unread.append(f"{file.name} ({exc})")
                    continue
                except OSError as exc:
                    skipped.append(f"{file.name} (cannot be read: {exc.strerror or exc})")
                    if file.in_scope(service):
                        unread.append(f"{file.name} (cannot be read: {exc.strerror or exc})")
                    continue
                read_now.add(file.path)
                budget -= reading.size
                parts.append(reading.lines)
                cut += reading.cut
                if reading.partial:
                    notes.append(reading.partial)
                    if file.in_scope(service):
                        unread.append(reading.partial)
            self._files = {path: entry for path, entry in self._files.items() if path in read_now}
        if skipped and not parts:
            raise SourceError(f"no log file under {self.root} could be read: {places(skipped)}")
        if skipped:
            notes.insert(0, f"{len(skipped)} file(s) were not read: {places(skipped)}")
        if cut:
            notes.append(f"{len(cut)} line(s) longer than {MAX_ITEM_CHARS} characters are shown cut where marked "
                         f"and were searched whole ({places(cut)})")
        services = {r["service"] for lines in parts for r in lines.records} | {f.place.service for f in files}
        return Searched(parts=tuple(parts), services=frozenset(services), notes=tuple(notes),
                        unread=tuple(dict.fromkeys(unread)), skipped_files=len(skipped))

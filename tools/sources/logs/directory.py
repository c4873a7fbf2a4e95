"""A directory of log files as they are (`DIAGNOSIS_LOGS_DIR`): every regular file under it, rotated
and compressed ones included, each read by its format (formats.py) with the service of its place
(places.py) for the lines that name none.

A search reads the files of its scope first (the asked service's, and files directly under the
root, which hold many services' lines), then the others, newest first, until it has read
`DIAGNOSIS_LOGS_MAX_BYTES` of text. Any line may name its service, so a file of another place is
the search's to read too, unless it was read whole as it is now and none of its lines named the
service asked about. What it could not read (a file that cannot be opened, a directory that cannot
be listed, the older part of a file past the bound, a file the bound left out) is named in the
search's `unread`, so that a search which found nothing there cannot ground "nothing found". Files
are re-read when they change, and a file that changed between the listing and its read (rotated,
truncated) makes the search list the directory again.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from tools.sources.errors import SourceError
from tools.sources.files import FileChanged, regular_files
from tools.sources.interfaces import Settings
from contracts.settings import default
from tools.sources.limits import MAX_ITEM_CHARS, places, size_text
from tools.sources.logs.places import Place, Places
from tools.sources.logs.reading import FileReading, UnreadableFile, read_file, state
from tools.sources.logs.records import RecordLogSource, Searched, service_name

SIZE = re.compile(r"^\s*(\d+)\s*(|k|m|g|kb|mb|gb|kib|mib|gib)\s*$", re.IGNORECASE)
UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def max_bytes(value: str | None) -> int:
    """DIAGNOSIS_LOGS_MAX_BYTES: a number of bytes, with an optional K, M or G (binary units); unset,
    its default in contracts/settings.py."""
    if value is None:
        value = default("DIAGNOSIS_LOGS_MAX_BYTES")
    found = SIZE.match(value)
    if found is None or int(found[1]) == 0:
        raise SourceError(f"DIAGNOSIS_LOGS_MAX_BYTES must be a positive size such as 67108864, 64M or 1G, "
                          f"got {value!r}")
    return int(found[1]) * UNITS[found[2][:1].lower()]


# A search lists the directory again when a file changed between its listing and its read (rotated,
# truncated, replaced); after this many listings, what still changes is named as unread.
READ_ATTEMPTS = 3
State = tuple[int, ...]

@dataclass(frozen=True)
class _File:
    name: str
    path: Path
    status: os.stat_result
    place: Place


class LogDirectory(RecordLogSource):
    OPTIONS = ("DIAGNOSIS_LOG_SOURCES", "DIAGNOSIS_LOGS_MAX_BYTES")

    @classmethod
    def from_settings(cls, root: str, settings: Settings) -> LogDirectory:
        return cls(Path(root), settings.synonyms, Places.from_file(settings["DIAGNOSIS_LOG_SOURCES"]),
                   max_bytes(settings["DIAGNOSIS_LOGS_MAX_BYTES"]))

    def __init__(self, root: Path, synonyms: dict[str, tuple[str, ...]], where: Places | None = None,
                 limit: int | None = None):
        super().__init__(synonyms)
        self.root = root
        self.where = where or Places()
        self.limit = max_bytes(None) if limit is None else limit
        self._lock = threading.Lock()
        # real path -> (what was read: its state and byte limit; the reading)
        self._files: dict[Path, tuple[tuple, FileReading]] = {}
        # real path -> (its state, the services its lines name folded and as written), for each file
        # read whole in that state: a search for another service need not read it again.
        self._named: dict[Path, tuple[State, frozenset[str], frozenset[str]]] = {}

    @property
    def label(self) -> str:
        return f"log directory {self.root}"

    def _reading(self, file: _File, limit: int) -> FileReading:
        key = (state(file.status), min(limit, file.status.st_size))
        cached = self._files.get(file.path)
        if cached and cached[0] == key:
            return cached[1]
        reading = read_file(file.path, file.name, limit, file.place, file.status, self.root.resolve())
        self._files[file.path] = (key, reading)
        if reading.partial is None and reading.state is not None:
            self._named[file.path] = (reading.state, reading.lines.named,
                                      frozenset(reading.lines.services))
        return reading

    def _listing(self) -> tuple[list[_File], list[str]]:
        if not self.root.is_dir():
            raise SourceError(f"log directory {self.root} does not exist")
        listing = regular_files(self.root, ("*",), recursive=True, walked=True)
        files = [_File(name, path, status, self.where.of(name)) for name, path, status in listing.files]
        return files, list(listing.skipped)

    def _known(self, file: _File) -> tuple[frozenset[str], frozenset[str]] | None:
        """The services a file's lines name (folded, and as written), when it was read whole as it is now."""
        known = self._named.get(file.path)
        return known[1:] if known and known[0] == state(file.status) else None

    def _share(self, file: _File, service: str | None) -> int:
        """What a search for `service` (folded) has of a file: 0 its own (its place's, or named by its
        lines), 1 lines that may name it (the file was not read whole as it is), 2 nothing."""
        if service is None or file.place.shared or service_name(file.place.service) == service:
            return 0
        known = self._known(file)
        return 1 if known is None else 0 if service in known[0] else 2

    def searched(self, service: str | None) -> Searched:
        wanted = None if service is None else service_name(service)
        for attempt in range(1, READ_ATTEMPTS + 1):
            try:
                return self._searched(wanted, settle=attempt == READ_ATTEMPTS)
            except FileChanged:
                continue
        raise AssertionError("the last attempt names what changed instead of raising")

    def _searched(self, service: str | None, settle: bool) -> Searched:
        files, skipped = self._listing()
        # A place the walk could not take may hold any service's lines.
        unread = list(skipped)
        shares = {file.path: self._share(file, service) for file in files}
        # The search's own files first, then those that may hold its lines; newest first within each.
        order = sorted((f for f in files if shares[f.path] < 2), key=lambda f: -f.status.st_mtime_ns)
        order.sort(key=lambda f: shares[f.path])
        parts, notes, cut, budget = [], [], [], self.limit
        with self._lock:
            read_now = set()
            for file in order:
                if budget <= 0:
                    unread.append(f"{file.name} (past the {size_text(self.limit)} a search reads)")
                    continue
                try:
                    reading = self._reading(file, budget)
                except FileChanged as exc:
                    if not settle:
                        raise
                    why = f"{file.name} (changed while it was read: {exc})"
                except UnreadableFile as exc:
                    why = f"{file.name} ({exc})"
                except OSError as exc:
                    why = f"{file.name} (cannot be read: {exc.strerror or exc})"
                else:
                    read_now.add(file.path)
                    budget -= reading.size
                    parts.append(reading.lines)
                    cut += reading.cut
                    if reading.partial:
                        notes.append(reading.partial)
                        unread.append(reading.partial)
                    continue
                skipped.append(why)
                unread.append(why)
            self._files = {path: entry for path, entry in self._files.items() if path in read_now}
            listed = {file.path for file in files}
            self._named = {path: entry for path, entry in self._named.items() if path in listed}
            known = [names for file in files if (names := self._known(file))]
        if skipped and not parts:
            raise SourceError(f"no log file under {self.root} could be read: {places(skipped)}")
        if skipped:
            notes.insert(0, f"{len(skipped)} file(s) were not read: {places(skipped)}")
        if cut:
            notes.append(f"{len(cut)} line(s) longer than {MAX_ITEM_CHARS} characters are shown cut where marked "
                         f"and were searched whole ({places(cut)})")
        services = {f.place.service for f in files}.union(*(lines.services for lines in parts),
                                                          *(written for _, written in known))
        return Searched(parts=tuple(parts), services=frozenset(services), notes=tuple(notes),
                        unread=tuple(dict.fromkeys(unread)), skipped_files=len(skipped))

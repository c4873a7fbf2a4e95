"""One log file read into records: its bytes within a bound (the newest part of a plain file, the
first part of a compressed one), decoded, each line read by its format, and the lines that belong
together joined: a stack trace to the line it follows, PostgreSQL's DETAIL to its message, a
container runtime's partial entries to the rest of the message.

Every line is read: a byte that is not UTF-8 is read as U+FFFD, and a line of no known format is
text. Only a file that cannot be read at all (binary, compressed in a way Python cannot open) is
left unread, and whoever reads it names it.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.search import Index
from tools.sources.files import read_bytes
from tools.sources.limits import MAX_ITEM_CHARS, clip, size_text
from tools.sources.logs.formats import Entry, csv_entries, file_format, inner_entry, is_csvlog, read_line, sort_key
from tools.sources.logs.places import Place

SAMPLE_LINES = 50
# A NUL in a file's first bytes marks it binary (wtmp, lastlog, a systemd journal): no lines to read.
BINARY_PROBE = 8192
COMPRESSED = {b"\x1f\x8b": ("gzip", gzip.GzipFile), b"BZh": ("bzip2", bz2.BZ2File),
              b"\xfd7zXZ\x00": ("xz", lzma.LZMAFile)}
# Compressions Python's standard library cannot open: the file is named as unread.
UNOPENABLE = {b"\x28\xb5\x2f\xfd": "zstd", b"\x04\x22\x4d\x18": "lz4"}
# A line that begins with these continues the record before it in any file: stack frames are indented
# (Java's "\tat", Python's "  File", Go's "\t/app/main.go:31").
INDENT = (" ", "\t")
# Continuation lines of one record are shown on one line of the ref, joined by this mark.
JOINED = " | "


class UnreadableFile(Exception):
    """A file whose lines cannot be read at all; the reason names why."""


@dataclass
class Lines:
    """The records of one file (or of the fixture world), and their index for search."""

    records: tuple[dict[str, Any], ...]
    texts: list[str]
    _index: Index | None = None

    @property
    def index(self) -> Index:
        if self._index is None:
            self._index = Index(self.texts)
        return self._index


@dataclass
class FileReading:
    lines: Lines
    # The bytes of text this reading took from the file, counted against a search's bound.
    size: int
    # What of the file was left out, if anything ("access.log is 200 MiB: only its last 64 MiB were read").
    partial: str | None = None
    cut: list[str] = field(default_factory=list)
    format: str = "text"


def searchable(record: dict[str, Any], message: str) -> str:
    """What a search reads of a record: its level, service, message and fields."""
    fields = " ".join(f"{k}={v}" for k, v in record.get("fields") or ())
    return f"{record['level'] or ''} {record['service']} {message} {fields}"


def _bytes(path: Path, limit: int) -> tuple[bytes, str | None, int]:
    """(the file's text bytes within the limit, what was left out, where they start)."""
    head, _ = read_bytes(path, max(BINARY_PROBE, 8))
    for magic, name in UNOPENABLE.items():
        if head.startswith(magic):
            raise UnreadableFile(f"compressed with {name}, which cannot be opened here")
    for magic, (name, opener) in COMPRESSED.items():
        if head.startswith(magic):
            return _decompressed(path, name, opener, limit)
    if b"\x00" in head:
        raise UnreadableFile("binary, not text")
    data, start = read_bytes(path, limit, tail=True)
    if start:
        whole = data.find(b"\n") + 1
        return data[whole:], f"only its last {size_text(limit)} were read", start + whole
    return data, None, 0


def _decompressed(path: Path, name: str, opener, limit: int) -> tuple[bytes, str | None, int]:
    try:
        with opener(path) as stream:
            data = stream.read(limit + 1)
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
        raise UnreadableFile(f"{name} data that cannot be decompressed ({exc})") from None
    if b"\x00" in data[:BINARY_PROBE]:
        raise UnreadableFile("binary, not text")
    if len(data) > limit:
        cut = data.rfind(b"\n", 0, limit) + 1
        return data[:cut], f"only its first {size_text(limit)} of text were read", 0
    return data, None, 0


def _entries(text: str) -> Iterator[tuple[int, Entry]]:
    lines = text.split("\n")
    if is_csvlog(text.lstrip()):
        yield from csv_entries(text)
        return
    sample = [line.rstrip("\r") for line in lines if line.strip()][:SAMPLE_LINES]
    preferred = file_format(sample)
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r")
        if line.strip():
            yield number, read_line(line, preferred)


def _assemble(text: str) -> Iterator[tuple[int, Entry, list[str]]]:
    """(first line number, the entry that begins a record, its message's parts) for each record."""
    current: tuple[int, Entry, list[str]] | None = None
    # A file whose first line has its own time begins each record with one: a line without one
    # (a stack trace's) continues the record before it. In a file that does not, every line is one.
    stamped_file = None
    for number, entry in _entries(text):
        stamped_file = entry.stamped if stamped_file is None else stamped_file
        if current is not None:
            first, head, parts = current
            if head.partial:
                parts[-1] += entry.message
                current = (first, _continued(head, entry), parts)
                continue
            if _continues(entry, stamped_file):
                parts.append(entry.message)
                continue
            yield current
        current = (number, entry, [entry.message])
    if current is not None:
        yield current


def _continues(entry: Entry, stamped_file: bool) -> bool:
    """Whether a line belongs to the record before it rather than beginning one."""
    if entry.continues:
        return True
    if entry.wrapped:
        # A container runtime stamps every line: whether the container's own line begins a record
        # is read from that line, and only an indented one (a stack frame) continues.
        if entry.message[:1] not in INDENT:
            return False
        entry = inner_entry(entry.message)
        return entry.format == "text" and not entry.stamped
    return entry.format == "text" and not entry.stamped and (stamped_file or entry.message[:1] in INDENT)


def _continued(head: Entry, entry: Entry) -> Entry:
    """A partial entry continued by the next: still partial if that one is."""
    return Entry(format=head.format, message=head.message, timestamp=head.timestamp, fields=head.fields,
                 partial=entry.partial, wrapped=head.wrapped)


def read_records(data: bytes, name: str, place: Place) -> tuple[Lines, list[str], str]:
    """The records of a file's text, where each cut message is, and the file's format."""
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    records, texts, cut, formats = [], [], [], {}
    for number, entry, parts in _assemble(text):
        message = JOINED.join(part for part in parts if part.strip())
        if entry.wrapped:
            entry = entry.unwrapped(message)
            message = entry.message
        where = f"{name}:{number}"
        record = {"timestamp": entry.timestamp, "level": entry.level, "service": entry.service or place.service,
                  "message": clip(message), "source": where, "format": entry.format,
                  "service_from": "line" if entry.service else place.how}
        if entry.fields:
            record["fields"] = [list(pair) for pair in entry.fields]
        if len(message) > MAX_ITEM_CHARS:
            cut.append(where)
        records.append(record)
        texts.append(searchable(record, message))
        formats[entry.format] = formats.get(entry.format, 0) + 1
    main = max(formats, key=formats.get, default="text")
    return Lines(records=tuple(records), texts=texts), cut, main


def read_file(path: Path, name: str, limit: int, place: Place) -> FileReading:
    """One file's records within `limit` bytes of text. Raises UnreadableFile or OSError."""
    data, left_out, start = _bytes(path, limit)
    # Lines of a file read from its middle are numbered from the first whole line read.
    lines, cut, main = read_records(data, f"{name} (from byte {start})" if start else name, place)
    partial = f"{name}: {left_out}" if left_out else None
    return FileReading(lines=lines, size=len(data), partial=partial, cut=cut, format=main)


def sort_time(record: dict[str, Any]) -> str:
    return sort_key(str(record.get("timestamp") or ""))

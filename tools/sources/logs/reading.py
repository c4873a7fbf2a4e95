"""One log file read into records: its bytes within a bound (the newest part of a plain file, the
first part of a compressed one), decoded, each line read by its format, and the lines that belong
together joined: a stack trace to the line it follows, PostgreSQL's DETAIL to its process's
message, a container runtime's partial entries to the rest of their stream's message.

Every line is read: a byte that is not UTF-8 is read as U+FFFD, text with a byte order mark in its
encoding (UTF-16 and UTF-32 too), a line that ends in a carriage return alone is a line, the NUL
bytes that a truncation leaves at the start of a line (logrotate's copytruncate) are a hole, not
text, and a line of no known format is text. A compressed file cut short gives the lines before the
cut. Only a file that cannot be read at all (binary, compressed in a way Python cannot open) is left
unread, and whoever reads it names it.

A line counts as at least MIN_LINE_BYTES bytes against the bound: what the program holds per record
is about that, so a file of very short lines cannot hold many times the bound in memory.
"""

from __future__ import annotations

import bz2
import gzip
import itertools
import lzma
import os
import re
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from tools.sources.files import opened
from tools.sources.limits import MAX_ITEM_CHARS, size_text
from tools.sources.logs.csvlog import csv_entries, is_csvlog
from tools.sources.logs.formats import SPANS_LINES, Entry, file_format, inner_entry, pid_of, read_line, stream_of
from tools.sources.logs.places import Place
from tools.sources.logs.records import FileLines, level_bit

SAMPLE_LINES = 50
# A NUL in a file's first bytes marks it binary (wtmp, lastlog, a systemd journal): no lines to read.
BINARY_PROBE = 8192
COMPRESSED = {b"\x1f\x8b": ("gzip", gzip.open), b"BZh": ("bzip2", bz2.open), b"\xfd7zXZ\x00": ("xz", lzma.open)}
# Compressions Python's standard library cannot open: the file is named as unread.
UNOPENABLE = {b"\x28\xb5\x2f\xfd": "zstd", b"\x04\x22\x4d\x18": "lz4"}
# Byte order marks, longest first (UTF-32 LE's begins with UTF-16 LE's), and the size of a code unit.
BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le", 4), (b"\x00\x00\xfe\xff", "utf-32-be", 4),
        (b"\xff\xfe", "utf-16-le", 2), (b"\xfe\xff", "utf-16-be", 2), (b"\xef\xbb\xbf", "utf-8", 1))
MIN_LINE_BYTES = 32
READ_CHUNK = 1 << 16
# NUL bytes at the start of a line: where a writer went on at its offset after the file was truncated.
HOLE = re.compile(r"(?:^|(?<=\n))\x00+")
HOLE_BYTES = re.compile(rb"(?:^|(?<=\n))\x00+")
# A line that begins with these continues the record before it: stack frames are indented (Java's
# "\tat", Python's "  File", Go's "\t/app/main.go:31").
INDENT = (" ", "\t")
# Continuation lines of one record are shown on one line of the ref, joined by this mark.
JOINED = " | "
# How many records back a PostgreSQL DETAIL or a runtime's partial entry may find the record it goes on.
WINDOW = 256


def state(status: os.stat_result) -> tuple[int, int, int, int, int]:
    """What says a file is the one that was read: its device, inode, size, and modification and
    change times (a change time cannot be set back, as a modification time can)."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


class UnreadableFile(Exception):
    """A file whose lines cannot be read at all; the reason names why."""


@dataclass
class FileReading:
    lines: FileLines
    # What this reading counts against a search's bound: its bytes, or MIN_LINE_BYTES a line if more.
    size: int
    # What of the file was left out, if anything ("access.log is 200 MiB: only its last 64 MiB were read").
    partial: str | None = None
    cut: list[str] = field(default_factory=list)
    format: str = "text"
    # The file as it was read (`state`), as fstat said.
    state: tuple[int, ...] | None = None


@dataclass
class _Text:
    text: str
    left_out: str | None
    # A plain file read from its middle: the byte the read began at, after which its first whole
    # line is line 1. Else 0.
    start: int
    size: int
    # The number of the text's first line, past the lines a cut left out before it.
    first: int = 1


def _encoding(head: bytes) -> tuple[str, int, int] | None:
    """(codec, length of the mark, code unit) of a byte order mark the bytes begin with, or None."""
    return next(((codec, len(mark), unit) for mark, codec, unit in BOMS if head.startswith(mark)), None)


def _within_lines(text: str, limit: int, newest: bool) -> tuple[str, int, int]:
    """The text, or its newest (else first) lines that a bound of `limit` holds at MIN_LINE_BYTES a
    line; how many lines were kept when that cut it (else 0), and how many were left out before."""
    most = max(1, limit // MIN_LINE_BYTES)
    if text.count("\n") <= most:
        return text, 0, 0
    if newest:
        at = len(text) - 1 if text.endswith("\n") else len(text)
        for _ in range(most):
            at = text.rfind("\n", 0, at)
        return text[at + 1:], most, text.count("\n", 0, at + 1)
    at = -1
    for _ in range(most):
        at = text.find("\n", at + 1)
    return text[:at + 1], most, 0


def _decoded(data: bytes, encoding: tuple[str, int, int] | None, middle: bool) -> str:
    codec = encoding[0] if encoding else "utf-8"
    # Without the last line's newline, so that a file of one line is that line, not a copy of it.
    end = len(data) - len("\n".encode(codec)) if data.endswith("\n".encode(codec)) else len(data)
    text = str(memoryview(data)[:end], codec, "replace").removeprefix("\ufeff")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if middle:
        # Read from the middle of a file: its first line is only the end of one.
        text = text[text.find("\n") + 1:]
    if "\x00" in text:
        text = HOLE.sub("", text)
        if encoding is None and "\x00" in text[:BINARY_PROBE]:
            raise UnreadableFile("binary, not text")
    return text


def _decompressed(handle: BinaryIO, name: str, opener, limit: int) -> tuple[bytes, str | None]:
    """The first `limit` bytes of a compressed file's text, and what was left out. A file cut short
    (or damaged further on) gives what comes before the damage."""
    chunks, total, damage = [], 0, None
    try:
        with opener(handle) as stream:
            while total <= limit:
                chunk = stream.read(min(READ_CHUNK, limit + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
        damage = str(exc) or type(exc).__name__
    data = b"".join(chunks)
    if damage is not None and not data.strip(b"\x00"):
        raise UnreadableFile(f"{name} data that cannot be decompressed ({damage})")
    if damage is not None:
        data = data[:data.rfind(b"\n") + 1]
        return data, f"its end cannot be decompressed ({damage}): only its first {size_text(len(data))} of text were read"
    if total > limit:
        return data[:data.rfind(b"\n", 0, limit) + 1], f"only its first {size_text(limit)} of text were read"
    return data, None


def _text(handle: BinaryIO, size: int, limit: int) -> _Text:
    """A file's text within the limit, what was left out, and the bytes it counts against the bound."""
    head = handle.read(BINARY_PROBE)
    for magic, name in UNOPENABLE.items():
        if head.startswith(magic):
            raise UnreadableFile(f"compressed with {name}, which cannot be opened here")
    start, newest = 0, True
    for magic, (name, opener) in COMPRESSED.items():
        if head.startswith(magic):
            handle.seek(0)
            data, left_out = _decompressed(handle, name, opener, limit)
            text = _decoded(data, _encoding(data[:4]), middle=False)
            newest = False
            break
    else:
        encoding = _encoding(head)
        if encoding is None and b"\x00" in HOLE_BYTES.sub(b"", head):
            raise UnreadableFile("binary, not text")
        mark, unit = (encoding[1], encoding[2]) if encoding else (0, 1)
        start = max(mark, size - limit)
        start += -(start - mark) % unit  # on a code unit's boundary
        handle.seek(start)
        # As much as fstat said there was: a file that grows meanwhile is read as it was.
        data = handle.read(max(0, min(limit, size - start)))
        middle = start > mark
        text = _decoded(data, encoding, middle=middle)
        left_out = f"only its last {size_text(limit)} were read" if middle else None
        start = start if middle else 0
    text, kept, before = _within_lines(text, limit, newest)
    if kept:
        left_out = (f"only its {'last' if newest else 'first'} {kept} lines were read (a line counts as "
                    f"{MIN_LINE_BYTES} bytes or more of the {size_text(limit)} a search reads)")
    lines = text.count("\n") + (not text.endswith("\n"))
    return _Text(text=text, left_out=left_out, start=start, size=max(len(data), MIN_LINE_BYTES * lines),
                 first=before + 1)


def _lines(text: str) -> Iterator[str]:
    at = 0
    while at < len(text):
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        yield text[at:end]
        at = end + 1


def _entries(text: str, first: int) -> tuple[Iterator[tuple[int, Entry]], bool]:
    """Each line's number and entry, and whether the file's records begin with a time of their own:
    then a line without one goes on the record before it. Any of the first lines having one says
    so, as a file may begin with the end of a record rotated out of it (a trace's last frames)."""
    if is_csvlog(_lines(text)):
        return csv_entries((line + "\n" for line in _lines(text)), first), True
    sample = list(itertools.islice((line for line in _lines(text) if line.strip()), SAMPLE_LINES))
    preferred, stamped = file_format(sample)
    entries = ((number, read_line(line, preferred)) for number, line in enumerate(_lines(text), start=first)
               if line.strip())
    return entries, stamped


@dataclass(eq=False)
class _Record:
    number: int
    head: Entry
    parts: list[str]
    # The levels of the lines joined into it (records.level_bit).
    levels: int = 0
    # Handed on: nothing more joins it.
    closed: bool = False
    # The pieces of its last part while a runtime's partial entries go on, joined once when it ends:
    # adding each to a string would copy the message so far each time.
    pieces: list[str] | None = None
    spans: bool | None = None

    def go_on(self, piece: str) -> None:
        if self.pieces is None:
            self.pieces = [self.parts.pop()]
        self.pieces.append(piece)

    def end_pieces(self) -> None:
        if self.pieces is not None:
            self.parts.append("".join(self.pieces))
            self.pieces = None


def _spans_lines(record: _Record) -> bool:
    """Whether the record's format may go on over lines without a time of their own."""
    if record.spans is None:
        record.end_pieces()
        head = inner_entry(record.parts[0]) if record.head.wrapped else record.head
        record.spans = head.format in SPANS_LINES
    return record.spans


def _continues(entry: Entry, stamped_file: bool, last: _Record | None) -> bool:
    """Whether a line (not a runtime's) goes on the record the line before it went to."""
    if last is None or last.closed or last.head.wrapped or entry.format != "text" or entry.stamped:
        return False
    return _spans_lines(last) and (stamped_file or entry.message[:1] in INDENT)


def _frame(entry: Entry, record: _Record | None) -> bool:
    """Whether a runtime's entry is a stack frame of the record before it on its stream: a runtime
    stamps every line, so only an indented line of no format of its own goes on the one before."""
    if record is None or record.closed or entry.message[:1] not in INDENT:
        return False
    inner = inner_entry(entry.message)
    return inner.format == "text" and not inner.stamped and _spans_lines(record)


class _Assembly:
    """Records as lines arrive: each line begins one or goes on one, and a record is handed on once
    WINDOW records have begun after it."""

    def __init__(self, stamped_file: bool):
        self.stamped_file = stamped_file
        self.open: deque[_Record] = deque()
        self.last: _Record | None = None  # the record the line before went to
        self.unfinished: dict[str, _Record] = {}  # stream -> record whose last entry was partial
        self.by_stream: dict[str, _Record] = {}
        self.by_pid: dict[str, _Record] = {}

    def begin(self, number: int, entry: Entry) -> _Record:
        record = _Record(number, entry, [entry.message])
        self.open.append(record)
        return record

    def runtime(self, number: int, entry: Entry) -> _Record:
        stream = stream_of(entry)
        record = self.unfinished.pop(stream, None)
        if record is not None and not record.closed:
            record.go_on(entry.message)
            if not entry.partial:
                record.end_pieces()
        elif _frame(entry, record := self.by_stream.get(stream)):
            record.parts.append(entry.message)
            record.levels |= level_bit(inner_entry(entry.message).level)
        else:
            record = self.by_stream[stream] = self.begin(number, entry)
        if entry.partial:
            self.unfinished[stream] = record
        return record

    def line(self, number: int, entry: Entry) -> _Record:
        pid = pid_of(entry) if entry.format == "postgresql" else None
        if entry.continues:
            record = self.by_pid.get(pid) if pid else self.last
            if record is not None and not record.closed:
                record.parts.append(entry.message)
                return record
            return self.begin(number, entry)
        if _continues(entry, self.stamped_file, self.last):
            self.last.parts.append(entry.message)
            self.last.levels |= level_bit(entry.level)
            return self.last
        record = self.begin(number, entry)
        if pid:
            self.by_pid[pid] = record
        return record

    def records(self, entries: Iterable[tuple[int, Entry]]) -> Iterator[_Record]:
        for number, entry in entries:
            self.last = self.runtime(number, entry) if entry.wrapped else self.line(number, entry)
            while len(self.open) > WINDOW:
                yield self._close()
        while self.open:
            yield self._close()

    def _close(self) -> _Record:
        record = self.open.popleft()
        record.closed = True
        record.end_pieces()
        return record


def _whole(record: _Record) -> tuple[Entry, str]:
    """The entry a record reads as, and its whole message. A runtime's entry is read as the line it
    wrapped once its partial entries are joined; the frames after it follow that line's message."""
    if record.head.wrapped:
        inner = record.head.unwrapped(record.parts[0])
        parts = [inner.message, *record.parts[1:]]
        return inner, JOINED.join(part for part in parts if part.strip())
    return record.head, JOINED.join(part for part in record.parts if part.strip())


def read_records(text: str, name: str, place: Place, first: int = 1) -> tuple[FileLines, list[str], str]:
    """The records of a file's text (`first`: the number of its first line), where each cut message
    is, and the file's format."""
    lines = FileLines(name, place)
    cut: list[str] = []
    formats: dict[str, int] = {}

    def searched() -> Iterator[str]:
        entries, stamped = _entries(text, first)
        for record in _Assembly(stamped).records(entries):
            entry, message = _whole(record)
            if len(message) > MAX_ITEM_CHARS:
                cut.append(f"{name}:{record.number}")
            formats[entry.format] = formats.get(entry.format, 0) + 1
            yield lines.add(entry, message, record.number, record.levels)

    lines.finish(searched())
    return lines, cut, max(formats, key=formats.get, default="text")


def read_file(path: Path, name: str, limit: int, place: Place, listed: os.stat_result | None = None,
              inside: Path | None = None) -> FileReading:
    """One file's records within `limit` bytes of text. Raises UnreadableFile, OSError, or
    files.FileChanged when `listed` (what the listing saw) is not the file there now, or the file
    is not under `inside`."""
    with opened(path, listed, inside) as (handle, status):
        read = _text(handle, status.st_size, limit)
    # Lines of a file read from its middle are numbered from the first whole line read.
    lines, cut, main = read_records(read.text, f"{name} (from byte {read.start})" if read.start else name, place,
                                    read.first)
    partial = f"{name}: {read.left_out}" if read.left_out else None
    return FileReading(lines=lines, size=read.size, partial=partial, cut=cut, format=main, state=state(status))

"""PostgreSQL's csvlog, read a file at a time, since a quoted field may hold newlines: each row is one
Entry, and whatever is no csvlog row is read line by line as text (formats.py), so that every line is
still searched."""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Iterable, Iterator

from tools.sources.logs.formats import Entry, parse_text
from tools.sources.logs.levels import normal_level

# PostgreSQL's csvlog columns (PostgreSQL 15 documentation, "Using CSV-Format Log Output").
CSV_COLUMNS = ("log_time", "user_name", "database_name", "process_id", "connection_from", "session_id",
               "session_line_num", "command_tag", "session_start_time", "virtual_transaction_id",
               "transaction_id", "error_severity", "sql_state_code", "message", "detail", "hint", "internal_query",
               "internal_query_pos", "context", "query", "query_pos", "location", "application_name",
               "backend_type", "leader_pid", "query_id")
CSV_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+$")
# A line that begins a csvlog row: its time, then the next field.
CSV_ROW_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? [^,\s]+,")
# A field may be as long as a statement PostgreSQL logs, far past the csv module's default 128 KiB.
csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))


class _Taken:
    """Lines handed to a csv reader, remembering those of the row being read."""

    def __init__(self, lines: Iterable[str]):
        self.lines = iter(lines)
        self.taken: list[str] = []

    def __iter__(self) -> _Taken:
        return self

    def __next__(self) -> str:
        line = next(self.lines)
        self.taken.append(line)
        return line


def _csv_row(row: list[str] | None) -> Entry | None:
    if not row or len(row) < 22 or CSV_TIME.match(row[0]) is None:
        return None
    named = dict(zip(CSV_COLUMNS, row))
    fields = tuple((k, v) for k, v in named.items()
                   if v and k not in ("log_time", "error_severity", "message", "application_name"))
    return Entry(format="postgresql csvlog", message=f"{row[11]}:  {row[13]}", timestamp=row[0],
                 level=normal_level(row[11]), fields=fields)


def is_csvlog(lines: Iterable[str]) -> bool:
    """Whether a file's first row (from the first of its first lines that begins one) is a
    PostgreSQL csvlog row; `lines` are its lines without their newlines, read only as far as needed."""
    lines = iter(lines)
    start = next((line for line in itertools.islice(lines, 50) if CSV_ROW_START.match(line)), None)
    if start is None:
        return False
    try:
        row = next(csv.reader(itertools.chain([start + "\n"], (line + "\n" for line in lines))))
    except (csv.Error, StopIteration):
        return False
    entry = _csv_row(row)
    return entry is not None and entry.level is not None


def csv_entries(lines: Iterable[str], first: int = 1) -> Iterator[tuple[int, Entry]]:
    """(line number, entry) for each row of a PostgreSQL csvlog, from lines that each end in a
    newline. What is no csvlog row (lines before the first row begins, in a file read from its
    middle; a row the csv reader refuses or that has not the csvlog's columns) is read line by
    line, as text: every line is still searched."""
    lines = iter(lines)
    number = first
    for line in lines:
        if CSV_ROW_START.match(line):
            break
        if line.strip():
            yield number, parse_text(line.rstrip("\n"))
        number += 1
    else:
        return
    taken = _Taken(itertools.chain([line], lines))
    reader = csv.reader(taken)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error:
            row = None
        entry = _csv_row(row)
        if entry is not None:
            yield number, entry
        else:
            for at, line in enumerate(taken.taken):
                if line.strip():
                    yield number + at, parse_text(line.rstrip("\n"))
        number += len(taken.taken)
        taken.taken = []

"""Log lines to search: the fixture's records, or a directory of log files read as they are now.

A directory holds `*.log` files of `[time][LEVEL][service] message` lines and `*.jsonl` files of
JSON objects with time (or timestamp), level, service and message. A line that is neither is
counted and reported with every search, never dropped silently. Files are re-read when they change,
so a search sees lines written since the last one.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.sources.errors import SourceError

LOG_LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
LEVEL_ALIASES = {"WARNING": "WARN", "ERR": "ERROR", "FATAL": "ERROR", "CRITICAL": "ERROR", "TRACE": "DEBUG"}
BRACKETED = re.compile(r"^\[(?P<time>[^\]]+)\]\s*\[(?P<level>[A-Za-z]+)\]\s*\[(?P<service>[^\]]+)\]\s*(?P<message>.*\S)\s*$")


def normal_level(level: Any) -> str | None:
    wanted = LEVEL_ALIASES.get(str(level).strip().upper(), str(level).strip().upper())
    return wanted if wanted in LOG_LEVELS else None


@dataclass(frozen=True)
class LogRecords:
    """What a search runs over: the records, the services they name, and the lines left unread."""

    label: str
    records: tuple[dict[str, Any], ...]
    services: frozenset[str]
    unparsed: int = 0
    unparsed_where: tuple[str, ...] = ()


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
        level = normal_level(obj["level"])
        if level is None:
            return None
        return {"timestamp": stamp.strip(), "level": level, "service": obj["service"].strip(),
                "message": obj["message"].strip()}
    match = BRACKETED.match(text)
    if not match or normal_level(match["level"]) is None:
        return None
    return {"timestamp": match["time"].strip(), "level": normal_level(match["level"]),
            "service": match["service"].strip(), "message": match["message"]}


class LogDirectory:
    def __init__(self, root: Path):
        self.root = root
        self._lock = threading.Lock()
        # path -> ((mtime_ns, size), records, unparsed line numbers)
        self._files: dict[Path, tuple[tuple[int, int], list[dict[str, Any]], list[int]]] = {}

    @property
    def label(self) -> str:
        return f"log directory {self.root}"

    def _read(self, path: Path) -> tuple[list[dict[str, Any]], list[int]]:
        stat = path.stat()
        key = (stat.st_mtime_ns, stat.st_size)
        cached = self._files.get(path)
        if cached and cached[0] == key:
            return cached[1], cached[2]
        records, unparsed = [], []
        with path.open(encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                record = parse_line(line)
                if record is None:
                    unparsed.append(number)
                else:
                    records.append(record)
        self._files[path] = (key, records, unparsed)
        return records, unparsed

    def records(self) -> LogRecords:
        if not self.root.is_dir():
            raise SourceError(f"log directory {self.root} does not exist")
        paths = sorted([*self.root.rglob("*.log"), *self.root.rglob("*.jsonl")])
        records: list[dict[str, Any]] = []
        unparsed_where: list[str] = []
        with self._lock:
            for path in paths:
                try:
                    found, unparsed = self._read(path)
                except OSError as exc:
                    raise SourceError(f"cannot read log file {path}: {exc}") from None
                records.extend(found)
                unparsed_where.extend(f"{path.relative_to(self.root)}:{n}" for n in unparsed)
        return LogRecords(label=self.label, records=tuple(records), services=frozenset(r["service"] for r in records),
                          unparsed=len(unparsed_where), unparsed_where=tuple(unparsed_where[:5]))

"""The log line formats SREs have, each read into one Entry: its time, level, service (where the
format carries one), message and other fields.

Formats, in the order a line is tried once its file's own format failed:
- JSON lines with the usual field names (time/ts/@timestamp/timestamp, level/severity/lvl,
  msg/message, service/app/logger/kubernetes.labels.app); PostgreSQL's jsonlog and the fixture
  world's records are JSON lines too;
- Docker's json-file (`{"log": …, "stream": …, "time": …}`) and Kubernetes CRI lines (`<time>
  <stream> <P|F> <message>`): their message is read again as a line of any other format, and a
  partial entry (json-file without a trailing newline, CRI's `P`) is continued by the next;
- `[time][LEVEL][service] message` (the fixture world's text form);
- nginx's error log, PostgreSQL's stderr log (`%m [%p] ` and Debian's `%m [%p] %q%u@%d `),
  syslog as RFC 5424 and as RFC 3164 file lines (rsyslog's traditional and high-precision file
  formats), access logs (Apache's and nginx's combined and common, through apachelogs), logfmt;
- text: any other line. It is still searched; a leading timestamp and a severity word are read
  where the line has them, and a line without a timestamp in a file whose lines have one continues
  the record before it (a stack trace).

PostgreSQL's csvlog is read a file at a time (a quoted field may hold newlines): csvlog.py.
Which formats' records may span lines, and how a container's partial entries and PostgreSQL's
DETAIL lines find the record they go on, is reading.py's to decide with `SPANS_LINES`,
`stream_of` and `pid_of`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import apachelogs

from tools.sources.limits import MAX_NAME_CHARS
from tools.sources.logs.levels import http_level, normal_level, syslog_level

TIME_KEYS = ("@timestamp", "timestamp", "time", "ts", "datetime", "date")
LEVEL_KEYS = ("level", "severity", "lvl", "loglevel", "log.level", "error_severity", "levelname")
MESSAGE_KEYS = ("msg", "message", "log", "text")
SERVICE_KEYS = ("service", "service.name", "service_name", "app", "application", "kubernetes.labels.app",
                "kubernetes.labels.app.kubernetes.io/name", "logger")


@dataclass(frozen=True)
class Entry:
    format: str
    message: str
    timestamp: str = ""
    level: str | None = None
    service: str | None = None
    # The line's other fields, in its own order, shown with its message in the ref.
    fields: tuple[tuple[str, str], ...] = ()
    # The line has its own time, so it begins a record; a line without one may continue the last.
    stamped: bool = True
    # PostgreSQL's DETAIL, HINT, STATEMENT, CONTEXT and QUERY lines belong to the message before them.
    continues: bool = False
    # A container runtime split this message: the next entry of the file carries on its text.
    partial: bool = False
    # A container runtime's entry: its message is the line the container wrote, read (`unwrapped`)
    # once the runtime's partial entries are joined.
    wrapped: bool = False

    def unwrapped(self, text: str) -> Entry:
        """The record a wrapped entry's whole text makes: the inner line's level, service, message and
        fields, the runtime's time and stream."""
        inner = inner_entry(text)
        return Entry(format=self.format, message=inner.message, timestamp=self.timestamp, level=inner.level,
                     service=inner.service, fields=(*self.fields, *inner.fields))


def _name(value: Any) -> str | None:
    """A service as a line names it, or None when it names none the program could match whole."""
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    return text if text and len(text) <= MAX_NAME_CHARS and "\n" not in text else None


def _flat(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested objects by dotted keys ({"log": {"level": "error"}} has "log.level"), lists and scalars kept."""
    flat: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flat(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _first(flat: dict[str, Any], names: dict[str, str], keys: tuple[str, ...]) -> tuple[str | None, Any]:
    """The first of the usual keys the line has a value for, in any case (`names`: casefolded -> key)."""
    for key in keys:
        name = key if key in flat else names.get(key)
        if name is not None and flat[name] not in (None, ""):
            return name, flat[name]
    return None, None


def _level(value: Any) -> str | None:
    """A level word, or a number on the scale bunyan and pino write (10 trace ... 50 error, 60 fatal)."""
    if isinstance(value, str):
        return normal_level(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 10:
        return "ERROR" if value >= 50 else "WARN" if value >= 40 else "INFO" if value >= 30 else "DEBUG"
    return None


def _fielded(flat: dict[str, Any], fmt: str) -> Entry | None:
    """An entry from named fields (JSON, logfmt): the usual names, the rest as fields."""
    names = {key.casefold(): key for key in flat}
    time_key, stamp = _first(flat, names, TIME_KEYS)
    level_key, level = _first(flat, names, LEVEL_KEYS)
    message_key, message = _first(flat, names, MESSAGE_KEYS)
    service_key, service = _first(flat, names, SERVICE_KEYS)
    used = {time_key, level_key, message_key, service_key}
    fields = tuple((key, _shown(value)) for key, value in flat.items() if key not in used)
    if message is None:
        # Nothing is called the message: every field is, so nothing the line said is lost.
        message, fields = "; ".join(f"{key}={value}" for key, value in fields), ()
    return Entry(format=fmt, message=_shown(message), timestamp="" if stamp is None else _shown(stamp),
                 level=_level(level),
                 service=_name(service), fields=fields, stamped=time_key is not None)


def parse_json(line: str) -> Entry | None:
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict) or not obj:
            return None
        if isinstance(obj.get("log"), str) and isinstance(obj.get("stream"), str) and "time" in obj:
            return _docker(obj)
        return _fielded(_flat(obj), "json")
    except ValueError:
        return None
    except RecursionError:
        # Nested deeper than Python reads or shows JSON: the line is read as text, every word of it.
        return None


def _docker(obj: dict[str, Any]) -> Entry:
    """Docker's json-file: each `log` ends with a newline unless the daemon split a long message."""
    text = obj["log"]
    return Entry(format="docker json-file", message=text.rstrip("\r\n"), timestamp=str(obj["time"]),
                 fields=(("stream", str(obj["stream"])),), partial=not text.endswith("\n"), wrapped=True)


CRI = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) (stdout|stderr) ([PF])(?: (.*))?$")


def parse_cri(line: str) -> Entry | None:
    found = CRI.match(line)
    if found is None:
        return None
    return Entry(format="kubernetes cri", message=found[4] or "", timestamp=found[1], fields=(("stream", found[2]),),
                 partial=found[3] == "P", wrapped=True)


BRACKETED = re.compile(r"^\[(?P<time>[^\]]+)\]\s*\[(?P<level>[A-Za-z]+)\]\s*\[(?P<service>[^\]]+)\]\s*(?P<message>.*\S)\s*$")


def parse_bracketed(line: str) -> Entry | None:
    found = BRACKETED.match(line)
    if found is None or normal_level(found["level"]) is None or len(found["time"]) > MAX_NAME_CHARS:
        return None
    return Entry(format="bracketed", message=found["message"], timestamp=found["time"].strip(),
                 level=normal_level(found["level"]), service=_name(found["service"]))


NGINX_ERROR = re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d) \[(\w+)\] (\d+)#(\d+): (.*)$")


def parse_nginx_error(line: str) -> Entry | None:
    found = NGINX_ERROR.match(line)
    if found is None:
        return None
    return Entry(format="nginx error", message=found[5], timestamp=found[1], level=normal_level(found[2]),
                 fields=(("pid", found[3]),))


# PostgreSQL's stderr log: the prefix starts with %m (or %t) and %p, and the message with its severity.
POSTGRES = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Za-z+\-0-9]+)?) \[(\d+)\][: ]?(.*?)"
                      r"\b(DEBUG[1-5]|LOG|INFO|NOTICE|WARNING|ERROR|FATAL|PANIC|DETAIL|HINT|STATEMENT|CONTEXT|QUERY"
                      r"|LOCATION):  (.*)$")
POSTGRES_PARTS = ("DETAIL", "HINT", "STATEMENT", "CONTEXT", "QUERY", "LOCATION")


def parse_postgres(line: str) -> Entry | None:
    found = POSTGRES.match(line)
    if found is None:
        return None
    severity = found[4]
    fields = (("pid", found[2]),) + ((("session", found[3].strip()),) if found[3].strip() else ())
    return Entry(format="postgresql", message=f"{severity}:  {found[5]}", timestamp=found[1],
                 level=None if severity in POSTGRES_PARTS else normal_level(severity), fields=fields,
                 continues=severity in POSTGRES_PARTS)


SD_ELEMENT = r"\[(?:[^\]\\]|\\.)*\]"
RFC5424 = re.compile(rf"^(?:<(\d{{1,3}})>)?1 (\S+) (\S+) (\S+) (\S+) (\S+) (-|(?:{SD_ELEMENT})+)(?: (.*))?$")


def parse_rfc5424(line: str) -> Entry | None:
    found = RFC5424.match(line)
    if found is None:
        return None
    priority, stamp, host, app, procid, msgid, data, message = found.groups()
    fields = tuple((k, v) for k, v in (("host", host), ("procid", procid), ("msgid", msgid), ("data", data))
                   if v != "-")
    return Entry(format="syslog rfc5424", message=(message or "").removeprefix("\ufeff"),
                 timestamp="" if stamp == "-" else stamp,
                 level=syslog_level(int(priority)) if priority and int(priority) < 192 else None,
                 service=None if app == "-" else _name(app), fields=fields)


RFC3164 = re.compile(r"^(?:<(\d{1,3})>)?([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?"
                     r"(?:Z|[+-]\d\d:\d\d)) (\S+) ([^\s\[\]:]+)(?:\[([^\]\s]*)\])?: ?(.*)$")


def parse_rfc3164(line: str) -> Entry | None:
    found = RFC3164.match(line)
    if found is None:
        return None
    priority, stamp, host, tag, procid, message = found.groups()
    fields = (("host", host),) + ((("procid", procid),) if procid else ())
    return Entry(format="syslog rfc3164", message=message, timestamp=stamp,
                 level=syslog_level(int(priority)) if priority and int(priority) < 192 else None,
                 service=_name(tag), fields=fields)


ACCESS_PARSERS = tuple(apachelogs.LogParser(fmt) for fmt in (
    apachelogs.COMBINED, apachelogs.COMMON, apachelogs.VHOST_COMBINED, apachelogs.VHOST_COMMON))
ACCESS_SHAPE = re.compile(r'\[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "')


def parse_access(line: str) -> Entry | None:
    """An access log line is its own message: every part of it (client, request, status, size,
    referrer, agent) is what an SRE cites, so none is dropped; its level comes from the status."""
    if ACCESS_SHAPE.search(line) is None:
        return None
    for parser in ACCESS_PARSERS:
        try:
            entry = parser.parse(line)
        except apachelogs.Error:
            continue
        status = entry.final_status
        stamp = entry.request_time.isoformat() if entry.request_time else ""
        return Entry(format="access log", message=line, timestamp=stamp,
                     level=http_level(status) if isinstance(status, int) else None)
    return None


LOGFMT_PAIR = re.compile(r'\s*([^\s="]+)=("(?:[^"\\]|\\.)*"|[^\s"]*)(?=\s|$)')


def parse_logfmt(line: str) -> Entry | None:
    pairs, at = [], 0
    while at < len(line):
        found = LOGFMT_PAIR.match(line, at)
        if found is None:
            return None if line[at:].strip() else _logfmt(pairs)
        value = found[2]
        if value.startswith('"'):
            try:
                value = json.loads(value)
            except ValueError:
                value = value[1:-1]
        pairs.append((found[1], value))
        at = found.end()
    return _logfmt(pairs)


def _logfmt(pairs: list[tuple[str, str]]) -> Entry | None:
    if len(pairs) < 2:
        return None
    return _fielded(dict(pairs), "logfmt")


# Upper-case severity words, which a time zone abbreviation after a time must not be taken for.
SEVERITY_NAMES = "(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|SEVERE|CRITICAL|CRIT|FATAL|PANIC|ALERT|EMERG)"
LEADING_TIME = re.compile(
    r"^\[?(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d|\s?(?!" + SEVERITY_NAMES
    + r"\b)[A-Z]{2,5}\b)?"
    r"|\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d"
    r"|\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d(?: [+-]\d{4})?|\d\d:\d\d:\d\d(?:[.,]\d+)?)\]?")
# A severity word as loggers write one: upper case, or any case inside brackets, near the line's start.
SEVERITY_WORD = re.compile(r"(?<![\w\-])(" + SEVERITY_NAMES[3:-1] + r")(?![\w\-])|\[(trace|debug|info|notice|warn|warning|error|err|crit"
                           r"|critical|fatal|alert|emerg)\]", re.IGNORECASE)
SEVERITY_REACH = 80


def parse_text(line: str) -> Entry:
    """Any line: searched as written. Its leading time and severity word are read where it has them."""
    stamp = LEADING_TIME.match(line)
    start = stamp.end() if stamp else 0
    level = None
    for word in SEVERITY_WORD.finditer(line[start:start + SEVERITY_REACH]):
        spelled = word[1] or word[2]
        if word[2] or spelled.isupper():
            level = normal_level(spelled)
            break
    return Entry(format="text", message=line, timestamp=stamp.group().strip("[]") if stamp else "", level=level,
                 stamped=stamp is not None)


LINE_FORMATS: dict[str, Callable[[str], Entry | None]] = {
    "json": parse_json,
    "kubernetes cri": parse_cri,
    "bracketed": parse_bracketed,
    "nginx error": parse_nginx_error,
    "postgresql": parse_postgres,
    "syslog rfc5424": parse_rfc5424,
    "syslog rfc3164": parse_rfc3164,
    "access log": parse_access,
    "logfmt": parse_logfmt,
}
# What a container runtime wrapped: any format but another wrapper.
INNER_FORMATS = ("json", "bracketed", "logfmt", "access log", "nginx error", "postgresql")


def inner_entry(text: str) -> Entry:
    for name in INNER_FORMATS:
        entry = LINE_FORMATS[name](text)
        if entry is not None and entry.format != "docker json-file":
            return entry
    return parse_text(text)


def read_line(line: str, preferred: str | None = None) -> Entry:
    """A line as its file's format reads it, else as the first format that does, else as text."""
    if preferred in LINE_FORMATS and (entry := LINE_FORMATS[preferred](line)) is not None:
        return entry
    for name, parse in LINE_FORMATS.items():
        if name != preferred and (entry := parse(line)) is not None:
            return entry
    return parse_text(line)


def file_format(sample: list[str]) -> tuple[str | None, bool]:
    """The format most of a file's first lines are in, or None when no format reads most of them;
    and whether any of them has a time of its own."""
    counts: dict[str, int] = {}
    stamped = False
    for line in sample:
        entry = read_line(line)
        name = "json" if entry.format == "docker json-file" else entry.format
        counts[name] = counts.get(name, 0) + 1
        stamped = stamped or entry.stamped
    best = max((n for n in counts if n != "text"), key=lambda n: counts[n], default=None)
    return (best if best is not None and counts[best] * 2 >= len(sample) else None), stamped


# Formats whose records may go on over lines that have no time of their own (a stack trace after a
# logger's line, a statement PostgreSQL logs over several lines). A JSON, logfmt, syslog or access
# log record is one line: an untimed line after it was written by something else, and is a record.
SPANS_LINES = frozenset({"text", "postgresql", "bracketed"})


def stream_of(entry: Entry) -> str:
    """The stream a container runtime's entry came on: partial entries go on within their stream."""
    return dict(entry.fields).get("stream", "")


def pid_of(entry: Entry) -> str | None:
    return dict(entry.fields).get("pid")


def sort_key(stamp: str) -> str:
    """A time as ISO 8601 where it reads as one, for ordering lines of many formats; else as written."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00").replace(" UTC", "+00:00")).isoformat()
    except ValueError:
        return stamp

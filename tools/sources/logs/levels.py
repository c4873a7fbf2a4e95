"""One scale of severity for every log format: "errors" and `level=ERROR` mean the same thing
whether nginx, PostgreSQL, syslog, a JSON logger or an access log's status said it.

ERROR holds everything at error or worse (PostgreSQL's FATAL and PANIC, syslog's crit, alert and
emerg, an HTTP 5xx); the line's own word stays in its message, so nothing is lost by the scale.
"""

from __future__ import annotations

from typing import Any

LOG_LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
# The words of syslog, PostgreSQL, nginx, java.util.logging, Python's logging, log4j/logback, Go's
# slog, zap, logrus and log15 (which spells dbug and eror), and bunyan and pino's names.
SEVERITIES = {
    "DEBUG": ("trace", "debug", "dbug", "debug1", "debug2", "debug3", "debug4", "debug5", "finest", "finer", "fine",
              "verbose"),
    "INFO": ("info", "information", "informational", "notice", "log", "config"),
    "WARN": ("warn", "warning"),
    "ERROR": ("err", "eror", "error", "severe", "crit", "critical", "alert", "emerg", "emergency", "fatal", "panic",
              "dpanic"),
}
_LEVEL_OF = {word: level for level, words in SEVERITIES.items() for word in words}
# Syslog severities 0..7 (RFC 5424 section 6.2.1): emerg, alert, crit, err, warning, notice, info, debug.
SYSLOG_SEVERITY = ("ERROR", "ERROR", "ERROR", "ERROR", "WARN", "INFO", "INFO", "DEBUG")


def normal_level(level: Any) -> str | None:
    """A severity word (any format's, any case) on the scale, or None for a word no format uses."""
    return _LEVEL_OF.get(str(level).strip().casefold())


def syslog_level(priority: int) -> str:
    """The level of a syslog PRI value (facility * 8 + severity)."""
    return SYSLOG_SEVERITY[priority % 8]


def http_level(status: int) -> str:
    """An access log line's level by its status: a 5xx is an error, a 4xx a warning."""
    return "ERROR" if status >= 500 else "WARN" if status >= 400 else "INFO"

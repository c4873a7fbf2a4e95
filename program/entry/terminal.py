"""Text from outside (a question, a label, a log line, an LM's words, a server's error body) as the
command line and the server's log print it: the one place where it is made safe to show.

A terminal obeys the control characters it is sent: ESC c resets it, a CSI sequence moves the
cursor or rewrites the title, a carriage return or a bidirectional control makes a line read
otherwise. So every control and format character is shown as its escape (`\\x1b`, `\\u202e`),
newlines and tabs apart, and every URL's password is hidden (tools.redaction). JSON output keeps
every character, written as a JSON escape (`\\u009b`), so a machine reads the same value and a
terminal shows no control.
"""

from __future__ import annotations

import json
import logging
import unicodedata

from tools.redaction import hide_credentials

KEPT = frozenset("\n\t")


def _controls(ch: str) -> bool:
    return ch not in KEPT and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")


def _escaped(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """`text` as a terminal may be sent it: controls escaped, passwords hidden."""
    text = hide_credentials(text)
    if text.isprintable():
        return text
    return "".join(_escaped(ch) if _controls(ch) else ch for ch in text)


def printable_json(text: str) -> str:
    """JSON text with every control and format character it still holds written as a JSON escape."""
    text = hide_credentials(text)
    return "".join(json.dumps(ch)[1:-1] if _controls(ch) else ch for ch in text)


class PrintableRecords(logging.Filter):
    """Log records whose message, arguments and traceback are printable: uvicorn's formatters (the
    access line reads its arguments one by one) then print nothing a terminal would obey."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = printable(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(printable(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: printable(v) if isinstance(v, str) else v for k, v in record.args.items()}
        if record.exc_info and not record.exc_text:
            record.exc_text = printable(logging.Formatter().formatException(record.exc_info))
        return True

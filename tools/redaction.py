"""Credentials in text as it may be stored, served or printed: a URL's password is never shown.

A URL names its credentials in its userinfo (RFC 3986: `scheme://user:password@host`). Settings and
flags carry such URLs (an Alertmanager, a Prometheus, an LM endpoint, a database) and so can tool
output; every text the audit store writes, the API serves and the command line or the server's log
prints passes through `hide_credentials`, which keeps the scheme, the user and the host, as
SQLAlchemy shows a database URL (`postgresql://user:***@host/db`).
"""

from __future__ import annotations

import re
from typing import Any

HIDDEN = "***"
# scheme://user:password@ — the password runs to the last "@" before the host part ends, since a
# password may hold an unescaped "@" (`am:p@ss@host`), but never past "/", "?", "#" or a space.
USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s/?#@:]*):(?P<password>[^\s/?#]*)@")


def hide_credentials(text: str) -> str:
    """`text` with the password of every URL in it replaced by ***."""
    if "://" not in text:
        return text
    return USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{HIDDEN}@" if m["password"] != HIDDEN else m.group(), text)


def hidden(value: Any, place: str = "", changes: list[str] | None = None) -> Any:
    """`value` (JSON-like) with every string's credentials hidden; each changed place is appended to
    `changes` when given."""
    if isinstance(value, str):
        shown = hide_credentials(value)
        if shown != value and changes is not None:
            changes.append(f"{place or 'the value'} (a URL's password hidden)")
        return shown
    if isinstance(value, dict):
        return {key: hidden(item, f"{place}.{key}" if place else str(key), changes) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [hidden(item, f"{place}[{i}]", changes) for i, item in enumerate(value)]
    return value

"""Credentials in text as it may be stored, served or printed: a credential is never shown.

Two kinds are hidden, each by what it is rather than by where it sits:
- a URL's password: a URL names it in its userinfo (RFC 3986: `scheme://user:password@host`), in
  any text, tool output included; the scheme, the user and the host are kept, as SQLAlchemy shows a
  database URL (`postgresql://user:***@host/db`);
- the secrets this process was given: the query values and fragment of every URL the user set (the
  `DIAGNOSIS_*` settings that hold a URL, and a URL a command was passed: `keep_secrets_of`), every
  setting that holds a token, and the value of every environment variable named as a credential
  (`*_KEY`, `*_TOKEN`, `*_SECRET`, `*_PASSWORD`, `PGPASSWORD`: the names providers' SDKs and
  libpq read). Wherever one of
  those values appears, in whatever form a URL may carry it (as given, percent-encoded), it is
  hidden, so `?token=…`, `&X-Amz-Signature=…` or a key echoed in an error line is never shown.
A value is taken as a secret only when it looks like one (`looks_secret`): at least MIN_SECRET
characters, with a digit, a symbol other than a word separator, or a capital inside a word. Hiding
a value hides every occurrence of it in every text, tool output included, so a plain word a URL or
a variable happens to hold (`?application_name=grounded-diagnosis`, `sslmode=verify-full`, a
default `POSTGRES_PASSWORD=postgres`) would corrupt the evidence the gatekeeper checks against.

Every text the audit store writes, the API serves and the command line or the server's log prints
passes through `hide_credentials`.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

from contracts.settings import PREFIX, Settings, current

HIDDEN = "***"
MIN_SECRET = 8
# scheme://user:password@ — the password runs to the last "@" before the host part ends, since a
# password may hold an unescaped "@" (`am:p@ss@host`), but never past "/", "?", "#" or a space.
USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s/?#@:]*):(?P<password>[^\s/?#]*)@")
# `_PWD` needs its underscore: the shell's own PWD and OLDPWD are the working directory, no secret.
CREDENTIAL_NAME = re.compile(r"(?:^|_|PG)(?:PASSWORD|PASSWD)$|(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET)$|_PWD$",
                             re.IGNORECASE)
# What makes a value look generated rather than written: a digit, a symbol that is no word separator,
# or a capital after a small letter.
GENERATED = re.compile(r"[0-9]|[^\w\s.\-]|[a-z][A-Z]")
_GIVEN: set[str] = set()


def looks_secret(value: str) -> bool:
    return len(value) >= MIN_SECRET and GENERATED.search(value) is not None


def url_secrets(url: str) -> set[str]:
    """What of `url` is a credential when a user sets it: its password, query values and fragment."""
    try:
        parts = urlsplit(url.strip())
        password = parts.password
    except ValueError:
        return set()
    found = {password or "", parts.fragment} | {v for _, v in parse_qsl(parts.query, keep_blank_values=True)}
    return {v for v in found if looks_secret(v)}


def keep_secrets_of(url: str) -> None:
    """Hide what of `url` is a credential from every text from now on (a URL given on a command line)."""
    _GIVEN.update(url_secrets(url))


@lru_cache(maxsize=8)
def _secrets_of(environment: tuple[tuple[str, str], ...], given: frozenset[str]) -> tuple[str, ...]:
    found = set(given)
    settings = current()
    for name, field in Settings.model_fields.items():
        setting = getattr(settings, name)
        holds = (field.json_schema_extra or {}).get("holds")
        if setting and holds == "URL":
            found |= url_secrets(setting)
        elif setting and holds == "token" and looks_secret(setting.strip()):
            found.add(setting.strip())
    found |= {v for k, v in environment if CREDENTIAL_NAME.search(k) and looks_secret(v)}
    forms = found | {quote(v, safe="") for v in found} | {quote_plus(v, safe="") for v in found}
    # The longest first, so that a secret holding another is hidden whole.
    return tuple(sorted(forms, key=len, reverse=True))


def secrets() -> tuple[str, ...]:
    """The secrets this process was given, in every form they are hidden in."""
    environment = tuple(sorted((k, v) for k, v in os.environ.items()
                               if k.upper().startswith(PREFIX) or CREDENTIAL_NAME.search(k)))
    return _secrets_of(environment, frozenset(_GIVEN))


def hide_credentials(text: str, known: tuple[str, ...] | None = None) -> str:
    """`text` with the password of every URL in it, and every secret this process was given
    (`known`, else `secrets()`), replaced by ***."""
    if "://" in text:
        text = USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{HIDDEN}@" if m["password"] != HIDDEN else m.group(),
                            text)
    for secret in secrets() if known is None else known:
        if secret in text:
            text = text.replace(secret, HIDDEN)
    return text


def hidden(value: Any, place: str = "", changes: list[str] | None = None, known: tuple[str, ...] | None = None) -> Any:
    """`value` (JSON-like) with every string's credentials hidden; each changed place is appended to
    `changes` when given."""
    known = secrets() if known is None else known
    if isinstance(value, str):
        shown = hide_credentials(value, known)
        if shown != value and changes is not None:
            changes.append(f"{place or 'the value'} (a credential hidden)")
        return shown
    if isinstance(value, dict):
        return {key: hidden(item, f"{place}.{key}" if place else str(key), changes, known)
                for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [hidden(item, f"{place}[{i}]", changes, known) for i, item in enumerate(value)]
    return value

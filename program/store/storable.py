"""What the store writes: every value as every database and JSON hold it, and every credential
hidden, with each place that changed named in the record's note (`audit.unstorable`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from contracts import Finding
from tools.redaction import hidden

UNSTORABLE = "audit.unstorable"
# How many changed places a note names; the rest are counted.
NOTE_PLACES = 20


def storable(value: Any) -> tuple[Any, list[str]]:
    """`value` as every backend of the store and JSON hold it, and each place that changed, with how.

    Lone surrogates are not UTF-8 text, and PostgreSQL text refuses NUL, so both become U+FFFD (a
    surrogate pair split into two code points is joined); a float JSON has no form for (NaN, ±inf)
    becomes null; a key that is not a string, and any other value JSON has no form for, its str().
    Applied on every backend alike, so what is stored never depends on the database."""
    changes: list[str] = []
    return _storable(value, "", changes), changes


def written(value: Any) -> tuple[Any, list[str]]:
    """`value` as the store writes and serves it: storable, and every credential hidden
    (tools.redaction), with each place that changed."""
    changes: list[str] = []
    shown = hidden(value, "", changes)
    clean, more = storable(shown)
    return clean, [*changes, *more]


def _storable(value: Any, place: str, changes: list[str]) -> Any:
    if isinstance(value, str):
        clean, what = _storable_text(value)
        if what:
            changes.append(f"{place or 'the value'} ({what} replaced by U+FFFD)")
        return clean
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        changes.append(f"{place or 'the value'} ({value} stored as null)")
        return None
    if isinstance(value, Mapping):
        clean = {}
        for key, item in value.items():
            if not isinstance(key, str):
                changes.append(f"{place or 'the object'} (key {key!r} stored as text)")
            name = _storable(str(key), f"{place or 'the object'} key", changes)
            clean[name] = _storable(item, f"{place}.{name}" if place else name, changes)
        return clean
    if isinstance(value, list | tuple):
        return [_storable(item, f"{place}[{i}]", changes) for i, item in enumerate(value)]
    changes.append(f"{place or 'the value'} (a {type(value).__name__} stored as its text)")
    return _storable(str(value), place, [])


def _storable_text(text: str) -> tuple[str, str]:
    what = []
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        what.append("lone surrogates")
    if "\x00" in text:
        text = text.replace("\x00", "\N{REPLACEMENT CHARACTER}")
        what.append("NUL")
    return text, " and ".join(what)


def unstorable_note(places: list[str]) -> Finding:
    named = "; ".join(places[:NOTE_PLACES]) + (f"; and {len(places) - NOTE_PLACES} more"
                                                if len(places) > NOTE_PLACES else "")
    return Finding(rule=UNSTORABLE, message=f"changed to be stored, as on every backend: {named}")

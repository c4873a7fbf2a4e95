"""Text read by its compatibility forms: NFKC, so a full-width ｏｒｄｅｒ or ＃ reads as order or #.

The one home of that folding for names, words, labels and queries, in tools and in the evidence
layer alike. The gatekeeper's own normalisation, which keeps marks and superscripts apart
(`12⁸` is not 128), is program/evidence/characters.py.

Characters no reader sees (a zero-width space, a soft hyphen, a word joiner) are dropped: a log
line that spells `re\u200bfused` reads as `refused` to a person, and must to a search too.
"""

from __future__ import annotations

import re
import unicodedata

ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e")
_INVISIBLE = re.compile(f"[{''.join(sorted(ZERO_WIDTH))}]")


def nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def fold(text: str) -> str:
    """NFKC, then case folded, without the characters no reader sees: how names and terms are compared."""
    return _INVISIBLE.sub("", nfkc(text).casefold())


def fold_label(text: str) -> str:
    """NFKC, then case folded, every character kept: how a quoted label value is matched whole. To
    Prometheus and Alertmanager a value with a zero-width space in it is another value, so it must
    not become the name it looks like."""
    return nfkc(text).casefold()


def fold_words(text: str) -> str:
    """Folded, with every run of whitespace one space: how queries and runbooks are tokenised."""
    return re.sub(r"\s+", " ", fold(text)).strip()

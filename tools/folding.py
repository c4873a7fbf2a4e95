"""Text read by its compatibility forms: NFKC, so a full-width ｏｒｄｅｒ or ＃ reads as order or #.

The one home of that folding for names, words, labels and queries, in tools and in the evidence
layer alike. The gatekeeper's own normalisation, which keeps marks and superscripts apart
(`12⁸` is not 128), is program/evidence/characters.py.
"""

from __future__ import annotations

import re
import unicodedata


def nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def fold(text: str) -> str:
    """NFKC, then case folded: how names and terms are compared."""
    return nfkc(text).casefold()


def fold_words(text: str) -> str:
    """Folded, with every run of whitespace one space: how queries and runbooks are tokenised."""
    return re.sub(r"\s+", " ", fold(text)).strip()

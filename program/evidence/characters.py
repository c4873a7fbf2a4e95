"""Character classes that matching quotes and reading statements share: what folds, what never
folds, what negates, what is CJK. One home, so that a quote and a claim are read alike."""

from __future__ import annotations

import unicodedata

from tools.text.folding import nfkc

DASHES = frozenset("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d")
# They reorder what a reader sees ("current=\u202e91\u202c%" displays as "19%").
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
NEGATION_WORDS = frozenset(
    "not no never without non none nothing neither nor cannot can't couldn't isn't wasn't aren't weren't "
    "don't doesn't didn't won't wouldn't hasn't haven't hadn't shouldn't mustn't needn't".split()
)
NEGATION_CHARS = frozenset("未不无没非别勿否")
# Apostrophes a word may be written with: can't, can’t, canʼt are one word.
APOSTROPHES = frozenset("'\u2019\u02bc")


def negation_word(word: str) -> bool:
    """Is `word` (letters and apostrophes) a negation, whichever apostrophe it is written with?"""
    return "".join("'" if ch in APOSTROPHES else ch for ch in word).casefold() in NEGATION_WORDS


def is_cjk(ch: str) -> bool:
    return "\u2e80" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" or "\u3000" <= ch <= "\u303f"


def kept_apart(ch: str) -> bool:
    """A mark (nonspacing, spacing or enclosing), or a superscript or subscript: never folded into
    the character it sits on or stands for (`91̸%` is not `91%`, `12⁸` is not `128`)."""
    return unicodedata.category(ch).startswith("M") or unicodedata.decomposition(ch).startswith(("<super>", "<sub>"))


_COMPATIBLE: dict[str, str] = {}


def compatible_form(text: str) -> str:
    """NFKC character by character (full-width forms to their ASCII twins), except for what is
    kept apart."""
    if text.isascii():
        return text  # NFKC leaves ASCII as it is
    out = []
    for ch in text:
        form = _COMPATIBLE.get(ch)
        if form is None:
            form = _COMPATIBLE[ch] = ch if kept_apart(ch) else nfkc(ch)
        out.append(form)
    return "".join(out)


def bidi_controls(text: str) -> list[str]:
    return [f"U+{ord(ch):04X}" for ch in dict.fromkeys(text) if ch in BIDI_CONTROLS]

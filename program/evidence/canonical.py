"""The canonical form an excerpt and its ref are compared in (program/evidence/matching.py says what
it keeps and what it folds): each source character folded to what it means, separators into one
gap, and for every character of the form the index of the source character it came from, so that a
match found in the form is a span of the source."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from program.evidence.characters import BIDI_CONTROLS, DASHES, is_cjk, kept_apart
from program.evidence.text_cache import text_cache
from tools.text.folding import ZERO_WIDTH, fold

HARD_PUNCTUATION = frozenset("%./:-+<>=≠≤≥≦≧~≈≃≅!?")
# Symbols that only separate fields or mark up text (a log's "a | b", markdown's `code`), and the
# other punctuation that only separates words.
SEPARATOR_SYMBOLS = frozenset("|`")
SEPARATING_PUNCTUATION = frozenset(",;'\"*#&\\·、。‧¡¿")

def _is_word(ch: str) -> bool:
    return ch.isalnum() and not is_cjk(ch)


GAP, WORD, SOLID = 0, 1, 2  # separator; Latin-like letter or digit; CJK or meaningful punctuation
_FOLDED: dict[str, tuple[tuple[str, int], ...]] = {}


def _fold_char(ch: str) -> tuple[tuple[str, int], ...]:
    """The normalised characters one source character becomes, each with its kind (memoised)."""
    folded = _FOLDED.get(ch)
    if folded is None:
        if ch in ZERO_WIDTH:
            text = ""
        elif ch in DASHES:
            text = "-"
        elif kept_apart(ch) or ch in BIDI_CONTROLS:
            # Never folded away or into a plain digit: a mark on a token, or 12⁸, changes what it says.
            folded = ((ch, SOLID),)
            _FOLDED[ch] = folded
            return folded
        else:
            text = fold(ch)
        folded = tuple((c, WORD if _is_word(c) else GAP if _separates(c) else SOLID) for c in text)
        _FOLDED[ch] = folded
    return folded


@dataclass(frozen=True)
class Canonical:
    """Normalised text plus, for each of its characters, the index of the source character."""

    source: str
    text: str
    index: tuple[int, ...]


@text_cache()
def canonical(raw: str) -> Canonical:
    source = unicodedata.normalize("NFC", raw)
    last = len(source) - 1
    chars: list[str] = []
    index: list[int] = []
    gap = False
    previous_kind = GAP
    for i, ch in enumerate(source):
        for c, kind in _fold_char(ch):
            # A dash standing alone between spaces is a separator, not a minus sign or a hyphen.
            if kind == SOLID and c == "-" and (i == 0 or source[i - 1].isspace()) and (i == last or source[i + 1].isspace()):
                kind = GAP
            if kind == GAP:
                gap = True
                continue
            # A gap between words is kept as one space, except between a number and its unit.
            if gap and previous_kind == WORD and kind == WORD and not (chars[-1].isdigit() and c.isalpha()):
                chars.append(" ")
                index.append(i)
            gap = False
            previous_kind = kind
            chars.append(c)
            index.append(i)
    return Canonical(source=source, text="".join(chars), index=tuple(index))


def _separates(ch: str) -> bool:
    """Whitespace, controls and word-separating punctuation: what folds into a gap. Other
    punctuation carries meaning as a symbol does (‰, ′, ″, §, †)."""
    if ch in HARD_PUNCTUATION or ch.isalnum():
        return False
    category = unicodedata.category(ch)
    return (ch in SEPARATOR_SYMBOLS or ch in SEPARATING_PUNCTUATION or category[0] == "Z" or category == "Cc"
            or category in ("Pc", "Pd", "Ps", "Pe", "Pi", "Pf"))

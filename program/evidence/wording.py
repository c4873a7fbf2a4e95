"""What a text says in its own words, as against what it copies from its evidence, and which
language those words are in.

A claim often copies part of the line it cites: "Connection is not available" inside a claim that
says the pool IS exhausted, or a Chinese log message inside an English claim. Whoever reads the
claim's own stance (does it say yes or no?) or its language must read past the copy. A copy is a
run the text shares with a source, after the same folding the rest of the checks use, of at least
`COPY_CHARS` characters or `HAN_COPY` Han characters (which say more each); shorter shared runs
("is not", "告警") are the writer's own words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from difflib import SequenceMatcher

from contracts import Language
from program.evidence.statements import statement_form

COPY_CHARS = 12
HAN_COPY = 4
# What stands in for a copied run while more are looked for: a character no source holds.
BLANK = "\x00"
HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# A word of Latin letters: digits, units and identifiers (order-service, P99, 3.8GB) are no language.
WORD = re.compile(r"(?<![\w.\-/=])[A-Za-z]{2,}(?![\w\-/=.]*\d)(?![\w\-/=])")
# A Han character or a Latin word is only language when the writer wrote this much of it.
LANGUAGE_MIN = 2


def written_part(text: str, sources: Iterable[str]) -> str:
    """`text` (folded) with every run it copies from a source blanked out, in whatever order it copies them."""
    folded = statement_form(text)
    kept = folded
    for source in sources:
        source = statement_form(source or "")
        while source:
            # The longest shared run first, then the next in what is left: a claim may quote a line's
            # parts in another order than the line has them.
            match = SequenceMatcher(None, kept, source, autojunk=False).find_longest_match(0, len(kept), 0, len(source))
            run = kept[match.a:match.a + match.size]
            if match.size < COPY_CHARS and len(HAN.findall(run)) < HAN_COPY:
                break
            kept = kept[:match.a] + BLANK * match.size + kept[match.a + match.size:]
    return kept.replace(BLANK, " ")


def written_language(text: str, sources: Iterable[str] = (), names: Iterable[str] = ()) -> Language | None:
    """The language the text's own words are in, or None when it writes none (it only copies its
    sources, names and numbers). `names` are words that are no language of their own (service and
    alert names, states, words the sources hold)."""
    own = written_part(text, sources)
    known = {n.casefold() for n in names}
    han = len(HAN.findall(own))
    words = [w for w in WORD.findall(own) if w.casefold() not in known]
    if han >= LANGUAGE_MIN and han >= len(words):
        return "zh"
    if len(words) >= LANGUAGE_MIN:
        return "en"
    if han >= LANGUAGE_MIN:
        return "zh"
    return None

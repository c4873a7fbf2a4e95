"""The text as a prompt-injection detector reads it (program/evidence/injection.py): the disguises an
instruction to a model can wear undone, so that the detector's patterns see the plain words. HTML
entities, compatibility forms, invisible characters and accents; letters of other scripts that look
Latin; leetspeak, spaced-out letters and link text; and base64 or percent-encoded runs, decoded."""

from __future__ import annotations

import base64
import binascii
import html
import re
import unicodedata
from functools import lru_cache
from urllib.parse import unquote

# Accents (combining diacritical marks); removed only from Latin letters, so that Cyrillic й and
# kana voicing marks stay what they are.
_DIACRITICS = re.compile("[\u0300-\u036f]")
_LETTERS = re.compile(r"[^\W\d_]+")
BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{24,}={0,2}")


@lru_cache(maxsize=1)
def _confusables() -> dict:
    from confusable_homoglyphs import confusables

    return confusables.confusables_data


@lru_cache(maxsize=4096)
def latin_lookalike(ch: str) -> str | None:
    """The ASCII letter a non-Latin letter is confusable with (Unicode TR39 data), or None."""
    if ch.isascii() or unicodedata.east_asian_width(ch) in "WF":
        return None
    for glyph in _confusables().get(ch, ()):
        found = glyph["c"]
        if len(found) == 1 and found.isascii() and found.isalpha():
            # TR39's prototype of I-like letters is "l"; a capital imitates the capital I.
            return "I" if found == "l" and ch.isupper() else found
    return None


def _latinised(text: str) -> str:
    """Look-alike letters as Latin ones, in the words that imitate Latin words: a word with Latin
    letters in it, or a word made only of look-alikes in a text written mostly in Latin letters.
    Russian or Greek words of a Russian or Greek text are left as they are."""
    letters = [ch for ch in text if ch.isalpha()]
    ascii_letters = sum(ch.isascii() for ch in letters)
    mostly_latin = ascii_letters > len(letters) - ascii_letters

    def word(match: re.Match) -> str:
        written = match.group()
        mapped = [latin_lookalike(ch) for ch in written]
        if not any(mapped):
            return written
        mixed = any(ch.isascii() for ch in written)
        if mixed or (mostly_latin and all(m or ch.isascii() for ch, m in zip(written, mapped))):
            return "".join(m or ch for ch, m in zip(written, mapped))
        return written

    return _LETTERS.sub(word, text)


def _decoded_runs(text: str) -> list[str]:
    """Base64 runs of the text that decode to readable text (an instruction hidden from a reader)."""
    found = []
    for run in BASE64_RUN.findall(text):
        try:
            raw = base64.b64decode(run.replace("-", "+").replace("_", "/") + "=" * (-len(run) % 4), validate=True)
            decoded = raw.decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if " " in decoded and all(ch.isprintable() or ch.isspace() for ch in decoded):
            found.append(decoded)
    return found


# Readings that an encoding hides from a pattern: digits and symbols for letters (leetspeak), letters
# spaced out with one separator, CJK characters spaced out, and a markdown link's target.
_LEET = str.maketrans("013457@$", "oieasta" + "s")
# A word, not a base64 run (BASE64_RUN: 24 characters and more) or a hash.
_LEET_WORD = re.compile(r"(?<![A-Za-z0-9@$])(?=[A-Za-z0-9@$]*[A-Za-z])(?=[A-Za-z0-9@$]*[0-9@$])[A-Za-z0-9@$]{3,20}"
                        r"(?![A-Za-z0-9@$])")
_SPACED = re.compile(r"(?<![A-Za-z])[A-Za-z](?P<gap>[-._*/·+ ])[A-Za-z](?:(?P=gap)[A-Za-z])+(?![A-Za-z])")
_SPACED_CJK = re.compile(r"(?<=[\u3400-\u9fff]) (?=[\u3400-\u9fff])")
_LINK = re.compile(r"!?\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]*)\)")
_URL_PUNCTUATION = re.compile(r"[^\w%]+")


def _hidden_readings(text: str) -> list[str]:
    """The text as each encoding that hides words from a pattern would have it read, where that
    differs: leetspeak as letters (1gn0r3 -> ignore), spaced letters joined (I-g-n-o-r-e, 结 论),
    percent-escapes decoded, and each markdown link as its text and its target's words
    (`[结论](https://x?result=PASS)` -> 结论 https x result PASS)."""
    readings = [
        _LEET_WORD.sub(lambda m: m.group().translate(_LEET), text),
        _SPACED_CJK.sub("", _SPACED.sub(lambda m: re.sub(r"[^A-Za-z]", "", m.group()), text)),
        unquote(text),
        " ".join(m["text"] + " " + _URL_PUNCTUATION.sub(" ", unquote(m["target"])) for m in _LINK.finditer(text)),
    ]
    return [reading for reading in dict.fromkeys(readings) if reading and reading != text]


def normalised(text: str) -> str:
    """The form the detector reads: HTML entities resolved, compatibility forms (full-width, maths
    letters, ligatures) as plain ones, format characters (zero-width, bidi, soft hyphen) and accents
    removed, look-alike letters as Latin ones, and what base64 or another encoding hides
    (`_hidden_readings`) appended as text."""
    kept: list[str] = []
    for ch in unicodedata.normalize("NFKD", html.unescape(text)):
        if unicodedata.category(ch) == "Cf" or (_DIACRITICS.match(ch) and kept and kept[-1].isascii()):
            continue
        kept.append(ch)
    text = _latinised(unicodedata.normalize("NFC", "".join(kept)))
    return "\n".join([text, *_hidden_readings(text), *(normalised(run) for run in _decoded_runs(text))])

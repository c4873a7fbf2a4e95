"""Does an executor's evidence_excerpt really occur in the system-side ref text?

A similarity score cannot catch tampering (``91%`` -> ``95%`` is one character), so a match is
exact after conservative normalisation, piece by piece around an ellipsis. Fuzzy alignment is
used only to explain a mismatch. After locating the excerpt, the edges are checked: a span that
cuts a number or identifier in half, or that starts right after a negation the excerpt dropped,
changes meaning and is rejected.

Normalisation keeps ``% . / : - +``, every comparison or question mark (``= ≠ ! < > ≤ ≥ ~ ≈ ?``)
and every symbol (``✓ ✗ ↑ ↓ $``) because they carry meaning (3.8 vs 38, 50/50, 11:17, active=50/50
vs active≠50/50, ✓ vs ✗); only whitespace and the punctuation that separates words fold into one
optional gap, and a space between a number and its unit (``4200 ms``) is the same text as none.
Full-width forms fold to their ASCII twins, but superscript and subscript digits are not digits
(``12⁸`` is not ``128``), a combining mark is kept as a character of its own (``91̸%`` is not
``91%``), and so is a bidirectional control, which the gatekeeper refuses in what it passes.

Letter case folds for words (``ERROR`` is ``error``), never inside a token that holds a digit or
mixes case: ``15M`` is not ``15m``, ``3.8Gb`` is not ``3.8GB``, a request id is opaque. A quote
starts and ends on the ref's token boundaries: never inside a word (``available`` is not quoted
from ``unavailable``), an identifier (``db`` from ``orders-db``, ``healthy`` from
``healthy=false``, ``can`` from ``can't``), or a signed, decimal or grouped number (``120ms`` from
``-120ms``, ``5s`` from ``.5s``, ``250ms`` from ``1,250ms``).

A verbatim quote can still read differently from its source ("connect to orders-db" from "couldn't
connect to orders-db"), and no list of negation words ends that. So what the verifier judges and
the answer quotes is never the quote alone: it is ``Match.context``, the whole clauses of the ref
(``;``-separated, as the citation menu numbers them) that the quote sits in.
"""

from __future__ import annotations

import bisect
import difflib
import re
import unicodedata
from dataclasses import dataclass

from rapidfuzz import fuzz

from program.evidence.canonical import Canonical, canonical
from program.evidence.characters import APOSTROPHES, NEGATION_CHARS, compatible_form, is_cjk, negation_word
from program.evidence.units import UNITS
from program.evidence.text_cache import text_cache
from tools.text.folding import nfkc
from tools.text.search import word_starts

ELLIPSIS = re.compile(r"\.{3,}|…+")
# A ref's clauses: "HighMemoryUsage firing on order-service; current=91%; threshold=85%".
CLAUSE = re.compile(r"\s*[;；]\s*")
# Where one clause of a ref ends and the next begins: ", " "; " "] " " - " and their CJK forms.
CLAUSE_BREAK = re.compile(r"[,;，；。！？!?\]\n]|\s[-–—]\s")
GENERIC_WORDS = frozenset(
    "error errors warn warning info debug alert alerts firing resolved log logs service ok true false "
    "null none message status 日志 告警 错误 服务 正常".split()
)
MIN_SIGNIFICANT_CHARS = 6
# Memos keep at most this many characters of text (a normalised string costs ~10 bytes a character).
MIN_PIECE_CHARS = 4
# A letter or digit of any script but CJK (which has no spaces to mark its words), or "_".
_WORD = r"[^\W\u2e80-\u9fff\uf900-\ufaff\u3000-\u303f]"
# Punctuation that joins what stands on both sides of it: 1,250 and 3.8 (between digits), can't
# and is_healthy (between letters or digits).
GROUPING, JOINING = frozenset(",."), frozenset("'\u2019_")
# Punctuation that ends a sentence or a field when a gap or the end follows it ("after 30s. Retrying").
ENDING = frozenset(".!?:")
# CJK text writes its punctuation full-width (：！？．), with the space of its ASCII form built in:
# "排查：检查" is "排查: 检查", so such a mark ends a sentence or a field whatever follows it.
EDGE_SEPARATORS = frozenset(",;\"'、。|`")
CRITICAL = re.compile(rf"{_WORD}+(?:[.\-/:+]{_WORD}+)*%?|[未不无没非别勿否]")


def clauses(text: str) -> list[str]:
    """A ref's clauses, numbered from 1, when it has more than one."""
    parts = CLAUSE.split(text)
    return parts if len([p for p in parts if p]) >= 2 else []


def significant_chars(text: str) -> int:
    return sum(map(str.isalnum, text))


@text_cache()
def split_pieces(excerpt: str) -> tuple[str, ...]:
    return tuple(p for p in (x.strip() for x in ELLIPSIS.split(compatible_form(excerpt))) if p)


def occurs_in_order(excerpt: str, ref_text: str) -> bool:
    """Cheap pre-check: every normalised piece occurs in the ref, in order (no edge checks)."""
    ref = canonical(ref_text).text
    cursor = 0
    for piece in split_pieces(excerpt):
        found = ref.find(canonical(piece).text, cursor)
        if found < 0:
            return False
        cursor = found + 1
    return True


@dataclass(frozen=True)
class Match:
    ok: bool
    rule: str | None = None
    message: str = ""
    matched_text: str | None = None
    # The whole clauses of the ref that the quote sits in: what a judge and a reader are shown.
    context: str | None = None
    too_weak: bool = False  # the excerpt cannot be compared at all: low confidence, not fabrication
    # Where each piece of the quote sits, as [start, end) in the ref's NFC form (canonical(ref).source).
    spans: tuple[tuple[int, int], ...] = ()


def _gap(ch: str) -> bool:
    """A character a quote may start or end beside: whitespace, a bracket or quotation mark, or the
    punctuation that separates words (, ; 、 。 | and the backquote). A dash, `@`, `‰` or `$` is part
    of the token it touches."""
    form = compatible_form(ch)
    return len(form) == 1 and (form.isspace() or form in EDGE_SEPARATORS
                               or unicodedata.category(form) in ("Zs", "Zl", "Zp", "Cc", "Ps", "Pe", "Pi", "Pf"))


def _spaced_ending(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in "FW" and compatible_form(ch) in ENDING


def _inside_token(source: str, position: int) -> bool:
    """Does `position` (between two characters of the ref) fall inside a token? A token is anything
    not broken by a gap: a word, a number with its sign, decimal point, digit groups and unit
    (-120ms, .5s, 1,250ms, 91%, 9‰, $12), an identifier (orders-db, orders–db, healthy=false,
    healthy≠true, orders@db, can't), a range (5~10). CJK has no gaps between its words: between two
    CJK characters, a quote may start or end only where jieba starts a word (使用率 from 内存使用率,
    not 存使用率)."""
    if position <= 0 or position >= len(source):
        return False
    before, after = source[position - 1], source[position]
    outer_left = source[position - 2] if position >= 2 else ""
    outer_right = source[position + 1] if position + 1 < len(source) else ""
    for left, middle, right in ((outer_left, before, after), (before, after, outer_right)):
        if middle in GROUPING and left.isdigit() and right.isdigit():
            return True
        if middle in JOINING and left.isalnum() and right.isalnum():
            return True
    if _spaced_ending(before) or _spaced_ending(after):
        return False
    if is_cjk(before) and is_cjk(after):
        start = position - 1
        while start > 0 and is_cjk(source[start - 1]):
            start -= 1
        end = position + 1
        while end < len(source) and is_cjk(source[end]):
            end += 1
        return position - start not in word_starts(source[start:end])
    if _gap(before) or _gap(after):
        return False
    # A sentence's or a field's end: "timed out after 30s. Retrying", "pool stats: active=50/50".
    return not (after in ENDING and (not outer_right or _gap(outer_right)))


def _token_around(source: str, position: int) -> str:
    """The characters around `position` up to a gap, to name in a message."""
    start, end = position, position
    while start > 0 and not _gap(source[start - 1]):
        start -= 1
    while end < len(source) and not _gap(source[end]):
        end += 1
    return source[start:end]


def _case_difference(piece: Canonical, ref: Canonical, found: int) -> str | None:
    """Where the piece, which matches the ref at `found` with case folded, writes another case inside
    a run of letters and digits that holds a digit: a value with its unit (15m, 3.8GB) or an opaque
    identifier (abc123X), where `M` is not `m`. Words and names (ERROR, HighMemoryUsage, current=)
    compare case-blind."""
    for k in range(len(piece.text)):
        ours = piece.source[piece.index[k]]
        position = ref.index[found + k]
        theirs = ref.source[position]
        ours_form, theirs_form = compatible_form(ours), compatible_form(theirs)
        if ours_form == theirs_form or ours_form.casefold() != theirs_form.casefold():
            continue  # the same character, or one the normalisation folds on purpose (a dash, a space)
        # The run is read in the normalised text, where a unit after a space joins its number (10 kb),
        # but a word does not (3 times, 0 and), nor anything across other separators ([11:18][INFO]).
        def joined(a: int, b: int) -> bool:
            if not (ref.text[a].isalnum() and ref.text[b].isalnum()):
                return False
            between = ref.source[ref.index[a] + 1:ref.index[b]]
            if not between:
                return True
            unit = re.match(r"[^\W\d_]+", ref.source[ref.index[b]:])
            return between.isspace() and ref.text[a].isdigit() and unit is not None and unit.group() in UNITS

        start, end = found + k, found + k + 1
        while start > 0 and joined(start - 1, start):
            start -= 1
        while end < len(ref.text) and joined(end - 1, end):
            end += 1
        if any(ch.isdigit() for ch in ref.text[start:end]):
            run = ref.source[ref.index[start]:ref.index[end - 1] + 1]
            return f"excerpt writes {ours!r} where the ref writes {theirs!r} in {run!r}"
    return None


def context_of(source: str, spans: list[tuple[int, int]]) -> str:
    """The whole clauses the spans sit in, as the ref writes them; an ellipsis stands for clauses
    between them that no span touches."""
    starts = [0] + [m.end() for m in CLAUSE.finditer(source)]
    ends = [m.start() for m in CLAUSE.finditer(source)] + [len(source)]
    chosen = set()
    for start, end in spans:
        first = bisect.bisect_right(starts, start) - 1
        last = max(first, min(bisect.bisect_left(ends, end), len(ends) - 1))
        chosen.update(range(first, last + 1))
    runs: list[list[int]] = []
    for k in sorted(chosen):
        if runs and runs[-1][1] == k - 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    return " … ".join(source[starts[a]:ends[b]] for a, b in runs)


def _negation_before(source: str, position: int) -> str | None:
    """A negation word or character right before `position` (skipping spaces and punctuation)."""
    j = position - 1
    while j >= 0 and not (source[j].isalnum() or source[j] in APOSTROPHES):
        j -= 1
    if j < 0:
        return None
    if source[j] in NEGATION_CHARS:
        return source[j]
    k = j
    while k >= 0 and (source[k].isalnum() or source[k] in APOSTROPHES) and not is_cjk(source[k]):
        k -= 1
    word = source[k + 1 : j + 1]
    return word if negation_word(word) else None


def _negations(text: str, offset: int = 0) -> list[tuple[int, str]]:
    found = [(offset + i, ch) for i, ch in enumerate(text) if ch in NEGATION_CHARS]
    found += [(offset + m.start(), m.group()) for m in re.finditer(r"[A-Za-z'\u2019\u02bc]+", text)
              if negation_word(m.group())]
    return sorted(found)


def _joined_negation(source: str, before: tuple[int, int], after: tuple[int, int]) -> str | None:
    """A negation the ellipsis between two kept spans skips, when it belongs to a clause that one of
    them quotes: "Connection is … available" hides a "not". A negation in a clause the ellipsis
    skips whole ("HikariPool-1 … request timed out") changes nothing that is quoted."""
    for position, word in _negations(source[before[1] : after[0]], before[1]):
        clause_start = max((m.end() for m in CLAUSE_BREAK.finditer(source, 0, position)), default=0)
        following = CLAUSE_BREAK.search(source, position)
        clause_end = following.start() if following else len(source)
        if clause_start < before[1] or clause_end > after[0]:
            return word
    return None


def explain_mismatch(piece: str, ref_text: str) -> str:
    """Name the first critical difference between a piece and its best alignment in the ref."""
    piece_c, ref_c = canonical(piece), canonical(ref_text)
    alignment = fuzz.partial_ratio_alignment(piece_c.text, ref_c.text)
    if alignment is None or alignment.score < 50:
        score = 0 if alignment is None else alignment.score
        return f"excerpt text {piece!r} does not occur in the ref (best similarity {score:.0f}%)"
    start = ref_c.index[alignment.dest_start] if alignment.dest_start < len(ref_c.index) else len(ref_c.source)
    end = ref_c.index[alignment.dest_end - 1] + 1 if alignment.dest_end > 0 else start
    span = ref_c.source[start:end]
    ours = CRITICAL.findall(nfkc(piece))
    theirs = CRITICAL.findall(span)
    folded_ours, folded_theirs = [t.casefold() for t in ours], [t.casefold() for t in theirs]
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=folded_ours, b=folded_theirs, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        said = " ".join(ours[i1:i2]) or "(nothing)"
        found = " ".join(theirs[j1:j2]) or "(nothing)"
        hint = ""
        if any(ord(ch) > 127 and not is_cjk(ch) for ch in said):
            hint = " (non-ASCII look-alike characters)"
        return (
            f"excerpt says {said!r}{hint} where the ref says {found!r} "
            f"(best alignment {alignment.score:.0f}% against {span!r})"
        )
    return f"excerpt differs from the ref in wording (best alignment {alignment.score:.0f}% against {span!r})"


def match_excerpt(excerpt: str, ref_text: str) -> Match:
    """Check one excerpt against one ref text. Never raises for any pair of strings."""
    pieces = split_pieces(excerpt)
    canon_pieces = [canonical(p).text for p in pieces]
    total = sum(significant_chars(p) for p in canon_pieces)
    if total < MIN_SIGNIFICANT_CHARS:
        return Match(False, "evidence.excerpt_too_short", f"excerpt {excerpt!r} is too short to compare", too_weak=True)
    if any(significant_chars(p) < MIN_PIECE_CHARS for p in canon_pieces):
        return Match(
            False,
            "evidence.excerpt_too_short",
            f"a piece of excerpt {excerpt!r} between ellipses has fewer than {MIN_PIECE_CHARS} letters or digits",
            too_weak=True,
        )
    words = {w for p in canon_pieces for w in re.split(r"[^\w]+", p) if w}
    if words and words <= GENERIC_WORDS:
        return Match(False, "evidence.excerpt_too_generic", f"excerpt {excerpt!r} is too generic to compare", too_weak=True)

    ref = canonical(ref_text)
    cursor = 0
    spans: list[tuple[int, int]] = []
    for piece, canon_piece in zip(pieces, canon_pieces, strict=True):
        found = ref.text.find(canon_piece, cursor)
        if found < 0:
            if ref.text.find(canon_piece) >= 0:
                return Match(False, "evidence.excerpt_mismatch", f"excerpt pieces of {excerpt!r} are out of order")
            return Match(False, "evidence.excerpt_mismatch", explain_mismatch(piece, ref_text))
        start = ref.index[found]
        end = ref.index[found + len(canon_piece) - 1] + 1
        for position in (start, end):
            if _inside_token(ref.source, position):
                return Match(
                    False,
                    "evidence.excerpt_mismatch",
                    f"excerpt {piece!r} cuts {_token_around(ref.source, position)!r} in the ref; a quote starts "
                    "and ends on whole words, numbers and identifiers",
                )
        if difference := _case_difference(canonical(piece), ref, found):
            return Match(False, "evidence.excerpt_mismatch",
                         f"{difference}; units, values and identifiers compare with their case")
        negation = _negation_before(ref.source, start)
        if negation:
            return Match(
                False,
                "evidence.excerpt_mismatch",
                f"excerpt {piece!r} drops the negation {negation!r} that precedes it in the ref",
            )
        if spans:
            negation = _joined_negation(ref.source, spans[-1], (start, end))
            if negation:
                return Match(
                    False,
                    "evidence.excerpt_mismatch",
                    f"the ellipsis in {excerpt!r} skips the negation {negation!r} of a clause it quotes",
                )
        spans.append(_with_edges(ref.source, start, end, piece))
        cursor = found + len(canon_piece)
    matched = " … ".join(ref.source[s:e] for s, e in spans)
    return Match(True, matched_text=matched, context=context_of(ref.source, spans), spans=tuple(spans))


def _folds_away(text: str) -> bool:
    return not canonical(text).text


def _with_edges(source: str, start: int, end: int, piece: str) -> tuple[int, int]:
    """The span widened over the separators (brackets, spaces) that the quoted piece itself begins
    or ends with, so that what is shown as matched is the ref's text for the whole quote."""
    lead = next((k for k in range(len(piece)) if not _folds_away(piece[k])), len(piece))
    trail = next((k for k in range(len(piece)) if not _folds_away(piece[-1 - k])), len(piece))
    while lead and start > 0 and _folds_away(source[start - 1]):
        start, lead = start - 1, lead - 1
    while trail and end < len(source) and _folds_away(source[end]):
        end, trail = end + 1, trail - 1
    return start, end

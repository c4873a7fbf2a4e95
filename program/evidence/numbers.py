"""The numbers of a statement, read as code can check them against its evidence
(program/evidence/statements.py says what code reads of a statement): each number, in digits or in
words, with its sign, its unit, a comparison written before it and the quantity it is said of."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

from program.evidence.statements import CLAUSE_END, pairs, statement_form
from program.evidence.units import UNIT, UNITS


# A number as written in digits: a comparison written before it (p99 > 2s, current≠91%), its sign
# (only where no word or digit precedes it, so the 1 of HikariPool-1 and the 11 of 2026-11-30 are
# unsigned), digit groups, decimals, a unit (not one that begins a longer word, but a CJK word may
# follow: 30 秒内), and a mark or superscript that makes it unreadable.
DIGITS = re.compile(r"(?P<relation>(?:[<>!=]=|[<>≤≥≠≈~])\s*)?(?P<sign>(?<![\w.])[-+])?"
                    r"(?P<number>(?<![\d,])\d{1,3}(?:,\d{3})+(?![\d,])|\d+(?:\.\d+)?|(?<![\w.])\.\d+)"
                    rf"(?P<unit>\s?(?:{UNIT})(?![^\W\d_\u3400-\u9fff]))?(?P<mark>[\u0300-\u036f\u2070-\u209f\u00b2\u00b3\u00b9])?")
# Comparisons: as symbols, and in words right before the number. Only a bound (< > ≤ ≥) can be
# grounded by a measured value that satisfies it; ≠ and ≈ need the same comparison in the evidence.
RELATIONS = {"": "=", "==": "=", "<=": "≤", ">=": "≥", "!=": "≠", "~": "≈"}
BOUNDS = {">": operator.gt, "<": operator.lt, "≥": operator.ge, "≤": operator.le}
RELATION_WORDS = re.compile(
    r"(?:(?P<_ge>至少|不低于|不少于|\bat least)|(?P<_le>不超过|至多|\bat most|\bno more than)|"
    r"(?P<_gt>超过|高于|大于|多于|超出|\babove|\bover|\bmore than|\bgreater than|\bhigher than|\bexceed(?:s|ed|ing)?)|"
    r"(?P<_lt>低于|小于|少于|不到|\bbelow|\bunder|\bless than|\blower than))\s*$", re.IGNORECASE)
WORDED = {"_ge": "≥", "_le": "≤", "_gt": ">", "_lt": "<"}
EN_UNITS = {w: n for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                       "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
EN_TENS = {w: 10 * n for n, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if n >= 2}
EN_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
EN_NUMBER = re.compile(r"\b(?:(?:" + "|".join([*EN_UNITS, *EN_TENS, *EN_SCALES, "point"]) + r")(?:[\s-]+(?:and\s+)?|\b))+"
                       r"(?P<percent>\s*(?:percent|per\s+cent)\b)?", re.IGNORECASE)
ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
ZH_SCALES = {"十": 10, "百": 100, "千": 1000, "万": 10**4, "亿": 10**8}
ZH_NUMBER = re.compile(r"(?P<percent>百分之)?(?P<number>[零〇一二两三四五六七八九十百千万亿]+(?:点[零〇一二两三四五六七八九]+)?)"
                       rf"(?P<unit>\s?(?:{UNIT}))?")
# The names code gives an alert's fields (tools.functions.alert_text), as a claim may write them.
FIELD_NAMES = {"current": ("当前", "目前", "当前值", "现在"), "threshold": ("阈值", "门限", "阀值"),
               "duration": ("持续", "持续时间", "时长")}


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: str | None
    written: str
    start: int
    end: int
    relation: str = "="  # a comparison written before the number: >, ≥, ≠ ...
    readable: bool = True  # False when a mark or superscript sits on it (91̸%, 12⁸)

    @property
    def measure(self) -> tuple[str, float]:
        """What the number measures and its value in that measure's base unit ("" for no unit)."""
        if self.unit is None:
            return "", self.value
        kind, scale = UNITS[self.unit]
        return kind, self.value * scale

    def same_measure(self, other: Quantity) -> bool:
        """The same value in the same unit, after scaling (2.3 秒 is 2300ms; 15 hours is not 15m)."""
        (kind, value), (other_kind, other_value) = self.measure, other.measure
        return kind == other_kind and abs(value - other_value) <= 1e-9 * max(1.0, abs(value))


def _en_value(words: list[str]) -> float | None:
    total, current, fraction, seen = 0, 0, None, False
    for word in words:
        if word == "point":
            fraction = ""
        elif fraction is not None:
            if word not in EN_UNITS or EN_UNITS[word] > 9:
                return None
            fraction += str(EN_UNITS[word])
        elif word in EN_UNITS:
            current += EN_UNITS[word]
        elif word in EN_TENS:
            current += EN_TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        else:
            total += max(current, 1) * EN_SCALES[word]
            current = 0
        seen = True
    if not seen:
        return None
    value = float(total + current)
    return value + float(f"0.{fraction}") if fraction else value


def _zh_value(text: str) -> float:
    whole, _, decimals = text.partition("点")
    total, section, digit = 0, 0, None
    for ch in whole:
        if ch in ZH_DIGITS:
            digit = ZH_DIGITS[ch] if digit is None else digit * 10 + ZH_DIGITS[ch]
        elif ch in ("万", "亿"):
            total = (total + section + (digit or 0)) * ZH_SCALES[ch]
            section, digit = 0, None
        else:
            section += (1 if digit is None else digit) * ZH_SCALES[ch]
            digit = None
    value = float(total + section + (digit or 0))
    if decimals:
        value += float("0." + "".join(str(ZH_DIGITS[ch]) for ch in decimals))
    return value


def _unit(written: str | None) -> str | None:
    return (written or "").strip() or None


def quantities(text: str) -> list[Quantity]:
    """Every number the text states, in digits or in words, with its unit where it has one. A
    number word counts from ten up, or with a percent or a decimal point: "one of the pods" or
    "一个告警" is a count in passing, "十分" an adverb."""
    text = statement_form(text)
    found = []
    for m in DIGITS.finditer(text):
        value = float(m.group("number").replace(",", "")) * (-1 if m.group("sign") == "-" else 1)
        relation = (m.group("relation") or "").strip() or _relation_in_words(text[:m.start()])
        found.append(Quantity(value, _unit(m.group("unit")), m.group(0).strip(), m.start(), m.end(),
                              relation=RELATIONS.get(relation, relation), readable=m.group("mark") is None))
    for m in EN_NUMBER.finditer(text):
        words = [w for w in re.split(r"[\s-]+", m.group(0).casefold()) if w and w not in ("and", "percent", "per", "cent")]
        value = _en_value(words)
        if value is not None and (value >= 10 or m.group("percent") or "point" in words):
            found.append(Quantity(value, "%" if m.group("percent") else None, m.group(0).strip(), m.start(), m.end()))
    for m in ZH_NUMBER.finditer(text):
        number = m.group("number")
        if len(number) < 2 and not m.group("percent"):
            continue
        value = _zh_value(number)
        if value >= 10 or m.group("percent") or "点" in number:
            unit = "%" if m.group("percent") else _unit(m.group("unit"))
            found.append(Quantity(value, unit, m.group(0), m.start(), m.end()))
    return sorted(found, key=lambda q: q.start)


def _relation_in_words(before: str) -> str:
    """The comparison written in words right before a number: "超过 3 秒", "more than 85%"."""
    found = RELATION_WORDS.search(before[-16:])
    return WORDED[found.lastgroup] if found else "="


def _grounded(q: Quantity, evidence: list[Quantity]) -> bool:
    """A stated number is grounded by an evidence number of the same measure (the same value when
    the claim gives no unit), and, where the claim writes a comparison, by the same comparison
    (`P99>2s`) or by a measured value that satisfies it: "每次超过 3 秒" against 3750ms."""
    if not q.readable:
        return False
    for e in evidence:
        if not e.readable:
            continue
        if (q.relation == "=" or e.relation == q.relation) and (
                e.value == q.value if q.unit is None else q.same_measure(e)):
            return True
        if q.relation in BOUNDS and e.relation == "=" and _satisfies(e, q):
            return True
    return False


def _satisfies(measured: Quantity, bound: Quantity) -> bool:
    (kind, value), (bound_kind, limit) = measured.measure, bound.measure
    return kind == bound_kind and BOUNDS[bound.relation](value, limit)


def ungrounded_numbers(text: str, evidence: list[str]) -> list[str]:
    """Numbers the statement gives that its evidence does not: by value, sign and, where the
    statement writes one, unit (`128%` is not the `128` of `GC次数: 128`, `15M` is not `15m`, `15
    hours` is not `15m`), and comparison (`≠91%` is not `=91%`). A number with a mark or a
    superscript on it (`91̸%`, `12⁸`) cannot be read, so it is never grounded."""
    grounding = [q for e in evidence for q in quantities(e)]
    return list(dict.fromkeys(q.written for q in quantities(text) if not _grounded(q, grounding)))


def _name_parts(text: str) -> set[str]:
    """What a quantity's name is made of: its Latin words, and each pair of adjacent CJK characters."""
    text = statement_form(text).casefold()
    parts = set(re.findall(r"[^\W\d_\u2e80-\u9fff]{2,}", text))
    for run in re.findall(r"[\u4e00-\u9fff]+", text):
        parts.update(run[i:i + 2] for i in range(max(1, len(run) - 1)))
    return parts


def _names(key: str) -> list[set[str]]:
    """The parts of each name a quantity goes by: its key, and the words a claim writes for the
    fields code names (current is 当前)."""
    return [parts for name in (key, *FIELD_NAMES.get(key.casefold(), ())) if (parts := _name_parts(name))]


def _named(names: list[set[str]], words: set[str]) -> bool:
    return any(len(parts & words) * 2 >= len(parts) for parts in names)


def misbound_numbers(text: str, evidence: list[str]) -> list[str]:
    """Numbers the statement gives for a quantity that its evidence names with another value:
    "GC次数为 91" against "GC次数: 128", "current 85%" or "当前 85%" against "current=91%;
    threshold=85%". A number is said of the words right before it in its clause (after the word
    that follows the number before it, which is that number's: "1000 ms threshold for 8 minutes"),
    or else of the word right after it ("91% threshold"); the quantity is an evidence key that
    shares at least half its parts with those words."""
    named = []
    for key, _, value in pairs(evidence):
        values = quantities(value)
        if values and (names := _names(key)):
            named.append((key, value, names, values))
    text = statement_form(text)
    found = []
    stated = quantities(text)
    for n, q in enumerate(stated):
        before = text[:q.start]
        start = max((m.end() for m in CLAUSE_END.finditer(before)), default=0)
        if n and stated[n - 1].end > start:
            following = re.match(r"\s*(?:[^\W\d_]+|[\u4e00-\u9fff]{1,4})", text[stated[n - 1].end:q.start])
            start = stated[n - 1].end + (following.end() if following else 0)
        after = text[q.end:stated[n + 1].start if n + 1 < len(stated) else len(text)]
        after = after[:CLAUSE_END.search(after).start()] if CLAUSE_END.search(after) else after
        first_after = re.match(r"\s*(?:[\u4e00-\u9fff]{0,2}[^\W\d_\u4e00-\u9fff]+|[\u4e00-\u9fff]{1,4})", after)
        for words in (_name_parts(text[start:q.start]), _name_parts(first_after.group() if first_after else "")):
            keys = [(key, value, values) for key, value, names, values in named if _named(names, words)]
            if keys:
                if not any(_grounded(q, values) for _, _, values in keys):
                    found.append(f"{q.written} (the evidence gives {keys[0][0]} as {keys[0][1]})")
                break
    return found

"""What code can read of a statement (a claim, an answer sentence) against the evidence it rests on.

Code cannot judge meaning in general. It can see two things here (and the topics a statement names,
`relevance.unnamed_topics`); a statement that breaks one is blocked in code whatever a verifier says:
- its numbers, in digits or in words (``百分之九十九``, ``ninety nine percent``), each with its sign,
  its unit and the quantity it is said of: a number must occur in the evidence with the same value
  and, where the statement gives one, the same unit, and where the evidence binds a quantity of the
  same name to a value (``GC次数: 128``), the statement must give that value;
- the state it asserts: an alert's state (firing or pending against resolved or inactive, the
  states Prometheus and Alertmanager report) and a ``key=true|false`` value in the evidence.
What is left to the verifier (which sees the whole clauses the quotes sit in): a cause or a
consequence the evidence does not state, a verb that reverses a quoted one, and any other
paraphrase.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

NEGATION_WORDS = frozenset(
    "not no never without non none nothing neither nor cannot can't couldn't isn't wasn't aren't weren't "
    "don't doesn't didn't won't wouldn't hasn't haven't hadn't shouldn't mustn't needn't".split()
)
NEGATION_CHARS = frozenset("未不无没非别勿否")
NEGATION = re.compile(r"[" + "".join(sorted(NEGATION_CHARS)) + r"]|\b(?:" + "|".join(
    re.escape(w) for w in sorted(NEGATION_WORDS, key=len, reverse=True)) + r")\b", re.IGNORECASE)
# Where a clause of a statement ends: what a negation or a quantity's name does not reach across.
CLAUSE_END = re.compile(r"[,;，；。！？!?\n]|\s[-–—]\s|\bbut\b|但|而")

# A number as written in digits: its sign (only where no word or digit precedes it, so the 1 of
# HikariPool-1 and the 11 of 2026-11-30 are unsigned), digit groups, decimals, and a unit of SI
# shape written right after it (91%, 3.8GB, 4200ms, 4200 ms, 15m).
DIGITS = re.compile(r"(?P<sign>(?<![\w.])[-+\u2212])?(?P<number>(?<![\d,])\d{1,3}(?:,\d{3})+(?![\d,])|\d+(?:\.\d+)?"
                    r"|(?<![\w.])\.\d+)(?P<unit>\s?(?:%|(?:[kKMGTP]i?[Bb]|[mµun]?s|min|[hdmM]|x)(?:/s)?(?![A-Za-z])))?")
EN_UNITS = {w: n for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                       "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
EN_TENS = {w: 10 * n for n, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if n >= 2}
EN_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
EN_NUMBER = re.compile(r"\b(?:(?:" + "|".join([*EN_UNITS, *EN_TENS, *EN_SCALES, "point"]) + r")(?:[\s-]+(?:and\s+)?|\b))+"
                       r"(?P<percent>\s*(?:percent|per\s+cent)\b)?", re.IGNORECASE)
ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
ZH_SCALES = {"十": 10, "百": 100, "千": 1000, "万": 10**4, "亿": 10**8}
ZH_NUMBER = re.compile(r"(?P<percent>百分之)?(?P<number>[零〇一二两三四五六七八九十百千万亿]+(?:点[零〇一二两三四五六七八九]+)?)")

# Alert states as Prometheus and Alertmanager report them, and the words a statement asserts them with.
RAISED_STATES = ("firing", "pending")
CLEARED_STATES = ("resolved", "inactive")
RAISED_WORDS = re.compile(r"\b(?:firing|fired|fires|triggered|pending)\b|触发|告警中|正在告警", re.IGNORECASE)
CLEARED_WORDS = re.compile(r"\b(?:resolved|recovered|cleared|inactive|normal)\b|恢复|解除|消除|正常|已结束", re.IGNORECASE)
# A quantity the evidence names: "GC次数: 128", "current=91%", "healthy=false".
PAIR = re.compile(r"(?P<key>[^\s:=：,;，；\[\]()<>]{1,24})\s*[:=：]\s*(?P<value>[^\s,;，；]+)")
BOOLEAN = {"true": True, "false": False}


def fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).replace("\u2019", "'")


def negated(text: str) -> bool:
    return NEGATION.search(fold(text)) is not None


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: str | None
    written: str
    start: int
    end: int


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


def _zh_value(text: str) -> float | None:
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


def quantities(text: str) -> list[Quantity]:
    """Every number the text states, in digits or in words, with its unit where it has one. A
    number word counts from ten up, or with a percent or a decimal point: "one of the pods" or
    "一个告警" is a count in passing, "十分" an adverb."""
    text = fold(text)
    found = []
    for m in DIGITS.finditer(text):
        digits = m.group("number").replace(",", "")
        value = float(digits) * (-1 if (m.group("sign") or "+") in "-\u2212" else 1)
        unit = (m.group("unit") or "").strip() or None
        found.append(Quantity(value, unit, m.group(0), m.start(), m.end()))
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
        if value is not None and (value >= 10 or m.group("percent") or "点" in number):
            found.append(Quantity(value, "%" if m.group("percent") else None, m.group(0), m.start(), m.end()))
    return sorted(found, key=lambda q: q.start)


def _grounded(q: Quantity, evidence: list[Quantity]) -> bool:
    return any(e.value == q.value and (q.unit is None or e.unit == q.unit) for e in evidence)


def ungrounded_numbers(text: str, evidence: list[str]) -> list[str]:
    """Numbers the statement gives that its evidence does not: by value, sign and, where the
    statement writes one, unit (`128%` is not the `128` of `GC次数: 128`, `15M` is not `15m`)."""
    grounding = [q for e in evidence for q in quantities(e)]
    return list(dict.fromkeys(q.written for q in quantities(text) if not _grounded(q, grounding)))


def _name_parts(text: str) -> set[str]:
    """What a quantity's name is made of: its Latin words, and each pair of adjacent CJK characters."""
    text = fold(text).casefold()
    parts = set(re.findall(r"[^\W\d_\u2e80-\u9fff]{2,}", text))
    for run in re.findall(r"[\u4e00-\u9fff]+", text):
        parts.update(run[i:i + 2] for i in range(max(1, len(run) - 1)))
    return parts


def _pairs(evidence: list[str]) -> list[tuple[str, str]]:
    return [(m.group("key"), m.group("value")) for text in evidence for m in PAIR.finditer(fold(text))
            if re.search(r"[^\W\d_]", m.group("key"))]


def misbound_numbers(text: str, evidence: list[str]) -> list[str]:
    """Numbers the statement gives for a quantity that its evidence names with another value:
    "GC次数为 91" against "GC次数: 128", "current 85%" against "current=91%; threshold=85%". A
    number is said of the words before it in its clause; the quantity it names is an evidence key
    that shares at least half its parts with those words."""
    named = []
    for key, value in _pairs(evidence):
        parts = _name_parts(key)
        values = {q.value for q in quantities(value)}
        if parts and values:
            named.append((key, value, parts, values))
    text = fold(text)
    found, previous = [], 0
    for q in quantities(text):
        before = text[previous:q.start]
        clause_start = max((m.end() for m in CLAUSE_END.finditer(before)), default=0)
        words = _name_parts(before[clause_start:])
        previous = q.end
        keys = [(key, value, values) for key, value, parts, values in named if len(parts & words) * 2 >= len(parts)]
        if keys and not any(q.value in values for _, _, values in keys):
            found.append(f"{q.written} (the evidence gives {keys[0][0]} as {keys[0][1]})")
    return found


def _asserted(pattern: re.Pattern, text: str) -> tuple[bool, bool]:
    """Whether the text uses a word of `pattern` plainly, and whether it uses one negated (a negation
    earlier in the word's clause)."""
    plain = denied = False
    for m in pattern.finditer(text):
        before = text[:m.start()]
        clause = before[max((c.end() for c in CLAUSE_END.finditer(before)), default=0):]
        if NEGATION.search(clause):
            denied = True
        else:
            plain = True
    return plain, denied


def only_denied(state: str, text: str) -> bool:
    """True when `state` is an alert state and the text names it only under a negation ("未 firing",
    "not pending"): a denial, not a statement that the state holds."""
    if state.casefold() not in (*RAISED_STATES, *CLEARED_STATES):
        return False
    plain, denied = _asserted(re.compile(rf"\b{re.escape(state)}\b", re.IGNORECASE), fold(text))
    return denied and not plain


def state_conflicts(text: str, states: set[str], evidence: list[str]) -> list[str]:
    """States the statement asserts against what its evidence reports: `states`, the states of the
    alerts it cites, and the `key=true|false` values of its evidence texts."""
    text = fold(text)
    conflicts = []
    reported = {"raised" for s in states if s in RAISED_STATES} | {"cleared" for s in states if s in CLEARED_STATES}
    raised, raised_denied = _asserted(RAISED_WORDS, text)
    cleared, cleared_denied = _asserted(CLEARED_WORDS, text)
    said = ({"raised"} if raised or cleared_denied else set()) | ({"cleared"} if cleared or raised_denied else set())
    if reported and said and not said & reported:
        conflicts.append(f"the statement says the alert is {'not firing' if 'cleared' in said else 'firing'}, but "
                         f"the alert it cites is {' and '.join(sorted(states))}")
    for key, value in _pairs(evidence):
        truth = BOOLEAN.get(value.casefold())
        if truth is None:
            continue
        for m in re.finditer(rf"(?<![\w-]){re.escape(key)}(?![\w-])", text, re.IGNORECASE):
            before = text[:m.start()]
            clause = before[max((c.end() for c in CLAUSE_END.finditer(before)), default=0):]
            written = re.match(r"\s*[:=：]?\s*(true|false)\b", text[m.end():], re.IGNORECASE)
            says = BOOLEAN[written.group(1).casefold()] if written else not NEGATION.search(clause)
            if says != truth:
                conflicts.append(f"the statement says {key} is {str(says).lower()}, but its evidence says {key}={value}")
                break
    return conflicts

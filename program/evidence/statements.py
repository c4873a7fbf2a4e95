"""What code can read of a statement (a claim, an answer sentence) against the evidence it rests on.

Code cannot judge meaning in general. It can see two things here (and the topics a statement names,
`relevance.unnamed_topics`); a statement that breaks one is blocked in code whatever a verifier says:
- its numbers, in digits or in words (``百分之九十九``, ``ninety nine percent``), each with its sign,
  its unit, a comparison written before it, and the quantity it is said of: a number must occur in
  the evidence with the same value and, where the statement writes them, the same measure (2.3 秒
  is 2300ms, 15 hours is not 15m) and comparison; where the evidence binds a quantity of the same
  name to a value (``GC次数: 128``), the statement must give that value;
- the state it asserts: an alert's state (firing or pending against resolved or inactive, the
  states Prometheus and Alertmanager report) and a ``key=true|false`` value in the evidence.
What is left to the verifier (which sees the whole clauses the quotes sit in): a cause or a
consequence the evidence does not state, a verb that reverses a quoted one, and any other
paraphrase.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator
from dataclasses import dataclass

from program.evidence.characters import DASHES, NEGATION_CHARS, NEGATION_WORDS, compatible_form
from program.evidence.units import UNIT, UNITS

NEGATION = re.compile(r"[" + "".join(sorted(NEGATION_CHARS)) + r"]|\b(?:" + "|".join(
    re.escape(w) for w in sorted(NEGATION_WORDS, key=len, reverse=True)) + r")\b", re.IGNORECASE)
# Where a clause of a statement ends: what a negation or a quantity's name does not reach across.
CLAUSE_END = re.compile(r"[,;，；。！？!?\n]|\.(?:\s|$)|\s[-–—]\s|\bbut\b|但|而")
# Where a sentence ends: what the subject of a state word ("告警曾触发，现已恢复") reaches across.
SENTENCE_END = re.compile(r"[;；。！？!?\n]|\.(?:\s|$)")

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

# Alert states as Prometheus and Alertmanager report them, and the words a statement asserts them with.
RAISED_STATES = ("firing", "pending")
CLEARED_STATES = ("resolved", "inactive")
RAISED_WORDS = re.compile(r"\b(?:firing|fired|fires|triggered|pending|ongoing|unresolved|alerting|still active|"
                          r"going off)\b|触发|告警中|正在告警|报警中|正在报警|仍在告警|持续告警|告警状态|未恢复|未解决|発火",
                          re.IGNORECASE)
# "Normal" says a state is over only as a predicate ("内存正常", "is back to normal"), not as an
# adjective ("above the normal level", "高于正常水平").
CLEARED_WORDS = re.compile(r"\b(?:resolved|recovered|cleared|inactive|mitigated|subsided|over now|ok now|healthy again|"
                           r"(?:is|was|been|got) fixed|(?:went|is) silent|(?:back|returned) to (?:normal|baseline)|"
                           r"(?:is|are|was|were|looks|now) normal)\b|\bnormal(?=\s*(?:[,.;!?]|$))|"
                           r"正常(?=\s*(?:了|[，。；！？,.;!?]|$))|恢复|恢復|解除|消除|已结束|已解决|已消失|已关闭|已停止|"
                           r"好了|已修复|复原|平息|解消|復旧", re.IGNORECASE)
# What a clause speaks of the alert with, when it does not name it.
ALERT_WORDS = re.compile(r"\b(?:alerts?|alerting|alarms?)\b|告警|报警|警报|アラート", re.IGNORECASE)
# The alert itself denied: "没有告警", "no alerts", "告警已经没了". The negation stands right next to
# it, so that "未解决告警" (an unresolved alert) is no denial.
ALERT_DENIED = re.compile(r"(?:没有|无|不再|没|\bno longer\b|\bno\b|\bnot\b)\s*(?:任何|any\s+)?(?:告警|报警|alerts?\b|alerting\b|"
                          r"alarms?\b)|(?:告警|报警|\balert\b)\s*(?:已经|已)?\s*(?:没了|消失|\bis gone\b)", re.IGNORECASE)
# Words that deny a state the way a negation does: "no longer firing", "stopped firing", 不再告警.
STATE_DENIAL = re.compile(r"\bno longer\b|\bnot\b.*\banymore\b|\bstopped\b|\bceased\b|\bfailed\b|不再|没了|失败|"
                          r"\b(?:isnt|arent|wasnt|werent|dont|doesnt|didnt|cant|couldnt|wont|aint)\b", re.IGNORECASE)
# A quantity the evidence names: "GC次数: 128", "current=91%", "healthy=false", "healthy != true",
# '"healthy": false'. The key is the run before the operator, the value the run after it.
OPERATOR = re.compile(r"\s*(==|!=|≠|[:=：])\s*")
KEY = re.compile(r"([^\s:=：,;，；\[\](){}<>\"'!≠]{1,24})[\"']?$")
# A value runs through the comparisons inside it: threshold=P99>2s is "P99>2s", current=P99=4.2s "P99=4.2s".
VALUE = re.compile(r"[^\s,;，；:：\[\](){}\"'][^\s,;，；:：\[\](){}\"']*")
BOOLEAN = {"true": True, "false": False, "yes": True, "no": False}
# The names code gives an alert's fields (tools.functions.alert_text), as a claim may write them.
FIELD_NAMES = {"current": ("当前", "目前", "当前值", "现在"), "threshold": ("阈值", "门限", "阀值"),
               "duration": ("持续", "持续时间", "时长")}


def fold(text: str) -> str:
    """NFKC except for marks and superscripts (`12⁸` stays unreadable, not 128), one hyphen-minus
    for every dash, one apostrophe."""
    return "".join("-" if ch in DASHES else ch for ch in compatible_form(text)).replace("\u2019", "'")


def negated(text: str) -> bool:
    return NEGATION.search(fold(text)) is not None


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
    text = fold(text)
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
    text = fold(text).casefold()
    parts = set(re.findall(r"[^\W\d_\u2e80-\u9fff]{2,}", text))
    for run in re.findall(r"[\u4e00-\u9fff]+", text):
        parts.update(run[i:i + 2] for i in range(max(1, len(run) - 1)))
    return parts


def _pairs(evidence: list[str]) -> list[tuple[str, str, str]]:
    """(key, operator, value) for every `key op value` in the evidence texts."""
    found = []
    for text in evidence:
        text = fold(text)
        for op in OPERATOR.finditer(text):
            key = KEY.search(text, 0, op.start())
            quoted = text[op.end():op.end() + 1] in ("\"", "'")
            value = VALUE.match(text, op.end() + quoted)
            if key and value and re.search(r"[^\W\d_]", key.group(1)):
                found.append((key.group(1), op.group(1), value.group()))
    return found


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
    for key, _, value in _pairs(evidence):
        values = quantities(value)
        if values and (names := _names(key)):
            named.append((key, value, names, values))
    text = fold(text)
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


def sentences(text: str) -> list[str]:
    """The text's sentences, each without the mark that ends it."""
    return [part.strip() for part in SENTENCE_END.split(text) if part.strip()]


def _clause_before(text: str, start: int) -> str:
    """The part of the clause before `start`."""
    before = text[:start]
    return before[max((c.end() for c in CLAUSE_END.finditer(before)), default=0):]


def _sentence_around(text: str, start: int, end: int) -> str:
    begin = max((c.end() for c in SENTENCE_END.finditer(text, 0, start)), default=0)
    following = SENTENCE_END.search(text, end)
    return text[begin:following.start() if following else len(text)]


def _state_words(text: str, about: re.Pattern | None = None) -> Iterator[tuple[re.Match, bool, list[tuple[int, int]]]]:
    """Each state word in the text, raised (True: firing, 触发) or cleared (False: resolved, 恢复), with
    the spans of what denies it: a negation, or "no longer", "stopped", 不再, in its clause before it
    and after the state word before it ("has not recovered and is still firing": the "not" is
    recovered's), or right after it (恢复失败); no span when it is used plainly. With `about`, only
    words in a sentence that `about` finds count: a state word is read of the alert only where the
    sentence speaks of it."""
    found = sorted([(m, True) for m in RAISED_WORDS.finditer(text)] + [(m, False) for m in CLEARED_WORDS.finditer(text)],
                   key=lambda pair: pair[0].start())
    previous = 0
    for m, raised in found:
        if m.start() < previous:
            continue  # inside a longer state word already read (恢复 of 未恢复)
        start = max(m.start() - len(_clause_before(text, m.start())), previous)
        previous = m.end()
        if about is not None and not about.search(_sentence_around(text, m.start(), m.end())):
            continue
        denials = [d.span() for denial in (NEGATION, STATE_DENIAL) for d in denial.finditer(text, start, m.start())]
        gap = len(text[m.end():m.end() + 6]) - len(text[m.end():m.end() + 6].lstrip("已经 "))
        if after := STATE_DENIAL.match(text, m.end() + gap):
            denials.append(after.span())
        yield m, raised, denials


def _asserted(raised: bool, text: str, about: re.Pattern | None = None) -> tuple[bool, bool]:
    """Whether the text uses a raised (or cleared) state word plainly, and whether it uses one denied (`_state_words`)."""
    plain = denied = False
    for _, kind, denials in _state_words(text, about):
        if kind == raised:
            denied, plain = denied or bool(denials), plain or not denials
    return plain, denied


def _about(names: tuple[str, ...]) -> re.Pattern:
    """What a sentence speaks of an alert with: the word alert (告警), or a service's or alert's name."""
    return re.compile("|".join([ALERT_WORDS.pattern, *(re.escape(n) for n in names if n)]), re.IGNORECASE)


def said_state(text: str, names: tuple[str, ...] = ()) -> tuple[bool, bool]:
    """What the statement says of an alert's state: that it is raised (firing, pending, or denied
    to be over: 未恢复), and that it is over (resolved, or denied to fire: 没有在触发, 目前没有告警)."""
    text = fold(text)
    about = _about(names)
    raised, raised_denied = _asserted(True, text, about)
    cleared, cleared_denied = _asserted(False, text, about)
    return raised or cleared_denied, cleared or raised_denied or bool(ALERT_DENIED.search(text))


def state_denials(text: str, names: tuple[str, ...] = ()) -> list[tuple[int, int]]:
    """The spans of `fold(text)` that deny a state of an alert ("没有" in 没有告警在触发, "not" in
    "is not firing", "no alerts"): a denied state is an observation of the state the alert is in,
    which `state_conflicts` checks against the alert, not a statement that nothing was found."""
    text = fold(text)
    about = _about(names)
    spans = [span for _, _, denials in _state_words(text, about) for span in denials]
    return spans + [m.span() for m in ALERT_DENIED.finditer(text)]


def outside_state_denials(pattern: re.Pattern, text: str, names: tuple[str, ...] = ()) -> bool:
    """Whether `pattern` (a negation, an absence) occurs in the text other than as the denial of an
    alert's state: "api-gateway 现在没有 HighErrorRate 告警在触发" says what state the alert is in,
    "未找到 HighErrorRate 告警" that none was found."""
    spans = state_denials(text, names)
    return any(not any(start < m.end() and m.start() < end for start, end in spans)
               for m in pattern.finditer(fold(text)))


def only_denied(state: str, text: str) -> bool:
    """True when `state` is an alert state and the text names it only denied ("未 firing", "not
    pending"): a denial, not a statement that the state holds."""
    if state.casefold() not in (*RAISED_STATES, *CLEARED_STATES):
        return False
    words = [denials for m, _, denials in _state_words(fold(text)) if m.group().casefold() == state.casefold()]
    return bool(words) and all(words)


def _mentions(key: str, text: str):
    """Where the text names a boolean key: the key, its words (is_healthy, tls-enabled), or its last
    word after a prefix (healthy of is_healthy); with a negating prefix (unhealthy) if it has one."""
    words = [w for w in re.split(r"[_\-\s.]+", key) if w]
    variants = {key, " ".join(words), *(words[-1:] if len(words) > 1 else [])}
    alternatives = "|".join(re.escape(v) for v in sorted(variants, key=len, reverse=True))
    return re.finditer(rf"(?<![\w-])(?P<prefix>un|non-?|not-)?(?:{alternatives})(?![\w-])", text, re.IGNORECASE)


def state_conflicts(text: str, states: set[str], evidence: list[str], names: tuple[str, ...] = ()) -> list[str]:
    """States the statement asserts against what its evidence reports: `states`, the states of the
    alerts it cites, and the `key=true|false` values of its evidence texts. A state word counts in a
    clause that speaks of the alert: the word alert (告警), or one of `names` (the catalog's services
    and alerts). Against a firing alert, any sentence that it is over is a conflict ("曾触发，现已恢复"
    too); against a resolved one, only a statement that it fires and nothing that it cleared (an
    alert that fired and resolved did fire)."""
    text = fold(text)
    conflicts = []
    says_raised, says_cleared = said_state(text, names)
    if states & set(RAISED_STATES) and says_cleared:
        conflicts.append(f"the statement says the alert is not firing, but the alert it cites is "
                         f"{' and '.join(sorted(states))}")
    elif states and states <= set(CLEARED_STATES) and says_raised and not says_cleared:
        conflicts.append(f"the statement says the alert is firing, but the alert it cites is {' and '.join(sorted(states))}")
    for key, operator, value in _pairs(evidence):
        truth = BOOLEAN.get(value.casefold())
        if truth is None:
            continue
        truth = truth != (operator in ("!=", "≠"))
        # A value the statement writes for the key decides; a bare mention says it holds, unless negated.
        written, implied = [], []
        for m in _mentions(key, text):
            clause = _clause_before(text, m.start())
            value_written = re.match(r"(?:\s+[^\W\d_]+){0,3}?\s*(?:[:=：]|为|是|is|was)?\s*(true|false|yes|no)\b",
                                     text[m.end():], re.IGNORECASE)
            if value_written:
                written.append(BOOLEAN[value_written.group(1).casefold()])
            else:
                implied.append(not (m.group("prefix") or NEGATION.search(clause)))
        says = written or implied
        if says and truth not in says:
            conflicts.append(f"the statement says {key} is {str(says[0]).lower()}, but its evidence says "
                             f"{key}{operator}{value}")
    return conflicts

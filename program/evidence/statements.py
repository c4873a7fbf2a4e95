"""What code can read of a statement (a claim, an answer sentence) against the evidence it rests on.

Code cannot judge meaning in general. It can see two things here (and the topics a statement names,
`relevance.unnamed_topics`); a statement that breaks one is blocked in code whatever a verifier says:
- its numbers (numbers.py), in digits or in words (``百分之九十九``, ``ninety nine percent``), each with its sign,
  its unit, a comparison written before it, and the quantity it is said of: a number must occur in
  the evidence with the same value and, where the statement writes them, the same measure (2.3 秒
  is 2300ms, 15 hours is not 15m) and comparison; where the evidence binds a quantity of the same
  name to a value (``GC次数: 128``), the statement must give that value;
- the state it asserts (read here): an alert's state (firing or pending against resolved or inactive, the
  states Prometheus and Alertmanager report) and a ``key=true|false`` value in the evidence.
What is left to the verifier (which sees the whole clauses the quotes sit in): a cause or a
consequence the evidence does not state, a verb that reverses a quoted one, and any other
paraphrase.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from program.evidence.characters import DASHES, NEGATION_CHARS, NEGATION_WORDS, compatible_form

NEGATION = re.compile(r"[" + "".join(sorted(NEGATION_CHARS)) + r"]|\b(?:" + "|".join(
    re.escape(w) for w in sorted(NEGATION_WORDS, key=len, reverse=True)) + r")\b", re.IGNORECASE)
# Where a clause of a statement ends: what a negation or a quantity's name does not reach across.
CLAUSE_END = re.compile(r"[,;，；。！？!?\n]|\.(?:\s|$)|\s[-–—]\s|\bbut\b|但|而")
# Where a sentence ends: what the subject of a state word ("告警曾触发，现已恢复") reaches across.
SENTENCE_END = re.compile(r"[;；。！？!?\n]|\.(?:\s|$)")


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


def statement_form(text: str) -> str:
    """NFKC except for marks and superscripts (`12⁸` stays unreadable, not 128), one hyphen-minus
    for every dash, one apostrophe."""
    return "".join("-" if ch in DASHES else ch for ch in compatible_form(text)).replace("\u2019", "'")


def negated(text: str) -> bool:
    return NEGATION.search(statement_form(text)) is not None


def pairs(evidence: list[str]) -> list[tuple[str, str, str]]:
    """(key, operator, value) for every `key op value` in the evidence texts."""
    found = []
    for text in evidence:
        text = statement_form(text)
        for op in OPERATOR.finditer(text):
            key = KEY.search(text, 0, op.start())
            quoted = text[op.end():op.end() + 1] in ("\"", "'")
            value = VALUE.match(text, op.end() + quoted)
            if key and value and re.search(r"[^\W\d_]", key.group(1)):
                found.append((key.group(1), op.group(1), value.group()))
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
    text = statement_form(text)
    about = _about(names)
    raised, raised_denied = _asserted(True, text, about)
    cleared, cleared_denied = _asserted(False, text, about)
    return raised or cleared_denied, cleared or raised_denied or bool(ALERT_DENIED.search(text))


def state_denials(text: str, names: tuple[str, ...] = ()) -> list[tuple[int, int]]:
    """The spans of `statement_form(text)` that deny a state of an alert ("没有" in 没有告警在触发, "not" in
    "is not firing", "no alerts"): a denied state is an observation of the state the alert is in,
    which `state_conflicts` checks against the alert, not a statement that nothing was found."""
    text = statement_form(text)
    about = _about(names)
    spans = [span for _, _, denials in _state_words(text, about) for span in denials]
    return spans + [m.span() for m in ALERT_DENIED.finditer(text)]


def outside_state_denials(pattern: re.Pattern, text: str, names: tuple[str, ...] = (),
                          quoted: tuple[str, ...] = ()) -> bool:
    """Whether `pattern` (a negation, an absence) occurs in the text other than as the denial of an
    alert's state: "api-gateway 现在没有 HighErrorRate 告警在触发" says what state the alert is in,
    "未找到 HighErrorRate 告警" that none was found. A match that one of the `quoted` texts (the
    lines a claim cites) holds too, with the word on each side of it in its clause, is the text
    quoting that line ("returned 404 Not Found" of "GET /api/cart 404 Not Found"), not its own: a
    line that merely holds the words elsewhere ("404 Not Found" beside a claim that pool exhaustion
    "was not found in" the logs) quotes nothing."""
    spans = state_denials(text, names)
    text = statement_form(text)
    lines = [statement_form(line).casefold() for line in quoted]
    return any(not any(start < m.end() and m.start() < end for start, end in spans)
               and not any(_with_neighbours(text, m).casefold() in line for line in lines)
               for m in pattern.finditer(text))


# A word, for the neighbours of a match: a run of letters, digits and the marks inside identifiers,
# or one Chinese character.
WORD = re.compile(r"[A-Za-z0-9_.\-/]+|[\u4e00-\u9fff]")


def _with_neighbours(text: str, m: re.Match) -> str:
    """The match with the word before it and the word after it, where its clause has them."""
    clause_start = max((c.end() for c in CLAUSE_END.finditer(text, 0, m.start())), default=0)
    following = CLAUSE_END.search(text, m.end())
    clause_end = following.start() if following else len(text)
    before = [w for w in WORD.finditer(text, clause_start, m.start()) if w.end() <= m.start()]
    after = WORD.search(text, m.end(), clause_end)
    return text[before[-1].start() if before else m.start():after.end() if after else m.end()]


def only_denied(state: str, text: str) -> bool:
    """True when `state` is an alert state and the text names it only denied ("未 firing", "not
    pending"): a denial, not a statement that the state holds."""
    if state.casefold() not in (*RAISED_STATES, *CLEARED_STATES):
        return False
    words = [denials for m, _, denials in _state_words(statement_form(text)) if m.group().casefold() == state.casefold()]
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
    text = statement_form(text)
    conflicts = []
    says_raised, says_cleared = said_state(text, names)
    if states & set(RAISED_STATES) and says_cleared:
        conflicts.append(f"the statement says the alert is not firing, but the alert it cites is "
                         f"{' and '.join(sorted(states))}")
    elif states and states <= set(CLEARED_STATES) and says_raised and not says_cleared:
        conflicts.append(f"the statement says the alert is firing, but the alert it cites is {' and '.join(sorted(states))}")
    for key, operator, value in pairs(evidence):
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

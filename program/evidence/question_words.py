"""How a question's own words are read: the names it spells (services, alerts, the catalog's terms),
the values it quotes, and the clauses in which it excludes something ("不要分析数据库", "skip the
Full GC"). program/evidence/scope.py builds a question's scope from this reading.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tools.catalog import Catalog
from tools.text.folding import fold, fold_label, nfkc

# An exclusion marker: a negation of attending to something ("不要看", "暂不考虑", "don't bother with"),
# built from its parts, or a verb that excludes ("跳过", "skip").
_NOT_ZH = r"(?:不要|不用|不必|无需|不需要|别|先不|暂不|暂时不)"
_ATTEND_ZH = r"(?:扩展到|扩展|分析|排查|查看|考虑|关注|看|管|查)"
_NOT_EN = r"(?:do\s+not|don't|no\s+need\s+to|needn't)"
_ATTEND_EN = r"(?:look\s+at|check|analy[sz]e|include|bother\s+with|worry\s+about|consider)"
EXCLUSION = re.compile(
    rf"(?:{_NOT_ZH}{_ATTEND_ZH}|不(?:分析|考虑|看)|排除|跳过|忽略|{_NOT_EN}\s+{_ATTEND_EN}\b|without\s+looking\s+at|"
    r"leave\s+out|never\s+mind|\bskip\b|\bexclude\b|\bexcluding\b|\bignore\b)\s*[:：]?\s*",
    re.IGNORECASE,
)
# An item that names what is left ("everything but HikariCP", "内存溢出以外的"): it excludes the rest,
# which code cannot spell, so it excludes nothing here.
COMPLEMENT = re.compile(r"\b(?:but|except|other\s+than|apart\s+from|besides|not)\b|以外|之外|除了|其他|其它|非", re.IGNORECASE)
# A marker told as what happened ("为什么跳过了连接池预热", "排除了哪些事件"): no order.
TOLD = re.compile(r"^\s*[了过]")
# A marker that ends its clause ("Full GC 日志就别管了") excludes what stands before it in the clause:
# after it, up to the clause's end, come only sentence-final particles, and before it the clause's
# adverbs (就, 也, 先).
PARTICLES = "了吧啊呢哦嘛呀啦罢哈呗嘞喔~～ \t"
# An object that points back ("payment-service, skip it", "连接池别管它") is read like an empty one.
POINTING = re.compile(r"^\s*(?:it|them|this|that|these|those|它们|它|这些|那些|这个|那个)?[" + PARTICLES + r"]*$",
                      re.IGNORECASE)
ADVERBS = re.compile(r"(?:就|也|都|先|暂时|暂且|暂|\s)+$")
# Where a clause begins and ends, and where a sentence does; a full stop or a colon inside a token
# (gc.log, 10:00) is neither.
CLAUSE_MARK = re.compile(r"[，,；;。!?！？\n]|\.(?=\s|$)|[:：](?!\d)")
SENTENCE_END = re.compile(r"[。;；!?！？\n]|\.(?=\s|$)")
# A clause that asks: it ends in a question mark, or in 吗.
ASKING = re.compile(r"(?:[?？]|吗\s*[?？]?)\s*$")
# Words that ask, which no exclusion's clause holds before its marker ("why does order-service ignore …").
QUESTION_WORDS = re.compile(r"\b(?:whether|why|how|what|which|when|where|does|did)\b|是否|为什么|怎么|如何|哪|什么", re.IGNORECASE)
# A double-quoted span (JSON's quoting) is text the question quotes, such as an alert's label values:
# data, not the asker's words. Words in it that read like an exclusion ("skip order-service") exclude
# nothing, and it names a service, an alert or a topic only when its whole value is that name.
QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
# A slash separates items only with space around it or beside Chinese: /api/health is one path.
CONJUNCTION = re.compile(r"以及|或者|或|和|及|\band\b|\bor\b", re.IGNORECASE)
SPLIT = re.compile(r"\s*(?:、|,|，|\s/\s|(?<=[\u4e00-\u9fff])/|/(?=[\u4e00-\u9fff])|以及|或者|或|和|及|\band\b|\bor\b)\s*",
                   re.IGNORECASE)
ALIASES = {
    "数据库": ("database", "db", "数据库"),
    "慢查询": ("slow query", "慢查询"),
    "oom": ("oom", "outofmemory", "out of memory", "内存溢出", "oomkilled"),
}
ORDER = re.compile(r"(?:订单|order)[\s#-]*(\d+)", re.IGNORECASE)


def quoted_value(span: str) -> str:
    """The value a quoted span holds: the JSON string it is, or its text between the quotes."""
    try:
        value = json.loads(span)
    except ValueError:
        return span[1:-1]
    return value if isinstance(value, str) else span[1:-1]


def own_words(text: str) -> str:
    """`text` with every quoted span blanked out, character for character: what the asker wrote."""
    return QUOTED.sub(lambda m: " " * len(m.group()), text)


def quoted_values(text: str) -> list[str]:
    return [quoted_value(m.group()) for m in QUOTED.finditer(text)]


def _unquoted(topic: str) -> str:
    """An excluded topic the asker quoted whole is its value."""
    return quoted_value(topic) if QUOTED.fullmatch(topic) else topic


@dataclass(frozen=True)
class Named:
    """What a question names, by the catalog: the asker's own words are read for names, and each
    quoted value is one name, matched whole, or it names nothing the sources know (`unknown`)."""

    services: tuple[str, ...]
    alerts: tuple[str, ...]
    own: str  # the asked part of the question in the asker's words, quoted values blanked
    quoted_terms: tuple[str, ...]  # quoted values that are whole terms of the catalog, folded
    unknown: tuple[str, ...]  # quoted values that are no name, alert or term of the catalog


def question_names(question: str, catalog: Catalog) -> Named:
    """The services, alerts and terms the question asks about (outside its exclusion clauses)."""
    return _named(without_exclusions(nfkc(question), catalog), catalog)


def _named(text: str, catalog: Catalog) -> Named:
    own = own_words(text)
    values = [v for v in quoted_values(text) if v.strip()]
    terms = {t for group in catalog.topic_groups() for t in group if t}
    whole = {fold_label(v) for v in values}
    services = tuple(s for s in catalog.services if mentions(own, [s.casefold()]) or s.casefold() in whole)
    alerts = tuple(a for a in catalog.alert_names if mentions(own, [a.casefold()]) or a.casefold() in whole)
    known = {n.casefold() for n in (*catalog.services, *catalog.alert_names)} | terms
    return Named(services=services, alerts=alerts, own=own, quoted_terms=tuple(sorted(whole & terms)),
                 unknown=tuple(dict.fromkeys(v for v in values if fold_label(v) not in known)))


@dataclass(frozen=True)
class Excluded:
    """A topic an exclusion clause names, and the span of the question it takes up (with the
    marker, for the first topic after it or the last before it): what is left asks the question.
    `name`: the topic is a whole name of the catalog (a service, an alert, a term, an order id) or a
    quoted value, which no clause that asks can be."""

    topic: str
    start: int
    end: int
    name: bool = False


def _pieces(text: str, offset: int) -> list[tuple[str, int, int]]:
    """The items of a list ("GC 和 HikariCP", "订单123、OOM 或数据库"), each with its span, shifted by `offset`."""
    bounds = [0, *(i for m in SPLIT.finditer(text) for i in m.span()), len(text)]
    return [(text[a:b].strip(), offset + a, offset + b) for a, b in zip(bounds[::2], bounds[1::2]) if text[a:b].strip()]


def _names(catalog: Catalog) -> set[str]:
    """Every whole name an exclusion may hold: services, alerts, catalog terms and their aliases."""
    return ({fold(n) for n in (*catalog.services, *catalog.alert_names)} | {a for k, v in ALIASES.items() for a in (k, *v)}
            | {t for group in catalog.topic_groups() for t in group if t})


def _is_name(item: str, names: set[str]) -> bool:
    """`item` is one of `names` (`_names`), an order id or a quoted value."""
    folded = re.sub(r"^(?:the|a|an)\s+", "", fold(item).strip())
    return bool(QUOTED.fullmatch(item)) or folded in names or bool(ORDER.fullmatch(folded))


def _is_item(item: str, names: set[str]) -> bool:
    """An item of a list of names: a whole name, in the singular or the plural ("slow queries")."""
    return _is_name(item, names) or _is_name(singular(item), names)


def singular(text: str) -> str:
    return re.sub(r"(?<=[a-z])(?:ies|es|s)\b", lambda m: "y" if m.group() == "ies" else "", fold(text))


def _list_clauses(text: str, clauses: list[tuple[int, int]], names: set[str]) -> int:
    """How many of the clauses after an exclusion's own go on with its list. A list goes on through
    clauses of names ("不要看 GC 日志，HikariCP，数据库"), or up to the clause that ends it with a
    conjunction, when every item up to there names something of the catalog ("do not analyse order
    123, OOM, slow database queries, the connection pool or user-service"). A clause that says
    anything else ("，关注连接池耗尽", ", focus on p99", ", memory is fine") ends it."""
    words = [n for n in names if len(n) >= 3]
    taken = 0
    for n, (start, end) in enumerate(clauses):
        items = _pieces(text[start:end], start)
        if not items or QUESTION_WORDS.search(text[start:end]):
            break
        if all(_is_item(item, names) for item, _, _ in items):
            taken = n + 1
            continue
        if not all(mentions(item, words) for item, _, _ in items):
            break
        if CONJUNCTION.search(text[start:end]):
            return n + 1
    return taken


def _candidates(text: str, catalog: Catalog) -> list[Excluded]:
    """What the exclusion markers of `text` name, each begun outside quoted text, and each list
    ending where the next marker begins. After a marker: the items of its clause, and of the clauses
    after it in its sentence while they go on with the list (`_list_clauses`: "不要看 GC 日志，HikariCP，
    数据库"). When nothing but particles, or a word that points back, follows a marker in its clause:
    the items before it in its clause, or in the clause before ("payment-service, skip it"). A
    marker whose clause asks ("OOM 是否可以排除？", "can we skip it?", "就别管了吗") excludes nothing."""
    quoted = [m.span() for m in QUOTED.finditer(text)]
    markers = [m for m in EXCLUSION.finditer(text) if not any(start < m.start() < end for start, end in quoted)]
    names = _names(catalog)
    found = []
    for n, m in enumerate(markers):
        stop = SENTENCE_END.search(text, m.end())
        stop = min(stop.end() if stop else len(text), markers[n + 1].start() if n + 1 < len(markers) else len(text))
        clauses = _clauses(text, m.end(), stop)
        own_start, own_end = clauses[0]
        if ASKING.search(text[own_start:stop if len(clauses) == 1 else clauses[1][0]]) or \
                QUESTION_WORDS.search(text[_clause_start(text, m.start()):m.start()]):
            continue
        if not POINTING.match(text[own_start:own_end]):
            if TOLD.match(text[own_start:own_end]):
                continue
            items = [i for start, end in clauses[:1 + _list_clauses(text, clauses[1:], names)]
                     for i in _pieces(text[start:end], start)]
            found += [Excluded(_unquoted(item.rstrip(PARTICLES)), m.start() if i == 0 else a, b,
                               _is_name(item.rstrip(PARTICLES), names))
                      for i, (item, a, b) in enumerate(items) if item.rstrip(PARTICLES) and not COMPLEMENT.search(item)]
            continue
        marks = list(CLAUSE_MARK.finditer(text, 0, m.start()))
        begin, end = (marks[-1].end() if marks else 0), m.start()
        if not text[begin:end].strip() and marks and not SENTENCE_END.fullmatch(marks[-1].group()):
            # Nothing before it in its clause ("payment-service, skip it"): it points back to the clause before.
            begin, end = (marks[-2].end() if len(marks) > 1 else 0), marks[-1].start()
        items = _pieces(ADVERBS.sub("", text[begin:end]), begin)
        found += [Excluded(_unquoted(item), a, own_end if i == len(items) - 1 else b, _is_name(item, names))
                  for i, (item, a, b) in enumerate(items) if not COMPLEMENT.search(item)]
    return found


def _clause_start(text: str, at: int) -> int:
    return max((c.end() for c in CLAUSE_MARK.finditer(text, 0, at)), default=0)


def _clauses(text: str, start: int, stop: int) -> list[tuple[int, int]]:
    """The clauses of text[start:stop], as spans without the marks between them; at least one."""
    spans, begin = [], start
    for mark in CLAUSE_MARK.finditer(text, start, stop):
        spans.append((begin, mark.start()))
        begin = mark.end()
    return spans + [(begin, stop)] if begin < stop or not spans else spans


def blanked(text: str, spans: list[Excluded]) -> str:
    for span in sorted(spans, key=lambda e: e.start, reverse=True):
        text = text[:span.start] + " " * (span.end - span.start) + text[span.end:]
    return text


def exclusions(text: str, catalog: Catalog) -> list[Excluded]:
    """The topics `text` excludes in its own words. A whole name is excluded as written. Any other
    item must leave the question a target, as a planner's proposal must (`with_proposed_exclusions`):
    one that would take away every service or every alert the question names outside its exclusions
    of names is no exclusion but the asked clause, misread ("Full GC 日志就别管了，只确认 order-service …",
    "只确认 order-service 的健康检查是否被跳过了", where the marker is the asked verb)."""
    candidates = _candidates(text, catalog)
    kept = [c for c in candidates if c.name]
    asked = _named(blanked(text, kept), catalog)
    for candidate in (c for c in candidates if not c.name):
        rest = _named(blanked(text, [*kept, candidate]), catalog)
        if not (asked.services and not rest.services or asked.alerts and not rest.alerts):
            kept.append(candidate)
    return sorted(kept, key=lambda e: e.start)


def without_exclusions(text: str, catalog: Catalog) -> str:
    """`text` with what its exclusions take up blanked out: what it asks about."""
    return blanked(text, exclusions(text, catalog))

def mentions(text: str, terms: tuple[str, ...] | list[str]) -> list[str]:
    """Which terms occur in text; short ASCII terms must stand as whole words (db, oom)."""
    folded = fold(text)
    return [term for term in terms if occurrences(folded, term)]


def occurrences(folded: str, term: str) -> list[tuple[int, int]]:
    """Where a (folded) term stands in folded text, as `mentions` reads it: a short ASCII term only as
    a whole word."""
    whole = r"(?<![a-z0-9])" if term.isascii() and len(term) <= 4 else ""
    return [m.span() for m in re.finditer(f"{whole}{re.escape(term)}{'(?![a-z0-9])' if whole else ''}", folded)]

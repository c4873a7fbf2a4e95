"""Deterministic reading of a question's scope: is it narrow, and which topics did it exclude?

This is the one owner of a question's scope. The pipeline reads it once per run and gives it to
every stage (the plan the executor sees carries it), and the devset's metric reads it too. The
executor's prompt carries the narrow-scope rules (prompt-first, as the design decided); code checks
the result against this reading. How the question's words exclude something is read in
program/evidence/question_words.py; here the excluded topics are spelled, and what is asked shields
the names that hold them (`Exclusion`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from program.evidence.question_words import (
    ALIASES,
    ORDER,
    QUOTED,
    blanked,
    exclusions,
    mentions,
    occurrences,
    own_words,
    question_names,
    quoted_value,
    quoted_values,
    singular,
)
from tools.catalog import Catalog
from tools.text.folding import fold, nfkc

NARROW_MARKERS = (
    "只确认", "只排查", "只看", "不要分析", "不要扩展", "只回答", "是否真实存在", "是否存在",
    "only confirm", "only check", "only look", "do not analyse", "do not analyze", "don't analyse",
    "don't analyze", "do not expand", "whether there is",
)


@dataclass(frozen=True)
class Exclusion:
    """What the user excluded, as a text is read for it. `terms` spell the excluded topics; `shields`
    name what the question asks about and hold an excluded term ("数据库连接池" of a question about
    the 连接池 that excludes the 数据库): the term wholly inside one of them speaks of the asked thing."""

    terms: tuple[str, ...] = ()
    shields: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.terms)

    def hits(self, text: str) -> list[str]:
        """The excluded terms `text` speaks of somewhere outside the names of what was asked. A term
        that runs past a name is no part of it ("连接池耗尽" in "数据库连接池耗尽")."""
        folded = fold(text)
        named = [span for shield in self.shields for span in occurrences(folded, shield)]
        return [term for term in self.terms
                if any(not any(a <= start and end <= b for a, b in named) for start, end in occurrences(folded, term))]


@dataclass(frozen=True)
class Scope:
    narrow: bool
    excluded_topics: tuple[str, ...] = ()
    # Every spelling under which an excluded topic may show up in text.
    excluded_terms: tuple[str, ...] = field(default=())
    # The question in its own words (NFKC), what its exclusion clauses take up blanked out.
    asked: str = ""
    # Names of what is asked that hold an excluded term (Exclusion.shields).
    shields: tuple[str, ...] = ()

    @property
    def exclusion(self) -> Exclusion:
        return Exclusion(terms=self.excluded_terms, shields=self.shields)


def _scope(narrow: bool, topics: list[str] | tuple[str, ...], catalog: Catalog, question: str, asked: str) -> Scope:
    terms = expand_terms(topics, catalog, question)
    return Scope(narrow=narrow, excluded_topics=tuple(topics), excluded_terms=terms, asked=asked,
                 shields=shields(asked, topics, terms, catalog))


def shields(asked: str, topics: list[str] | tuple[str, ...], terms: tuple[str, ...], catalog: Catalog
            ) -> tuple[str, ...]:
    """The names of what `asked` (a question's words less its exclusion clauses) asks about that hold
    a word of another excluded concept: the catalog's own terms for the topics it names ("数据库连接池"
    for the 连接池 when the 数据库 is excluded), and its own compounds of an excluded word and such a
    name ("the database connection pool"). A name that holds a word of its own group holds this
    concept excluded, not another ("连接池耗尽" when the 连接池 is), and a name the exclusion itself
    holds is excluded, not asked ("full gc" of a question about memory that skips the Full GC; a
    planner's proposal, which `asked` still holds)."""
    if not terms:
        return ()
    folded = fold(asked)
    spelled = [fold(t).strip() for t in topics]
    left = folded
    for topic in filter(None, spelled):
        left = left.replace(topic, " ")
    groups = {t: group for group in catalog.topic_groups() if mentions(left, list(group)) for t in group
              if _word(t) and not any(t in term for term in terms)}

    def foreign(word: str, name: str) -> bool:
        return word not in groups[name]

    held = [name for name in groups if any(occurrences(name, t) and foreign(t, name) for t in terms)]
    names = "|".join(re.escape(n) for n in sorted(groups, key=len, reverse=True))
    # Each excluded word on its own: "the database connection pool" holds "database connection pool" too.
    held += [m.group() for word in terms if groups
             for m in re.finditer(rf"(?<![a-z0-9]){re.escape(word)}[\s\-_]*(?P<name>{names})", folded)
             if foreign(word, m.group("name"))]
    return tuple(sorted({h for h in held if not any(h in topic for topic in spelled)}, key=len, reverse=True))


def expand_terms(topics: list[str] | tuple[str, ...], catalog: Catalog, question: str = "") -> tuple[str, ...]:
    """Spellings of each topic: itself, its search-synonym group, bilingual aliases, order ids. A
    group the question asks about, in its words less the excluded topics, is no spelling of a topic
    that only one of its longer terms holds: "不要分析数据库" of a question about the 连接池 leaves
    数据库连接池's group asked. Its terms the topic itself holds stay excluded ("the full gc": full gc;
    "heap" of a question about HighMemoryUsage excludes heap, not memory)."""
    synonyms = catalog.synonyms
    asked = fold(question_names(question, catalog).own) if question else ""
    for excluded in filter(None, (fold(topic).strip() for topic in topics)):
        asked = asked.replace(excluded, " ")
    terms: list[str] = []
    for topic in topics:
        folded = fold(topic).strip()
        if not folded:
            continue
        terms.append(folded)
        spellings = (folded, singular(folded))
        for group in synonyms.values():
            if not any(term in spelled or (_word(folded) and folded in term)
                       for term in group if _word(term) for spelled in spellings):
                continue
            asked_group = bool(asked) and bool(mentions(asked, list(group)))
            terms.extend(term for term in group if not asked_group or term in folded)
        for key, aliases in ALIASES.items():
            if any(mentions(spelled, [alias]) for alias in (key, *aliases) for spelled in spellings):
                terms.extend((key, *aliases))
        for number in ORDER.findall(folded):
            terms.extend((f"order {number}", f"order-{number}", f"order{number}", f"订单{number}"))
    return tuple(dict.fromkeys(t for t in terms if t))


def _word(term: str) -> bool:
    """Long enough to stand for a word inside another: three letters, or two Chinese characters."""
    return len(term) >= 3 or (len(term) == 2 and all("\u4e00" <= ch <= "\u9fff" for ch in term))


def read_scope(question: str, catalog: Catalog) -> Scope:
    """The one reading of a question's scope, from the question's own words: its narrow markers and
    its exclusion clauses. A planner's reading is not taken: a small planner copies topics from its
    demos, or lists the very service that was asked about."""
    folded = fold(own_words(nfkc(question)))
    narrow = any(marker in folded for marker in NARROW_MARKERS)
    excluded = exclusions(nfkc(question), catalog)
    topics = list(dict.fromkeys(e.topic for e in excluded))
    return _scope(narrow, topics, catalog, question, blanked(nfkc(question), excluded))



def exclusion_candidates(question: str, catalog: Catalog) -> tuple[str, ...]:
    """What an LM may propose to exclude: the spans of the question, in its own spelling, that name
    a service, an alert or a synonym term of the catalog, less those `with_proposed_exclusions`
    would refuse whatever the LM read (the question's only service, alert or topic). A small
    planner left free to write exclusions invents them (and loops); these are the ones it could mean."""
    quoted = nfkc(question)
    text = own_words(quoted)
    terms = [*catalog.services, *catalog.alert_names, *(t for g in catalog.synonyms.values() for t in g if len(t) >= 3)]
    found = {(m.start(), m.end()) for term in set(terms) for m in re.finditer(re.escape(term), text, flags=re.IGNORECASE)}
    # A quoted value is a candidate only as a whole name.
    whole = {t.casefold() for t in terms}
    found |= {(m.start() + 1, m.end() - 1) for m in QUOTED.finditer(quoted) if fold(quoted_value(m.group())) in whole}
    text = quoted
    # A name inside a longer one ("OOM" in "PodOOMKilled") is not a span of its own.
    kept = sorted(span for span in found if not any(o != span and o[0] <= span[0] and span[1] <= o[1] for o in found))
    spans = dict.fromkeys(text[start:end] for start, end in kept)
    nothing = Scope(narrow=False)
    return tuple(span for span in spans if not with_proposed_exclusions(nothing, [span], question, catalog)[1])


def with_proposed_exclusions(scope: Scope, proposed: list[str], question: str, catalog: Catalog,
                             targets: list[str] | tuple[str, ...] = ()) -> tuple[Scope, list[str]]:
    """The scope with the exclusions an LM read in the question, and why each refused one was refused.

    Users phrase exclusions in more ways than any list of markers ("leave X out of it", "X 就别管了",
    "除了 X 之外"), so the planner proposes them; code accepts a proposal only when it is the
    question's own words and leaves the question something to ask about: never one of the `targets`
    the same LM read, and never the only service, alert or topic the question names."""
    text = nfkc(question)
    # The asker's own words, and the values they quote whole.
    folded = fold(own_words(text))
    whole = {fold(v) for v in quoted_values(text)}
    asked = question_names(question, catalog)
    named = {"service": [s.casefold() for s in asked.services], "alert": [a.casefold() for a in asked.alerts]}
    groups = [g for g in catalog.topic_groups() if mentions(asked.own, list(g)) or set(g) & set(asked.quoted_terms)]
    topics, refused = list(scope.excluded_topics), []
    for topic in proposed:
        term = fold(topic).strip()
        if not term or term in (fold(t) for t in topics):
            continue
        if term not in folded and term not in whole:
            refused.append(f"{topic!r} is not in the question's words")
            continue
        if any(fold(t).strip() and (fold(t).strip() in term or term in fold(t)) for t in targets):
            refused.append(f"{topic!r} is also read as a target")
            continue
        only = [kind for kind, names in named.items() if names and all(mentions(term, [n]) for n in names)]
        if groups and all(mentions(term, list(g)) for g in groups):
            only.append("topic")
        if only:
            refused.append(f"{topic!r} is the question's only {' and '.join(only)} left")
            continue
        topics.append(topic)
        # What is excluded is no longer a target: the next proposal must leave one of the rest.
        named = {kind: [n for n in names if not mentions(term, [n])] for kind, names in named.items()}
        groups = [g for g in groups if not mentions(term, list(g))]
    if len(topics) == len(scope.excluded_topics):
        return scope, refused
    return _scope(scope.narrow, topics, catalog, question, scope.asked), refused

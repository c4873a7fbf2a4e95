"""What a log query matches: one analyzer for the fixture world and a log directory alike.

A query is read as concepts. A synonym group (synonyms.json) or a service name that the query
names is one concept, matched as a substring by any of its terms. Every other word of the query
is a concept matched by form, not spelling:
- English words by their Snowball stem, so "failed", "fails" and "failing" are one word;
- a stem that begins a longer one by at most three letters, so "fail" meets "failur" (failure)
  and "error" meets "errors", but "time" does not meet "timestamp";
- two adjacent words written as one, on either side, so "timed out" meets "timeout";
- Chinese by jieba's segmentation, each word as a substring, so "支付回调失败" meets
  "支付回调 失败".
"""

from __future__ import annotations

import functools
import math
import re
import threading
from dataclasses import dataclass
from functools import lru_cache

from tools.folding import fold_words

# Words that describe the search rather than its target ("find the logs of ..."), and English
# function words, which would otherwise count as concepts a line must share.
QUERY_STOPWORDS = frozenset(
    "log logs logging logged alert alerts check find search show confirm please only whether "
    "the a an of for in on and or is are was were be been being any did does do has have had there if with "
    "from to by at as it its this that these those their them they we our you your i my me he she his her "
    "which who what when where why how can could would should will may might must than then so such "
    "about into over under again all some each both other same "
    "日志 告警 查询 检索 是否 存在 有没有 有无 相关 记录 确认 只 的 了 吗 是 有 在".split()
)
# How much longer a stem may be than one it begins and still be the same word.
MAX_SUFFIX = 3
MIN_PREFIX = 4
ASCII_WORD = re.compile(r"[a-z0-9]+")
_lock = threading.Lock()


@lru_cache(maxsize=1)
def _stemmer():
    import snowballstemmer

    return snowballstemmer.stemmer("english")


def words(text: str) -> list[str]:
    """The folded text's words in order: stems for English, jieba's words for Chinese."""
    import jieba

    folded = fold_words(text)
    with _lock:
        jieba.setLogLevel(60)
        pieces = jieba.lcut(folded)
        stemmer = _stemmer()
        out = []
        for piece in pieces:
            if piece.isascii():
                out.extend(stemmer.stemWord(w) for w in ASCII_WORD.findall(piece))
            elif any(ch.isalnum() for ch in piece):
                out.append(piece.strip())
    return [w for w in out if w]


@functools.lru_cache(maxsize=4096)
def word_starts(text: str) -> frozenset[int]:
    """Where jieba starts a word in `text` (its own positions, unfolded): Chinese has no spaces to
    say where one word ends and the next begins."""
    import jieba

    with _lock:
        jieba.setLogLevel(60)
        return frozenset(start for _, start, _ in jieba.tokenize(text))


def _same_word(a: str, b: str) -> bool:
    if a == b:
        return True
    short, long = sorted((a, b), key=len)
    # Only letters inflect: a number or an identifier with digits is the same only when equal.
    return (short.isalpha() and long.isalpha() and len(short) >= MIN_PREFIX and long.startswith(short)
            and len(long) - len(short) <= MAX_SUFFIX)


@dataclass(frozen=True)
class Query:
    groups: tuple[tuple[str, ...], ...]  # each: the terms of one named concept
    words: tuple[str, ...]  # the other words, as `words()` gives them

    @property
    def concepts(self) -> int:
        return len(self.groups) + len(self.words)


def named_concepts(query: str, synonyms: dict[str, tuple[str, ...]], services) -> tuple[list[tuple[str, ...]], str]:
    """The synonym groups and service names a query names, longest term first, and the folded rest."""
    remaining = fold_words(query)
    groups: list[tuple[str, ...]] = []
    named = [(term, terms) for terms in synonyms.values() for term in terms]
    named += [(name.casefold(), (name.casefold(),)) for name in services]
    for term, terms in sorted(named, key=lambda pair: -len(pair[0])):
        if term and term in remaining:
            if terms not in groups:
                groups.append(terms)
            remaining = remaining.replace(term, " ")
    return groups, remaining


def read_query(query: str, synonyms: dict[str, tuple[str, ...]], services) -> Query:
    groups, remaining = named_concepts(query, synonyms, services)
    kept = [w for w in words(" ".join(t for t in re.split(r"\s+", remaining) if t not in QUERY_STOPWORDS))
            if w not in QUERY_STOPWORDS and (len(w) >= 2 or not w.isascii())]
    return Query(groups=tuple(groups), words=tuple(dict.fromkeys(kept)))


@lru_cache(maxsize=65536)
def read_line(text: str) -> Line:
    """A log line read for matching; lines repeat across searches, so each is read once."""
    return Line(text)


class Line:
    """A log line's text, read once for matching."""

    def __init__(self, text: str):
        self.text = fold_words(text)
        self.words = words(text)
        self.forms = set(self.words) | {a + b for a, b in zip(self.words, self.words[1:])}

    def has_word(self, word: str) -> bool:
        if not word.isascii():
            return word in self.text
        return any(_same_word(word, form) for form in self.forms)

    def matched(self, query: Query) -> tuple[int, int]:
        """(named concepts matched, other words matched)."""
        groups = sum(any(term in self.text for term in group) for group in query.groups)
        hits, i = 0, 0
        while i < len(query.words):
            pair = query.words[i] + query.words[i + 1] if i + 1 < len(query.words) else None
            if pair and pair.isascii() and pair in self.forms:
                hits, i = hits + 2, i + 2
                continue
            hits += self.has_word(query.words[i])
            i += 1
        return groups, hits


def line_matches(line: Line, query: Query, min_share: float = 1.0) -> tuple[bool, int]:
    """Whether a line answers the query, and how many of its words it has (for ranking).

    At the default share a line needs every named concept, and every other word when the query
    names no concept (with named concepts, the other words only rank). A smaller share (a second
    look for what a search may have missed) asks for that share of all concepts, at least one."""
    groups, hits = line.matched(query)
    if min_share >= 1.0:
        if groups < len(query.groups):
            return False, hits
        return bool(query.groups) or hits == len(query.words), hits
    needed = max(1, math.ceil(min_share * query.concepts))
    return groups + hits >= needed, hits

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

import bisect
import functools
import math
import re
import threading
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache

from tools.text.folding import fold, fold_words

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


def named_concepts(query: str, synonyms: dict[str, tuple[str, ...]], services,
                   implied: str | None = None) -> tuple[list[tuple[str, ...]], str]:
    """The synonym groups and service names a query names, longest term first, and the folded rest.
    `implied`: the service the search is filtered by. Its name in the query says what the filter
    says, so it is no concept a line's text must hold: a line of a file of many services' lines that
    names none is that service's too, and would be missed."""
    remaining = fold_words(query)
    implied = fold_words(implied) if implied else None
    groups: list[tuple[str, ...]] = []
    named = [(term, terms) for terms in synonyms.values() for term in terms]
    named += [(fold_words(name), (fold_words(name),)) for name in (*services, *([implied] if implied else ()))]
    for term, terms in sorted(named, key=lambda pair: -len(pair[0])):
        if term and term in remaining:
            if terms not in groups and term != implied:
                groups.append(terms)
            remaining = remaining.replace(term, " ")
    return groups, remaining


def read_query(query: str, synonyms: dict[str, tuple[str, ...]], services, implied: str | None = None) -> Query:
    groups, remaining = named_concepts(query, synonyms, services, implied)
    kept = [w for w in words(" ".join(t for t in re.split(r"\s+", remaining) if t not in QUERY_STOPWORDS))
            if w not in QUERY_STOPWORDS and (len(w) >= 2 or not w.isascii())]
    return Query(groups=tuple(groups), words=tuple(dict.fromkeys(kept)))


@lru_cache(maxsize=65536)
def read_line(text: str) -> Line:
    """A log line read for matching; lines repeat across searches, so each is read once."""
    return Line(text)


@lru_cache(maxsize=262144)
def stem(token: str) -> str:
    if token.isdigit():
        # Snowball's rules are all about letters: a number is its own stem, and logs are full of them.
        return token
    with _lock:
        return _stemmer().stemWord(token)


def forms(folded: str) -> set[str]:
    """A folded text's English word forms: the stem of each Latin word or number, and each two
    adjacent ones written as one ("timed out" has "timeout")."""
    stems = [stem(token) for token in ASCII_WORD.findall(folded)]
    return set(stems) | {a + b for a, b in zip(stems, stems[1:])}


class Line:
    """A log line's text, read once for matching. This is what a line matches, and `Index` finds
    the same lines in many records at once."""

    def __init__(self, text: str):
        self.text = fold_words(text)
        self.forms = forms(self.text)

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
    return _decide(query, groups, hits, min_share), hits


def _decide(query: Query, groups: int, hits: int, min_share: float) -> bool:
    if min_share >= 1.0:
        return groups == len(query.groups) and (bool(query.groups) or hits == len(query.words))
    return groups + hits >= max(1, math.ceil(min_share * query.concepts))


# Between two adjacent words of one record: anything but a Latin letter, a digit or a record's end.
GAP = r"[^a-z0-9\n]+"
# Whitespace that is not already one space: a run of two or more, or one that is not a space. (A
# pattern that also matched single spaces would copy every text, and a text may be one 64 MiB line.)
SPACE_RUN = re.compile(r"[^\S\n]{2,}|[^\S\n ]")
EDGE_SPACE = re.compile(r" \n ?|\n ")
NEWLINE = re.compile(r"\n")
# Texts are folded in slices of about this many characters to list their words.
VOCABULARY_SLICE = 1 << 20
# Records folded at once when an index is built.
FOLD_SLICE = 4096


def _slices(texts: Iterable[str]) -> Iterator[list[str]]:
    piece: list[str] = []
    for text in texts:
        piece.append(text)
        if len(piece) >= FOLD_SLICE:
            yield piece
            piece = []
    if piece:
        yield piece


class Index:
    """Many records' texts, folded once, searched by regular expressions over the whole: a search
    costs a scan in C per concept instead of reading every line in Python, and finds exactly the
    records that `line_matches` accepts (tests/tools/test_search_index.py checks that)."""

    def __init__(self, texts: Iterable[str]):
        # Folded as one text, as fold_words folds each (NFKC and case per character, runs of
        # whitespace one space, none at either end), with a newline between records. The texts are
        # folded a slice at a time, so that the folding holds no second copy of them all.
        slices, size = [], 0
        for piece in _slices(texts):
            joined = fold("\n".join(text.replace("\n", " ") for text in piece))
            slices.append(EDGE_SPACE.sub("\n", SPACE_RUN.sub(" ", joined)).strip(" "))
            size += len(piece)
        self.text = "\n".join(slices)
        self.size = size
        self.starts = array("q", [0])
        if size:
            self.starts.extend(m.end() for m in NEWLINE.finditer(self.text))
        self._by_stem: dict[str, list[str]] | None = None
        self._stems: list[str] = []

    def _vocabulary(self) -> dict[str, list[str]]:
        """Each stem of the texts' Latin words and numbers, with the words that have it."""
        if self._by_stem is None:
            tokens: set[str] = set()
            at = 0
            while at < len(self.text):
                end = self.text.find("\n", at + VOCABULARY_SLICE)
                end = len(self.text) if end < 0 else end
                tokens.update(ASCII_WORD.findall(self.text, at, end))
                at = end + 1
            by_stem: dict[str, list[str]] = {}
            for token in tokens:
                by_stem.setdefault(stem(token), []).append(token)
            self._by_stem, self._stems = by_stem, sorted(by_stem)
        return self._by_stem

    def _records(self, pattern: str) -> set[int]:
        """The records in which the pattern matches."""
        found: set[int] = set()
        compiled = re.compile(pattern)
        at = 0
        while (match := compiled.search(self.text, at)) is not None:
            record = bisect.bisect_right(self.starts, match.start()) - 1
            found.add(record)
            at = self.starts[record + 1] if record + 1 < self.size else len(self.text)
        return found

    def _stems_like(self, word: str) -> list[str]:
        """The stems of the texts that `_same_word` takes for the word."""
        by_stem = self._vocabulary()
        same = [word] if word in by_stem else []
        if word.isalpha():
            shorter = range(max(MIN_PREFIX, len(word) - MAX_SUFFIX), len(word))
            same += [word[:k] for k in shorter if word[:k] in by_stem and word[:k].isalpha()]
            if len(word) >= MIN_PREFIX:
                at = bisect.bisect_right(self._stems, word)
                while at < len(self._stems) and self._stems[at].startswith(word):
                    longer = self._stems[at]
                    if len(longer) - len(word) <= MAX_SUFFIX and longer.isalpha():
                        same.append(longer)
                    at += 1
        return same

    def _tokens(self, stems: list[str]) -> str:
        words = sorted({t for s in stems for t in self._vocabulary()[s]}, key=len, reverse=True)
        return "|".join(re.escape(w) for w in words)

    def _form_pattern(self, word: str, *, exact: bool) -> str | None:
        """A pattern for the records that have the word among their forms (`exact`: spelled so, as a
        query's two words written as one must be; else by `_same_word`)."""
        by_stem = self._vocabulary()
        single = ([word] if word in by_stem else []) if exact else self._stems_like(word)
        patterns = [rf"(?<![a-z0-9])(?:{self._tokens(single)})(?![a-z0-9])"] if single else []
        for k in range(1, len(word)):
            if word[:k] not in by_stem:
                continue
            rest = ([word[k:]] if word[k:] in by_stem else []) if exact else self._pair_rests(word, word[:k])
            if rest:
                patterns.append(rf"(?<![a-z0-9])(?:{self._tokens([word[:k]])}){GAP}(?:{self._tokens(rest)})"
                                r"(?![a-z0-9])")
        return "|".join(patterns) or None

    def _pair_rests(self, word: str, first: str) -> list[str]:
        """The stems that follow `first` to make a form `_same_word` takes for the word."""
        rest = word[len(first):]
        candidates = {rest[:k] for k in range(1, len(rest) + 1)}
        at = bisect.bisect_left(self._stems, rest)
        while at < len(self._stems) and self._stems[at].startswith(rest):
            candidates.add(self._stems[at])
            at += 1
        by_stem = self._vocabulary()
        return [s for s in candidates if s in by_stem and _same_word(word, first + s)]

    def _word_records(self, word: str) -> set[int]:
        if not word.isascii():
            return self._records(re.escape(word))
        pattern = self._form_pattern(word, exact=False)
        return self._records(pattern) if pattern else set()

    def search(self, query: Query, min_share: float = 1.0) -> dict[int, int]:
        """The records that match the query, each with its word hits (for ranking)."""
        if not query.concepts:
            return dict.fromkeys(range(self.size), 0) if _decide(query, 0, 0, min_share) else {}
        groups = [self._records("|".join(re.escape(t) for t in sorted(group, key=len, reverse=True) if t))
                  for group in query.groups]
        words = [self._word_records(w) for w in query.words]
        pairs = []
        for first, second in zip(query.words, query.words[1:]):
            pair = first + second
            pattern = self._form_pattern(pair, exact=True) if pair.isascii() else None
            pairs.append(self._records(pattern) if pattern else set())
        if min_share >= 1.0 and groups:
            candidates = set.intersection(*groups)
        elif min_share >= 1.0:
            # Every word is needed: each by itself or inside a pair with a neighbour.
            covered = [words[i] | (pairs[i - 1] if i else set()) | (pairs[i] if i < len(pairs) else set())
                       for i in range(len(words))]
            candidates = set.intersection(*covered)
        else:
            candidates = set().union(*groups, *words, *pairs)
        found = {}
        for record in candidates:
            hits, i = 0, 0
            while i < len(query.words):
                if i < len(pairs) and record in pairs[i]:
                    hits, i = hits + 2, i + 2
                    continue
                hits += record in words[i]
                i += 1
            if _decide(query, sum(record in g for g in groups), hits, min_share):
                found[record] = hits
        return found

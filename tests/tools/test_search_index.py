"""The index finds exactly the records that a line-by-line match accepts, with the same word hits:
it is a faster way to the same answer, never another answer (tools/text/search.py)."""

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tools.text.search import Index, Line, line_matches, read_query
from tools.sources.fixture import get_world

SYNONYMS = {"connection_pool": ("hikaricp", "connection pool", "连接池"), "memory": ("heap", "内存")}
SERVICES = ("payment-service", "order-service")
# Words chosen so that inflections, prefixes, adjacent pairs, numbers and Chinese all meet.
WORDS = ("fail", "failed", "failure", "failing", "fails", "time", "timed", "out", "timeout", "timestamp", "log",
         "in", "login", "connect", "connection", "refused", "refuse", "502", "502s", "50", "2", "error", "errors",
         "heap", "HikariCP", "pool", "connection pool", "支付", "回调", "失败", "连接池", "内存", "payment-service",
         "happy", "happi", "dying", "die", "run", "runs", "running")
GLUE = (" ", " ", "-", ": ", ", ", "/", "=", ".", "超时", " | ", "")


def texts():
    word = st.sampled_from(WORDS)
    glue = st.sampled_from(GLUE)
    line = st.lists(st.tuples(word, glue), min_size=0, max_size=8).map(lambda parts: "".join(w + g for w, g in parts))
    return st.lists(line, min_size=1, max_size=12)


def reference(lines, query, share):
    found = {}
    for at, text in enumerate(lines):
        matches, hits = line_matches(Line(text), query, share)
        if matches:
            found[at] = hits
    return found


@settings(max_examples=400, deadline=None)
@given(lines=texts(), query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
       share=st.sampled_from([1.0, 0.5]))
def test_the_index_finds_what_line_by_line_matching_finds(lines, query, share):
    wanted = read_query(query, SYNONYMS, SERVICES)
    assert Index(lines).search(wanted, share) == reference(lines, wanted, share)


def test_on_the_fixture_world_every_benchmark_query_finds_the_same_lines():
    world = get_world()
    lines = [f"{r['level']} {r['service']} {r['message']}" for r in world.logs]
    index = Index(lines)
    questions = json.loads((Path(__file__).parents[2] / "benchmarks" / "log_questions.json").read_text())
    queries = [q for question in questions for q in question["queries"]] + [q["question"] for q in questions]
    for query in queries:
        for share in (1.0, 0.5):
            wanted = read_query(query, world.synonyms, world.service_names)
            assert index.search(wanted, share) == reference(lines, wanted, share), query


def test_an_index_of_no_records_finds_nothing_and_a_query_of_no_concepts_every_record():
    assert Index([]).search(read_query("HikariCP", SYNONYMS, SERVICES)) == {}
    assert Index(["a", "b"]).search(read_query("", SYNONYMS, SERVICES)) == {0: 0, 1: 0}


# Characters that fold, compose, change length when case folded, hide, or separate words: the index
# folds the texts of many records at once and by slices, line_matches one text at a time.
ALPHABET = list("abfiledrunsg019 -_.:|=\t\n") + ["\u00a0", "\u3000", "  ", "\u2028", "\x85", "é", "É", "e\u0301",
                                                "\u0301", "中", "文", "ß", "ẞ", "ſ", "\u212a", "İ", "ﬁ", "Ａ", "ａ", "１",
                                                "\u200b", "\u00ad", "\ufeff", "²", "①", "Ⅻ", "ǅ", "\x00", "\ufffd"]


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(st.lists(st.sampled_from(ALPHABET), max_size=30).map("".join), min_size=1, max_size=8),
       query=st.lists(st.sampled_from(ALPHABET + ["failed ", "run ", "中文 ", "ab-1 "]), max_size=12).map("".join),
       share=st.sampled_from([1.0, 0.5]))
def test_the_index_agrees_with_line_by_line_matching_on_any_characters(lines, query, share):
    wanted = read_query(query, {"g": ("ab", "a b", "中文")}, ("ab-1",))
    assert Index(lines).search(wanted, share) == reference(lines, wanted, share)


def test_an_index_built_in_slices_is_the_index_built_at_once(monkeypatch):
    lines = [f"  line {n}\tof  many records  " for n in range(50)]
    whole = Index(lines)
    monkeypatch.setattr("tools.text.search.FOLD_SLICE", 7)
    sliced = Index(lines)
    assert (sliced.text, list(sliced.starts), sliced.size) == (whole.text, list(whole.starts), whole.size)

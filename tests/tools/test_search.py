"""What a log query matches: inflections and close forms in English, segmentation in Chinese, and
the second look's share rule (tools/text/search.py)."""

import pytest

from tools.functions import query_logs
from tools.text.search import Line, line_matches, read_query

SYNONYMS = {"connection_pool": ("hikaricp", "connection pool")}


def matches(query: str, line: str, share: float = 1.0) -> bool:
    return line_matches(Line(line), read_query(query, SYNONYMS, ["payment-service"]), share)[0]


@pytest.mark.parametrize("query,line", [
    ("payment callback failure", "Order 123 payment callback failed: upstream acquirer returned 502"),
    ("payment callback failed", "payment callback failures: 3 in 5m"),
    ("callback fails", "callback failing for order 9"),
    ("request timed out", "upstream request timeout after 30s"),
    ("request timeout", "request to acquirer timed out after 30s"),
    ("connection refused", "connect refused: connection refused by 10.0.0.3"),
    ("errors", "error while flushing buffer"),
    ("支付回调失败", "[ERROR] 支付回调 失败: upstream 502"),
    ("HikariCP exhausted", "connection pool exhausted, waiting=32"),
])
def test_close_forms_match(query, line):
    assert matches(query, line)


@pytest.mark.parametrize("query,line", [
    ("time", "timestamp drift 3s"),  # a prefix more than three letters short is another word
    ("order 123", "GET /orders?user_id 200 127ms"),  # numbers match only when equal
    ("order 123", "order 1234 created"),
    ("payment callback failure", "payment settled"),  # every word is needed at the default share
    ("HikariCP exhausted", "thread pool exhausted"),  # a named concept needs one of its own terms
])
def test_other_words_do_not_match(query, line):
    assert not matches(query, line)


def test_a_share_asks_for_that_part_of_the_concepts():
    line = "refund callback failed for order 7"
    assert not matches("payment callback failure", line)
    assert matches("payment callback failure", line, 0.5)  # callback and fail: 2 of 3
    assert not matches("payment callback failure", "payment settled", 0.5)  # 1 of 3


def test_the_tool_finds_the_fixture_line_by_another_form():
    found = query_logs("payment callback failure", service="payment-service")
    assert found["total"] >= 1
    assert any("callback failed" in log["message"] for log in found["logs"])


@pytest.mark.parametrize("hidden", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u180e"])
def test_a_character_no_reader_sees_neither_hides_a_word_nor_makes_one(hidden):
    # A log writer can spell `r\u200be\u200bf...` so that a reader sees "refused" and no word matches.
    assert matches("connection refused", f"upstream connection {hidden.join('refused')} by 10.0.0.3")
    assert not matches("connection refused", f"upstream connection {hidden.join('reused')}")

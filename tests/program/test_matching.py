import pytest

from program.matching import canonical, match_excerpt

REF = "[11:17][WARN][order-service] 内存使用率过高: 91.0%, JVM堆内存: 3.8GB/4GB, GC次数: 128"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("内存使用率过高：91.0%", "内存使用率过高: 91.0%"),
        ("current = 91%", "current=91%"),
        ("order\u200b-service", "order-service"),
        ("ＡＢＣ１２３", "abc123"),
        ("3.8GB\u22124GB", "3.8GB-4GB"),
        ("“Slow request”", '"Slow request"'),
    ],
)
def test_benign_differences_normalise_alike(a, b):
    assert canonical(a).text == canonical(b).text


@pytest.mark.parametrize(("a", "b"), [("12 8", "128"), ("3.8", "38"), ("50/50", "5050"), ("91%", "91"), ("11:17", "1117")])
def test_meaningful_punctuation_and_spacing_survive(a, b):
    assert canonical(a).text != canonical(b).text


def test_matched_text_is_taken_from_the_ref_not_the_excerpt():
    result = match_excerpt("内存使用率过高：91.0%", REF)
    assert result.ok and result.matched_text == "内存使用率过高: 91.0%"


def test_ellipsis_matched_text_shows_each_piece():
    result = match_excerpt("[11:17][WARN] … GC次数: 128", REF)
    assert result.ok and result.matched_text == "11:17][WARN … GC次数: 128"


def test_truncating_an_identifier_needs_an_explicit_ellipsis():
    assert not match_excerpt("[11:17][WARN][order-ser", REF).ok
    assert match_excerpt("[11:17][WARN][order-ser…", REF).ok


def test_numbers_may_not_be_truncated_even_with_an_ellipsis():
    result = match_excerpt("JVM堆内存: 3.8GB/4…", REF)
    assert not result.ok and "3.8GB/4GB" in result.message

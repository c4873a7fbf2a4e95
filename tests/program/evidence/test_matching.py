import pytest

from program.evidence.matching import canonical, match_excerpt

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
    assert result.ok and result.matched_text == "[11:17][WARN] … GC次数: 128"


def test_truncating_an_identifier_needs_an_explicit_ellipsis():
    assert not match_excerpt("[11:17][WARN][order-ser", REF).ok
    assert match_excerpt("[11:17][WARN][order-ser…", REF).ok


def test_numbers_may_not_be_truncated_even_with_an_ellipsis():
    result = match_excerpt("JVM堆内存: 3.8GB/4…", REF)
    assert not result.ok and "3.8GB/4GB" in result.message


POOL = "[11:20][WARN][order-service] HikariCP pool stats: active=50/50, idle=0, waiting=32"
HIKARI = "[11:20][ERROR][order-service] HikariPool-1 - Connection is not available, request timed out after 30000ms"
ALERT = "HighMemoryUsage firing, service=order-service, current=91%, threshold=85%, duration=15m"
SLOW = "[11:12][WARN][user-service] Slow request: GET /api/v1/users/profile took 4200ms"


@pytest.mark.parametrize(("excerpt", "ref"), [
    ("active≠50/50", POOL), ("active!=50/50", POOL), ("active<>50/50", POOL), ("active<50/50", POOL),
    ("active>50/50", POOL), ("active≥50/50", POOL), ("active≤50/50", POOL), ("active~50/50", POOL),
    ("active≈50/50", POOL), ("current!=91%", ALERT), ("current≈91%", ALERT),
    ("HighMemoryUsage firing, service=order-service, current=91%?", ALERT),
    ("GC次数: 12⁸", REF), ("GC次数: 12₈", REF), ("内存使用率过高: 9¹.0%", REF),
    ("内存使用率过高: 91\u0338.0%", REF), ("current=9\u03011%", ALERT), ("order-servi\u0307ce", ALERT),
    ("Connection is … available", HIKARI), ("HikariPool-1 - Connection is … available", HIKARI),
])
def test_one_character_that_changes_meaning_never_passes(excerpt, ref):
    assert not match_excerpt(excerpt, ref).ok


@pytest.mark.parametrize(("excerpt", "ref"), [
    ("took 4200 ms", SLOW), ("GET /api/v1/users/profile took 4200 ms", SLOW),
    ("GC次数：１２８", REF), ("active = 50/50", POOL), ("ａｃｔｉｖｅ＝５０/５０", POOL),
    ("HikariPool-1 … request timed out after 30000ms", HIKARI),
    ("[11:20][ERROR][order-service] HikariPool-1 … request timed out after 30000ms", HIKARI),
])
def test_honest_variants_pass(excerpt, ref):
    assert match_excerpt(excerpt, ref).ok


def test_a_space_inside_a_number_is_still_a_change():
    assert not match_excerpt("took 42 00ms", SLOW).ok


def test_memos_are_bounded_by_characters_not_entries():
    from program.evidence.matching import CACHE_CHARS

    canonical.cache_clear()
    big = "GC次数: 128 " * 50_000  # 500,000 characters: too big to keep
    match_excerpt("GC次数: 128", big)
    assert canonical.cache_chars() < 1_000
    for n in range(3_000):
        canonical(f"line {n} " + "x" * 1_000)
    assert canonical.cache_chars() <= CACHE_CHARS


@pytest.mark.parametrize("excerpt", [
    "[11:03][INFO][order-service] GET /orders 200 45ms",
    "[11:03][INFO][order-service] GET /orders 200 45ms;",
    "GET /orders 200 45ms",
])
def test_the_matched_span_is_shown_exactly_with_the_quotes_own_brackets(excerpt):
    ref = "[11:03][INFO][order-service] GET /orders 200 45ms; pool ok"
    assert match_excerpt(excerpt, ref).matched_text == excerpt

import pytest

from program.evidence.canonical import canonical
from program.evidence.matching import match_excerpt

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


def test_a_match_says_where_each_piece_of_the_quote_sits_in_the_ref_s_nfc_form():
    ref = "cafe\u0301 pool: active=50/50, idle=0; waiting=32 requests"
    result = match_excerpt("active=50/50 … waiting=32", ref)
    source = canonical(ref).source
    assert result.ok and [source[start:end] for start, end in result.spans] == ["active=50/50", "waiting=32"]
    # NFC joined e and U+0301 into one character, so every place after it moved by one.
    assert result.spans[0][0] == ref.index("active") - 1
    assert match_excerpt("active=51/50", ref).spans == ()


def test_ellipsis_matched_text_shows_each_piece():
    result = match_excerpt("[11:17][WARN] … GC次数: 128", REF)
    assert result.ok and result.matched_text == "[11:17][WARN] … GC次数: 128"


def test_an_identifier_is_never_cut_even_with_an_ellipsis():
    assert not match_excerpt("[11:17][WARN][order-ser", REF).ok
    assert not match_excerpt("[11:17][WARN][order-ser…", REF).ok
    assert match_excerpt("[11:17][WARN][order-service…", REF).ok


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
    from program.evidence.text_cache import CACHE_CHARS

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


@pytest.mark.parametrize(("excerpt", "ref"), [
    # A word, an identifier or a number cut at its start or end, with or without an ellipsis.
    ("available for writes", "orders-db is unavailable for writes"),
    ("…available for writes", "orders-db is unavailable for writes"),
    ("payment status … known", "order-123 状态同步失败: payment status unknown"),
    ("replica healthy", "replica healthy=false, lag=30s"),
    ("db is down for writes", "orders-db is down for writes"),
    ("t connect to orders-db", "can't connect to orders-db"),
    # A dropped negation, whichever apostrophe it is written with.
    ("connect to orders-db", "can’t connect to orders-db"),
    ("connect to orders-db", "CANʼT connect to orders-db"),
    ("latency 120ms over budget", "latency -120ms over budget"),
    ("timeout 5s exceeded", "timeout .5s exceeded"),
    ("took 250ms in total", "took 1,250ms in total"),
    ("heap 3.8GB/4", "heap 3.8GB/4GB used"),
    # Symbols that carry meaning are not gaps.
    ("deploy check ✓ passed", "deploy check ✗ passed"),
    ("traffic ↑ 40% since noon", "traffic ↓ 40% since noon"),
    # Case is meaning inside a value or an opaque id.
    ("window 15M since start", "window 15m since start"),
    ("heap usage 3.8Gb of 4GB", "heap usage 3.8GB of 4GB"),
    ("request AbC123x failed", "request abc123X failed"),
    ("size 10 KB exceeded", "size 10 kb exceeded"),
    # Punctuation that carries meaning is not a gap either.
    ("rate is 9 for orders", "rate is 9‰ for orders"),
    ("took 12 to finish", "took 12′ to finish"),
])
def test_a_quote_that_could_read_differently_from_its_source_is_refused(excerpt, ref):
    result = match_excerpt(excerpt, ref)
    assert not result.ok and result.rule == "evidence.excerpt_mismatch", result


@pytest.mark.parametrize(("excerpt", "ref", "context"), [
    # A verbatim quote after a negation no word list knows: the context carries the negation.
    ("managed to connect to orders-db", "never once managed to connect to orders-db, retrying",
     "never once managed to connect to orders-db, retrying"),
    ("connect to orders-db", "WARN hardly ever connects; connect to orders-db refused", "connect to orders-db refused"),
    ("current=91%", "HighMemoryUsage firing; current=91%; threshold=85%", "current=91%"),
    ("firing … threshold=85%", "HighMemoryUsage firing; current=91%; threshold=85%",
     "HighMemoryUsage firing … threshold=85%"),
    ("current=91%; threshold=85%", "HighMemoryUsage firing; current=91%；threshold=85%", "current=91%；threshold=85%"),
    # Case folds for words, and a separator symbol is a gap.
    ("error order-service timeout", "[ERROR] Order-Service | timeout", "[ERROR] Order-Service | timeout"),
])
def test_a_passing_quote_comes_with_the_whole_clauses_it_sits_in(excerpt, ref, context):
    result = match_excerpt(excerpt, ref)
    assert result.ok and result.context == context, result


def test_bidi_controls_are_characters_of_their_own():
    assert not match_excerpt("current=91%", "current=\u202e91\u202c%").ok
    assert match_excerpt("current=\u202e91\u202c%", "current=\u202e91\u202c%").ok


@pytest.mark.parametrize(("excerpt", "ref", "ok"), [
    ("使用率: 88.6%", "内存使用率: 88.6%", True),
    ("存使用率: 88.6%", "内存使用率: 88.6%", False),
    ("JVM堆内存: 3.8GB/4GB, GC次", "JVM堆内存: 3.8GB/4GB, GC次数: 128", False),
    ("db is down for writes", "orders–db is down for writes", False),
    ("db is down for writes", "orders@db is down for writes", False),
    ("error rate is 9", "error rate is 9‰", False),
    ("retry 10 times", "retry 5~10 times", False),
    ("replica healthy", "replica healthy≠true", False),
    ("timed out after 30s", "request timed out after 30s. Retrying", True),
    ("connection refused", "ERROR 'connection refused' by db", True),
    ("b value here", "a value;b value here", True),
])
def test_a_quote_starts_and_ends_beside_a_gap_or_a_chinese_word_boundary(excerpt, ref, ok):
    assert match_excerpt(excerpt, ref).ok is ok


# Full-width CJK punctuation separates words as its ASCII form does: the two quotes, then
# variants written for issue 30 (the marks of its list, each before or after a quote).
CJK_REF = "连接池耗尽排查：检查 HikariCP active 是否达到 maximumPoolSize，确认是否存在慢 SQL 或连接泄漏。"


@pytest.mark.parametrize(("quote", "ref"), [
    ("检查 HikariCP active 是否达到 maximumPoolSize", CJK_REF),
    ("连接池耗尽排查", CJK_REF),
    ("检查慢查询日志", "巡检状态：连接池正常！下一步？检查慢查询日志"),
    ("连接池已恢复", "结论：连接池已恢复"),
    ("timeout after 30s", "请求超时：timeout after 30s"),
    ("HikariCP active=50/50", "检查项：HikariCP active=50/50；idle=0"),
    ("连接池已耗尽", "「连接池已耗尽」（active=50/50）"),
    ("firing since 10:02", "『订单服务告警』；firing since 10:02"),
    ("慢查询超过阈值", "巡检结果？慢查询超过阈值！请处理"),
])
def test_full_width_cjk_punctuation_is_a_gap_as_its_ascii_form_is(quote, ref):
    assert match_excerpt(quote, ref).ok


@pytest.mark.parametrize(("quote", "ref"), [
    ("250ms in total", "请求耗时：1,250ms in total"),
    ("available for 5m", "服务状态：unavailable for 5m"),
    ("检查 HikariCP active 是否达到 maximumPool", CJK_REF),
])
def test_a_quote_cut_inside_a_token_beside_full_width_punctuation_is_still_refused(quote, ref):
    assert not match_excerpt(quote, ref).ok

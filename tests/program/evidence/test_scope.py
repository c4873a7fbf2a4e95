import pytest

from program.evidence.scope import mentions, read_scope
from tools.catalog import active_catalog

CATALOG = active_catalog()


def test_exclusions_are_read_and_expanded_to_their_spellings():
    scope = read_scope("只确认 payment-service 是否存在 HighCPUUsage 告警，不要分析订单123、OOM、数据库慢查询、连接池或 user-service。", CATALOG)
    assert scope.narrow
    assert scope.excluded_topics == ("订单123", "OOM", "数据库慢查询", "连接池", "user-service")
    for spelling in ("order 123", "order-123", "oom", "outofmemoryerror", "slow query", "database", "db", "hikaricp",
                     "connection pool", "user-service"):
        assert spelling in scope.excluded_terms


@pytest.mark.parametrize(("question", "narrow"), [
    ("只确认 order-service 是否存在 HighMemoryUsage 告警", True),
    ("Only confirm whether payment-service has a HighCPUUsage alert", True),
    ("排查 order-service 为什么变慢", False),
])
def test_narrow_markers(question, narrow):
    assert read_scope(question, CATALOG).narrow is narrow


def test_an_exclusion_clause_is_split_and_its_topics_spelled_by_the_catalogs_synonyms():
    scope = read_scope("排查 order-service，不要看 HikariCP 连接池的问题", CATALOG)
    assert scope.excluded_topics == ("HikariCP 连接池的问题",)
    assert {"hikaricp", "connection pool", "waiting"} <= set(scope.excluded_terms)
    assert read_scope("排查 order-service", CATALOG).excluded_topics == ()


@pytest.mark.parametrize("question", ["Check order-service, but don't look at HikariCP.",
                                      "排查 order-service，别管 HikariCP", "排查 order-service，跳过 HikariCP"])
def test_exclusion_phrasings(question):
    assert "hikaricp" in read_scope(question, CATALOG).excluded_terms


def test_short_terms_match_whole_words_only():
    assert mentions("mongodb latency", ["db"]) == []
    assert mentions("the DB is slow", ["db"]) == ["db"]
    assert mentions("ROOM booking", ["oom"]) == []
    assert mentions("HikariCP pool", ["hikaricp"]) == ["hikaricp"]

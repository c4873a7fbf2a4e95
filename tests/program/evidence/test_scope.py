import pytest

from program.evidence.question_words import mentions, question_names
from program.evidence.scope import read_scope, with_proposed_exclusions
from tools.catalog import active_catalog

CATALOG = active_catalog()


def test_exclusions_are_read_and_expanded_to_their_spellings():
    scope = read_scope("只确认 payment-service 是否存在 HighCPUUsage 告警，不要分析订单123、OOM、数据库慢查询、连接池或 user-service。", CATALOG)
    assert scope.narrow
    assert scope.excluded_topics == ("订单123", "OOM", "数据库慢查询", "连接池", "user-service")
    for spelling in ("order 123", "order-123", "oom", "outofmemoryerror", "slow query", "database", "db", "hikaricp",
                     "connection pool", "user-service"):
        assert spelling in scope.excluded_terms


def test_an_exclusion_spells_no_topic_the_question_asks_about():
    """"数据库" is inside "数据库连接池": excluding the database does not exclude the pool that was
    asked about, and still excludes the database's slow queries."""
    asked = read_scope("只确认 order-service 连接池是否耗尽，不要分析数据库", CATALOG)
    assert not {"hikaricp", "连接池", "数据库连接池"} & set(asked.excluded_terms)
    assert {"slow query", "慢查询"} <= set(asked.excluded_terms)
    not_asked = read_scope("只确认 order-service 是否存在 HighMemoryUsage 告警，不要分析数据库", CATALOG)
    assert {"hikaricp", "连接池", "slow query"} <= set(not_asked.excluded_terms)
    # A synonym of the asked topic, excluded by name, is excluded; the asked topic is not.
    heap = read_scope("只确认 order-service 是否存在 HighMemoryUsage 告警，不要分析 heap", CATALOG)
    assert heap.excluded_terms == ("heap",)


@pytest.mark.parametrize(("question", "asked", "excluded"), [
    # The catalog names the asked pool 数据库连接池, which holds the excluded 数据库.
    ("只确认 order-service 连接池是否耗尽，不要分析数据库", "order-service 的数据库连接池已耗尽", "数据库慢查询 3000ms"),
    ("只确认 order-service 数据库连接池是否耗尽，不要分析数据库", "数据库连接池 active=50/50", "慢查询：数据库响应 3000ms"),
    # The question's own compound of the excluded word and the asked name, even where the excluded
    # word is written whole again in it.
    ("Only check whether order-service's database connection pool is exhausted; skip the database slow queries",
     "HikariPool-1 - database connection pool exhausted", "slow database query took 3000ms"),
    ("skip the database, is the database connection pool exhausted on order-service?",
     "database connection pool exhausted", "slow database query took 3000ms"),
    ("skip the db, check the db connection pool of order-service", "db connection pool: active=50/50", "slow db query"),
])
def test_an_excluded_term_inside_the_name_of_what_is_asked_excludes_nothing(question, asked, excluded):
    exclusion = read_scope(question, CATALOG).exclusion
    assert exclusion.hits(asked) == []
    assert exclusion.hits(excluded)
    # The same text beside the excluded topic on its own is still excluded.
    assert exclusion.hits(f"{asked}; 数据库 CPU 92%")


@pytest.mark.parametrize(("question", "text"), [
    # The pool is not what is asked: its name is no shield for the database.
    ("只确认 order-service 是否存在 HighMemoryUsage 告警，不要分析数据库", "order-service 的数据库连接池已耗尽"),
    # A name the excluded topic holds itself is excluded, not asked: the memory group holds "full gc".
    ("只确认 order-service 的内存是否告警，排除 Full GC", "Full GC: heap 3.8GB -> 3.7GB"),
])
def test_a_name_of_what_is_not_asked_shields_nothing(question, text):
    assert read_scope(question, CATALOG).exclusion.hits(text)


@pytest.mark.parametrize(("question", "text"), [
    # An excluded term that runs past a name of what is asked is no part of it.
    ("不要分析数据库和连接池耗尽，只看 order-service 的连接池配置", "数据库连接池耗尽"),
    ("不要分析内存溢出，只看 order-service 堆内存使用率是否过高", "order-service 发生堆内存溢出"),
    # A name that holds a word of its own concept holds that concept excluded: the pool is.
    ("不要分析连接池耗尽，只确认 order-service 连接池的配置是否合理", "数据库连接池耗尽"),
    ("不要分析数据库连接池，只看 order-service 有多少请求在 waiting", "HikariCP 连接池耗尽 active=50/50"),
])
def test_a_shield_never_lets_the_excluded_topic_through(question, text):
    assert read_scope(question, CATALOG).exclusion.hits(text)


def test_a_proposed_exclusion_is_no_name_of_what_is_asked():
    """The planner's proposal stays among the words code read as asked; it shields nothing of itself,
    and what it excludes still leaves the asked compound that holds its word."""
    question = "Only check slow requests of order-service; leave the database connection pool out of it"
    scope, refused = with_proposed_exclusions(read_scope(question, CATALOG), ["database connection pool"],
                                              question, CATALOG)
    assert not refused and scope.shields == ()
    assert scope.exclusion.hits("HikariPool-1 - database connection pool exhausted")
    question = "leave the database aside, focus on whether the database connection pool of order-service is exhausted"
    scope, refused = with_proposed_exclusions(read_scope(question, CATALOG), ["database"], question, CATALOG)
    assert not refused and scope.excluded_topics == ("database",)
    assert not scope.exclusion.hits("database connection pool exhausted")
    assert scope.exclusion.hits("slow database query took 3000ms")


@pytest.mark.parametrize(("question", "proposed", "spelling"), [
    ("Only check whether order-service has a HighMemoryUsage alert; skip the Full GC.", (), "full gc"),
    ("Only check slow requests of order-service; leave the database connection pool out of it",
     ["database connection pool"], "hikaricp"),
])
def test_an_excluded_topic_keeps_the_spellings_it_holds_or_asks_nothing_else_with(question, proposed, spelling):
    """Written longer than its synonym, or proposed by the planner (its words are still among the
    question's), an excluded topic is still spelled by its group."""
    scope, refused = with_proposed_exclusions(read_scope(question, CATALOG), list(proposed), question, CATALOG)
    assert not refused and spelling in scope.excluded_terms


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


@pytest.mark.parametrize(("question", "topics"), [
    ("只确认 order-service 是否存在 HighMemoryUsage 告警，Full GC 日志就别管了。", ("Full GC 日志",)),
    ("只确认 order-service 的慢查询，连接池也不用看了", ("连接池",)),
    ("只确认 order-service 是否存在 HighMemoryUsage 告警，别管了。", ()),
    ("只确认 order-service 是否存在 HighMemoryUsage 告警，不要看 Full GC 了", ("Full GC",)),
])
def test_a_marker_that_ends_its_clause_excludes_what_stands_before_it(question, topics):
    """No particle after a marker ("别管了") is a topic: "了" excluded blocked every claim that wrote it."""
    scope = read_scope(question, CATALOG)
    assert scope.excluded_topics == topics
    assert not mentions("order-service 的 HighMemoryUsage 告警触发了", scope.excluded_terms)


def test_what_a_marker_at_the_clause_end_excludes_is_not_asked():
    question = "只确认 payment-service 是否存在 HighCPUUsage 告警，order-service 就别管了。"
    assert question_names(question, CATALOG).services == ("payment-service",)


def test_short_terms_match_whole_words_only():
    assert mentions("mongodb latency", ["db"]) == []
    assert mentions("the DB is slow", ["db"]) == ["db"]
    assert mentions("ROOM booking", ["oom"]) == []
    assert mentions("HikariCP pool", ["hikaricp"]) == ["hikaricp"]


# Phrasings the markers do not know, written after the code (held out from it): the planner reads
# the exclusion, code checks that it is the question's own words and leaves the question a target.
HELD_OUT_EXCLUSIONS = [
    ("Only confirm whether notification-service has a PodOOMKilled alert; leave order-service out of it.",
     "order-service", "order-service"),
    ("只确认 payment-service 是否存在 HighCPUUsage 告警，order-service 就别管了。", "order-service", "order-service"),
    ("除了 HikariCP 之外，只确认 order-service 是否存在 HighMemoryUsage 告警。", "HikariCP", "connection pool"),
    ("Check only whether user-service has a SlowResponse alert, and never mind api-gateway.", "api-gateway",
     "api-gateway"),
    ("只确认 inventory-service 的 SlowQuery 告警，user-service 不在这次范围内。", "user-service", "user-service"),
]


@pytest.mark.parametrize(("question", "proposed", "spelling"), HELD_OUT_EXCLUSIONS)
def test_an_exclusion_the_planner_read_in_the_questions_words_is_taken(question, proposed, spelling):
    scope, refused = with_proposed_exclusions(read_scope(question, CATALOG), [proposed], question, CATALOG)
    assert refused == [] and proposed in scope.excluded_topics and spelling in scope.excluded_terms


@pytest.mark.parametrize(("question", "proposed", "why"), [
    ("只确认 payment-service 是否存在 HighCPUUsage 告警", "payment-service", "only service"),
    ("只确认 payment-service 是否存在 HighCPUUsage 告警", "HighCPUUsage", "only alert"),
    ("只确认 order-service 是否存在 HikariCP 连接池耗尽", "HikariCP", "only topic"),
    ("只确认 order-service 是否存在 HighMemoryUsage 告警", "数据库慢查询", "not in the question's words"),
])
def test_an_exclusion_that_is_not_the_users_or_that_removes_the_target_is_refused(question, proposed, why):
    scope, refused = with_proposed_exclusions(read_scope(question, CATALOG), [proposed], question, CATALOG)
    assert scope.excluded_topics == () and len(refused) == 1 and why in refused[0]


def test_the_exclusions_a_planner_may_choose_are_the_names_the_question_spells():
    from program.evidence.scope import exclusion_candidates

    question = "Only confirm whether notification-service has a PodOOMKilled alert; leave order-service out of it."
    assert exclusion_candidates(question, CATALOG) == ("notification-service", "order-service")
    assert exclusion_candidates("除了 HikariCP 之外，只确认 order-service 是否存在 HighMemoryUsage 告警。", CATALOG) == (
        "HikariCP",)
    # The question's only service and only alert could never be excluded, so they are not offered.
    assert exclusion_candidates("只确认 order-service 是否存在 HighMemoryUsage 告警", CATALOG) == ()


def test_an_exclusion_the_planner_also_read_as_a_target_is_refused():
    question = "Only confirm whether api-gateway logged failures from its user-service upstream."
    scope, refused = with_proposed_exclusions(read_scope(question, CATALOG), ["api-gateway", "user-service"],
                                              question, CATALOG, ["api-gateway", "user-service", "failures"])
    assert scope.excluded_topics == ()
    assert refused == ["'api-gateway' is also read as a target", "'user-service' is also read as a target"]


def test_proposals_that_together_would_exclude_every_target_leave_one():
    question = "Only confirm whether api-gateway logged failures from its user-service upstream."
    scope, refused = with_proposed_exclusions(read_scope(question, CATALOG), ["user-service", "api-gateway"],
                                              question, CATALOG)
    assert scope.excluded_topics == ("user-service",)
    assert refused == ["'api-gateway' is the question's only service left"]


@pytest.mark.parametrize(("question", "topics"), [
    # The marker ends its clause, not its sentence; an item after it that would take the question's
    # only service or alert away is the asked clause, misread.
    ("Full GC 日志就别管了，只确认 order-service 是否存在 HighMemoryUsage 告警。", ("Full GC 日志",)),
    ("连接池先不考虑，只看 order-service 是否存在 HighMemoryUsage 告警", ("连接池",)),
    ("Ignore the GC logs, only check whether order-service has a HighMemoryUsage alert.", ("the GC logs",)),
    # The marker is the question's verb: the clause asks whether to exclude, or excluding the words
    # before it would leave the question no service or alert.
    ("order-service 的 HighMemoryUsage 告警如何排除？", ()),
    ("order-service 的 OOM 是否可以排除？", ()),
    ("只确认 order-service 的健康检查是否被跳过了。", ()),
    ("Is the HighMemoryUsage alert on order-service safe to ignore?", ()),
    ("Only confirm whether the HighMemoryUsage alert on order-service was ignored.", ()),
    ("Only confirm whether order-service skipped heartbeats.", ()),
    # A list before the marker; a dot or a colon inside a token.
    ("只确认 order-service 是否存在 HighMemoryUsage 告警，GC 和 HikariCP 就别管了。", ("GC", "HikariCP")),
    ("只确认 order-service 是否存在 HighErrorRate 告警，gc.log 就别管了。", ("gc.log",)),
    ("只确认 order-service 是否存在 HighErrorRate 告警，10:00 之前的日志就别管了。", ("10:00 之前的日志",)),
    # Particles and pronouns after the marker.
    ("只确认 order-service 是否存在 HighMemoryUsage 告警，Full GC 日志就别管了哈。", ("Full GC 日志",)),
    ("只确认 order-service 是否存在 HighMemoryUsage 告警，Full GC 日志别管它。", ("Full GC 日志",)),
])
def test_exclusions_read_from_the_clause(question, topics):
    assert read_scope(question, CATALOG).excluded_topics == topics


@pytest.mark.parametrize("question", [
    "Full GC 日志就别管了，只确认 order-service 是否存在 HighMemoryUsage 告警。",
    "order-service 的 HighMemoryUsage 告警如何排除？",
    "Is the HighMemoryUsage alert on order-service safe to ignore?",
    "只确认 order-service 是否存在 HighMemoryUsage 告警 Full GC 日志就别管了",
])
def test_the_asked_service_and_alert_stay_asked(question):
    names = question_names(question, CATALOG)
    assert names.services == ("order-service",) and names.alerts == ("HighMemoryUsage",)
    assert "highmemoryusage" not in read_scope(question, CATALOG).excluded_terms


@pytest.mark.parametrize(("question", "topics", "services"), [
    # A whole name excluded is excluded as written, even when it is the only service the question names.
    ("排查最近的 OOM，跳过 payment-service", ("payment-service",), ()),
    ("Which services have HighErrorRate firing? Skip user-service.", ("user-service",), ()),
    # A list runs past its clause only through clauses of whole names, and ends where the next marker begins.
    ("不要看 GC 日志，排查 order-service 慢请求，跳过 payment-service。", ("GC 日志", "payment-service"), ("order-service",)),
    ("Skip GC, check whether api-gateway latency is high. Don't look at user-service.", ("GC", "user-service"),
     ("api-gateway",)),
    ("只确认 order-service 是否有慢请求，跳过 HikariCP 连接池，重点看 p99", ("HikariCP 连接池",), ("order-service",)),
    ("只确认 order-service，不要看 GC 日志，内存为什么一直涨？", ("GC 日志",), ("order-service",)),
    ("只确认 order-service 是否存在 HighMemoryUsage 告警，不要看 GC 日志，HikariCP，数据库", ("GC 日志", "HikariCP", "数据库"),
     ("order-service",)),
    ("Only check whether order-service has a HighMemoryUsage alert; skip the Full GC, HikariCP and the database.",
     ("the Full GC", "HikariCP", "the database"), ("order-service",)),
    # A path is one item; "it" points back to the clause before; 吗 asks.
    ("只确认 api-gateway 的 5xx，跳过 /api/health", ("/api/health",), ("api-gateway",)),
    ("Only check order-service latency. Payment-service, skip it.", ("Payment-service",), ("order-service",)),
    ("只确认 order-service 的慢请求，payment-service 就别管了吗", (), ("order-service", "payment-service")),
])
def test_what_a_list_of_exclusions_holds_and_where_it_ends(question, topics, services):
    assert read_scope(question, CATALOG).excluded_topics == topics
    assert question_names(question, CATALOG).services == services


@pytest.mark.parametrize(("question", "topics"), [
    # A clause that directs after the list ends it: the asked topic is not excluded.
    ("order-service 为什么响应慢？不要看 CPU，关注连接池耗尽", ("CPU",)),
    ("Check whether payment-service has HighErrorRate; ignore the connection pool and OOM, focus on p99.",
     ("the connection pool", "OOM")),
    ("Only confirm whether order-service has SlowQuery; skip CPU, memory is fine, slow query logs matter.", ("CPU",)),
    # A marker told as what happened, or asked about, is no order.
    ("Why does order-service ignore the HikariCP connection timeout setting", ()),
    ("order-service 为什么跳过了连接池预热，导致启动后 p99 升高", ()),
    ("order-service 的 GC 日志里排除了哪些 Full GC 事件", ()),
    # An item that names what is left excludes nothing code can spell.
    ("Skip everything but HikariCP; is order-service's pool exhausted?", ()),
    ("只确认 order-service 是否存在 PodOOMKilled，内存溢出以外的别管", ()),
    ("Only check order-service memory, excluding anything not related to heap.", ()),
    # Markers built from a negation and a verb of attention.
    ("Full GC 日志先不看，只确认 order-service 是否存在 HighMemoryUsage 告警", ("Full GC 日志",)),
    ("忽略 CPU 和 OOM，只确认 order-service 的慢请求", ("CPU", "OOM")),
    ("CPU 暂不考虑，只确认 order-service 的慢请求", ("CPU",)),
])
def test_an_exclusion_is_an_order_about_named_things(question, topics):
    assert read_scope(question, CATALOG).excluded_topics == topics


@pytest.mark.parametrize(("question", "spellings"), [
    ("Only check order-service; skip the Full GC, HikariCP and the database.", {"database", "db", "数据库"}),
    ("Ignore the slow queries; only check order-service memory", {"slow query", "慢查询"}),
    ("只看 payment-service 的 CPU，不考虑内存和 GC", {"memory", "heap"}),
])
def test_an_excluded_topic_is_spelled_by_its_group_in_the_plural_with_an_article_or_in_two_characters(question,
                                                                                                       spellings):
    assert spellings <= set(read_scope(question, CATALOG).excluded_terms)

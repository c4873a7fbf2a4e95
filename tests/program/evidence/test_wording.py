"""What a text says in its own words: copies of its evidence set aside, and the language of the rest."""

import pytest

from program.evidence.wording import written_language, written_part

ALERT = "HighMemoryUsage firing, service=order-service, current=91%, threshold=85%, duration=15m; JVM heap usage 3.8GB/4GB"
ZH_LINE = "[11:17][WARN][order-service] 内存使用率过高: 91.0%, JVM堆内存: 3.8GB/4GB, GC次数: 128"
NO_HIT = "未找到匹配的日志 (no log lines matched query='Elasticsearch timeout', service='search-service', level=None)"
NAMES = ("order-service", "search-service", "HighMemoryUsage", "firing", "resolved")


@pytest.mark.parametrize(("text", "sources", "language"), [
    ("order-service 存在 HighMemoryUsage 告警（firing），JVM 堆使用率 3.8GB/4GB。", [ALERT], "zh"),
    ("order-service's HighMemoryUsage alert is firing: current=91%.", [ALERT], "en"),
    # A Chinese line quoted in an English claim is the line's language, not the claim's.
    ("order-service logged high memory usage: 内存使用率过高: 91.0%, JVM堆内存: 3.8GB/4GB", [ZH_LINE], "en"),
    # An English message quoted in a Chinese claim: the same.
    ("search-service 的日志显示 no log lines matched query='Elasticsearch timeout'", [NO_HIT], "zh"),
    ("No Elasticsearch timeout log lines were found for search-service.", [NO_HIT], "en"),
    ("在 search-service 的日志中未检索到 Elasticsearch 超时。", [NO_HIT], "zh"),
    # Nothing but copies and names: no language of its own.
    ("HighMemoryUsage firing, service=order-service, current=91%", [ALERT], None),
    ("search-service: 未找到匹配的日志", [NO_HIT], None),
])
def test_the_language_of_a_texts_own_words(text, sources, language):
    assert written_language(text, sources, NAMES) == language


def test_a_copy_is_blanked_and_the_writers_words_stay():
    line = "[10:01][ERROR][order-service] HikariPool-1 - Connection is not available, request timed out after 30000ms"
    own = written_part("order-service is not exhausted: HikariPool-1 - Connection is not available", [line])
    assert "Connection is not available" not in own and "is not exhausted" in own
    # A short shared run is the writer's own: "is not" alone is no copy.
    assert written_part("the pool is not full", [line]) == "the pool is not full"

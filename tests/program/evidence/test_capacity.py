"""A resource said to be at its limit, against the used/limit measures of the lines a claim cites."""

import pytest

from program.evidence.capacity import asserts_limit, below_limit, measures
from program.evidence.relevance import Target
from program.evidence.verdict import BELOW_LIMIT, CitedRef, claim_blockers
from contracts import Claim

HEALTHY = "[11:20][INFO][ledger-service] HikariCP pool stats: active=14/50, idle=36, waiting=0"
FULL = "[11:20][WARN][order-service] HikariCP pool stats: active=50/50, idle=0, waiting=32"
TIMED_OUT = "[11:20][ERROR][order-service] HikariPool-1 - Connection is not available, request timed out after 30000ms"


@pytest.mark.parametrize(("claim", "lines"), [
    # What the 1.5B wrote, and the verifier passed, of a healthy pool line.
    ("ledger-service 的连接池已耗尽：active=14/50, waiting=0。", [HEALTHY]),
    ("catalog-service logs a connection pool exhaustion: active=14/50, waiting=0.", [HEALTHY]),
    ("ledger-service 的连接池已耗尽。", [HEALTHY]),
    ("The payment callback retries are exhausted.", ["payment callback failed, retrying (1/3)"]),
    ("The disk on db-01 is full.", ["[2026/12/07 11:20] disk usage 45/100GB on /var/lib/postgresql"]),
    ("JVM heap 已用尽：3.8GB/4GB", ["JVM heap usage 3.8GB/4GB"]),
])
def test_a_resource_said_to_be_at_its_limit_below_every_measure_of_it_is_refused(claim, lines):
    assert below_limit(claim, lines)


@pytest.mark.parametrize(("claim", "lines"), [
    # Denied, hedged or asked: no assertion that the limit is reached.
    ("ledger-service 的连接池未耗尽：active=14/50, waiting=0。", [HEALTHY]),
    ("ledger-service 的连接池没有耗尽", [HEALTHY]),
    ("The pool is not exhausted: active=14/50.", [HEALTHY]),
    ("No connection pool exhaustion: active=14/50.", [HEALTHY]),
    ("JVM heap is nearly exhausted: 3.8GB/4GB", ["JVM heap usage 3.8GB/4GB"]),
    ("堆内存接近耗尽：3.8GB/4GB", ["JVM heap usage 3.8GB/4GB"]),
    ("检查连接池是否耗尽：active=14/50", [HEALTHY]),
    # A measure at its limit, or a line that says so in words.
    ("order-service 的连接池已耗尽：active=50/50", [FULL, TIMED_OUT]),
    ("order-service 的连接池已耗尽", [HEALTHY, FULL]),
    ("The retries are exhausted.", ["payment callback failed (3/3), giving up"]),
    ("The pool is exhausted.", ["HikariPool-1 - pool exhausted (total=14/50)"]),
    # No used/limit measure: the verifier judges it.
    ("order-service 的连接池已耗尽", [TIMED_OUT]),
    ("The disk is full.", ["write failed: No space left on device"]),
    # Full GC is no state of being full; a date or a path is no measure.
    ("order-service 发生 Full GC 15 次：heap 3.8GB/4GB", ["Full GC 15 times in 15m; JVM heap usage 3.8GB/4GB"]),
    ("The disk is full.", ["[2026/12/07 11:20] GET /api/v1/orders/123/items 507 Insufficient Storage"]),
])
def test_what_does_not_assert_a_limit_against_its_measures_is_left_to_the_verifier(claim, lines):
    assert below_limit(claim, lines) is None


def test_the_reading_of_words_and_measures():
    assert asserts_limit("连接池已耗尽，但没有线程池耗尽") == ["耗尽"]
    assert measures("active=14/50, heap 3.8GB/4GB, 2026/12/07, 3GB/4MB, ratio 1/0") == [
        ("14/50", 14.0, 50.0), ("3.8GB/4GB", 3.8, 4.0)]


def test_the_claim_check_blocks_it_and_says_why():
    claim = Claim.model_validate({
        "claim_id": "c1", "claim_type": "observation", "claim_text": "ledger-service 的连接池已耗尽：active=14/50, waiting=0。",
        "evidence_bindings": [{"tool_name": "query_logs", "source_invocation_id": 1, "raw_path": "$.logs[0]",
                               "evidence_excerpt": HEALTHY}]})
    ref = CitedRef(tool_name="query_logs", text=HEALTHY, context=HEALTHY, state=None, no_hit=False,
                   searched="query_logs(query='connection pool', service='ledger-service')", backfilled=False,
                   indirect=False)
    found = claim_blockers([claim], {"c1": [ref]}, Target(services=("ledger-service",), topics=()),
                           names=("ledger-service",))
    (finding,) = [f for f in found["c1"] if f.rule == BELOW_LIMIT]
    assert "'耗尽'" in finding.message and "14/50" in finding.message

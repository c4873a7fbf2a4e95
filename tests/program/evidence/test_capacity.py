"""A claim that says its resource is at its limit and gives the measure of its line that shows it is not."""

import pytest

from program.evidence.capacity import below_limit, measures
from program.evidence.relevance import Target
from program.evidence.verdict import BELOW_LIMIT, CitedRef, claim_blockers
from contracts import Claim

HEALTHY = "[11:20][INFO][ledger-service] HikariCP pool stats: active=14/50, idle=36, waiting=0"
FULL = "[11:20][WARN][order-service] HikariCP pool stats: active=50/50, idle=0, waiting=32"
RUNBOOK = "Connection pool exhaustion: HikariCP stats show active=50/50 and waiting threads; check for leaks."


@pytest.mark.parametrize(("claim", "lines"), [
    # What the 1.5B wrote, and the verifier passed, of a healthy pool line; and its English twin.
    ("ledger-service 的连接池已耗尽：active=14/50, waiting=0。", [HEALTHY]),
    ("catalog-service logs a connection pool exhaustion: active=14/50, waiting=0.", [HEALTHY]),
    ("The pool is at capacity (active = 14 / 50).", [HEALTHY]),
    ("Redis 内存已满：used_memory=3.8GB/4GB", ["[11:20][WARN][cache] memory report: used_memory=3.8GB/4GB"]),
])
def test_a_claim_that_says_the_limit_is_reached_with_a_measure_below_it_is_refused(claim, lines):
    assert below_limit(claim, lines)


@pytest.mark.parametrize(("claim", "lines"), [
    # Denied, hedged, asked, rejected, or over, anywhere in its sentence.
    ("ledger-service 的连接池未耗尽：active=14/50, waiting=0。", [HEALTHY]),
    ("The pool is not exhausted: active=14/50.", [HEALTHY]),
    ("堆内存接近耗尽：used=3.8GB/4GB", ["JVM heap used=3.8GB/4GB"]),
    ("检查连接池是否耗尽：active=14/50", [HEALTHY]),
    ("active=14/50 rules out exhaustion", [HEALTHY]),
    ("连接池耗尽不是根因：active=14/50", [HEALTHY]),
    ("此前连接池耗尽，现已恢复：active=14/50", [HEALTHY]),
    ("the pool was exhausted earlier but recovered, active=14/50", [HEALTHY]),
    # The measure in another clause, for another resource.
    ("连接池正常（active=14/50），但线程池已耗尽", [HEALTHY]),
    # No measure in the claim, or none named: the verifier judges it.
    ("ledger-service 的连接池已耗尽。", [HEALTHY]),
    ("集群 CPU 资源耗尽：0/5 nodes are available", ["0/5 nodes are available: 5 Insufficient cpu."]),
    ("The payment callback retries are exhausted (1/3).", ["payment callback failed, retrying (1/3)"]),
    # At its limit, or a line that says the resource ran out in words.
    ("order-service 的连接池已耗尽：active=50/50", [FULL]),
    ("Redis 内存已满：used_memory=3.8GB/4GB",
     ["OOM command not allowed when used memory > 'maxmemory', used_memory=3.8GB/4GB"]),
    ("The pool is exhausted: active=14/50", ["HikariPool-1 - pool exhausted, active=14/50"]),
    # Full GC is no state of being full; a date is no measure.
    ("order-service 发生 Full GC 15 次：heap=3.8GB/4GB", ["Full GC 15 times in 15m; heap=3.8GB/4GB"]),
])
def test_what_is_not_that_contradiction_is_left_to_the_verifier(claim, lines):
    assert below_limit(claim, lines) is None


def test_a_measure_is_a_named_use_against_a_limit():
    assert measures("active=14/50, heap: 3.8GB/4GB, 2026/12/07, x=3GB/4MB, ratio=1/0, 0/5 nodes") == [
        ("active=14/50", 14.0, 50.0), ("heap: 3.8GB/4GB", 3.8, 4.0)]


def _ref(text: str, indirect: bool = False) -> CitedRef:
    return CitedRef(tool_name="lookup_knowledge" if indirect else "query_logs", text=text, context=text, state=None,
                    no_hit=False, searched="query_logs(query='connection pool', service='ledger-service')",
                    backfilled=False, indirect=indirect)


def test_the_claim_check_blocks_it_says_why_and_a_runbook_beside_it_excuses_nothing():
    claim = Claim.model_validate({
        "claim_id": "c1", "claim_type": "observation", "claim_text": "ledger-service 的连接池已耗尽：active=14/50, waiting=0。",
        "evidence_bindings": [{"tool_name": "query_logs", "source_invocation_id": 1, "raw_path": "$.logs[0]",
                               "evidence_excerpt": HEALTHY}]})
    found = claim_blockers([claim], {"c1": [_ref(HEALTHY), _ref(RUNBOOK, indirect=True)]},
                           Target(services=("ledger-service",), topics=()), names=("ledger-service",))
    (finding,) = [f for f in found["c1"] if f.rule == BELOW_LIMIT]
    assert "'耗尽'" in finding.message and "active=14/50" in finding.message

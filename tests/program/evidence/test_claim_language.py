"""No check's decision depends on the language a claim is written in: the same claim, in English and
in Chinese, bound to the same evidence, gets the same gatekeeper result, the same code blockers and
the same verdict, for claims of a state, an absence, a number and a name, passed and refused. The
evidence stays as the tools returned it (the devset world's refs, some of them Chinese)."""

import pytest

from devset import devset_world, load_devset
from devset.gold import find_ref
from devset.recorded import checked_output, record, score_output
from contracts import ExecutorOutput
from tools.recorder import render_observations
from tools.functions import TOOLBOX

# (case, needles the claim cites, claim type, English text, Chinese text): each pair says the same thing.
PAIRS = [
    ("state_pair_cart_zh", ["HighErrorRate firing, service=cart-service"], "observation",
     "cart-service's HighErrorRate alert is firing: current=6.8%, threshold=5%.",
     "cart-service 的 HighErrorRate 告警正在触发：current=6.8%, threshold=5%。"),
    ("state_pair_cart_zh", ["HighErrorRate resolved, service=cart-service"], "observation",
     "cart-service's HighErrorRate alert is still firing.",
     "cart-service 的 HighErrorRate 告警仍在触发。"),
    ("state_pair_cart_zh", ["HighErrorRate firing, service=cart-service"], "observation",
     "cart-service's HighErrorRate alert is firing at 7.5%.",
     "cart-service 的 HighErrorRate 告警正在触发，错误率 7.5%。"),
    ("state_pair_cart_zh", ["HighErrorRate firing, service=cart-service"], "observation",
     "cart-service's HighErrorRate alert has recovered: current=6.8%.",
     "cart-service 的 HighErrorRate 告警已恢复：current=6.8%。"),
    ("other_service_cart_en", ["HighCPUUsage resolved, service=cart-service"], "observation",
     "cart-service's HighCPUUsage alert is resolved: current=64%, threshold=80%.",
     "cart-service 的 HighCPUUsage 告警已恢复（resolved）：current=64%, threshold=80%。"),
    ("excluded_same_log_cart_zh", ["on carts-db took 1500ms"], "observation",
     "cart-service logs show a slow query: SELECT * FROM items WHERE id=? on carts-db took 1500ms.",
     "cart-service 日志中有慢查询：SELECT * FROM items WHERE id=? on carts-db took 1500ms。"),
    ("excluded_same_log_cart_zh", ["HikariCP"], "observation",
     "cart-service logs show a connection pool line.",
     "cart-service 日志中有连接池相关记录。"),
    ("some_lines_cart_zh", ["GET /api/v1/cart/checkout took 3300ms"], "observation",
     "No slow requests were found on /api/v1/cart/checkout for cart-service.",
     "未检索到 cart-service 的 /api/v1/cart/checkout 慢请求。"),
    ("negative_cart_zh", ["502"], "negative_observation",
     "No 502 errors were found in cart-service logs.",
     "cart-service 日志中未检索到 502 错误。"),
    ("negative_cart_zh", ["502"], "observation",
     "cart-service logs show 502 errors.",
     "cart-service 日志中有 502 错误。"),
    ("near_miss_cart_en", ["HikariCP pool stats"], "observation",
     "cart-service's connection pool is not exhausted: HikariCP pool stats show active=9/40, waiting=0.",
     "cart-service 的连接池未耗尽：HikariCP pool stats 显示 active=9/40, waiting=0。"),
    ("near_miss_cart_en", ["HikariCP pool stats"], "observation",
     "cart-service logs show an OutOfMemoryError: active=9/40.",
     "cart-service 日志中有 OutOfMemoryError：active=9/40。"),
    # A name the evidence does not hold: another service, another alert.
    ("state_pair_cart_zh", ["HighErrorRate firing, service=cart-service"], "observation",
     "payment-service's HighErrorRate alert is firing: current=6.8%.",
     "payment-service 的 HighErrorRate 告警正在触发：current=6.8%。"),
    ("state_pair_cart_zh", ["HighErrorRate firing, service=cart-service"], "observation",
     "cart-service's HighLatency alert is firing: current=6.8%.",
     "cart-service 的 HighLatency 告警正在触发：current=6.8%。"),
]


@pytest.fixture(scope="module")
def evidence():
    wanted = {case for case, *_ in PAIRS}
    with devset_world():
        yield record([c for c in load_devset() if c["case_id"] in wanted], TOOLBOX)


def bound(recorded, needles: list[str], claim_type: str, text: str) -> ExecutorOutput:
    bindings = []
    for needle in needles:
        ref = next((r for tool in TOOLBOX.names for r in [_find(recorded, needle, tool)] if r), None)
        bindings.append({"tool_name": ref.tool_name, "source_invocation_id": ref.invocation_id,
                         "raw_path": ref.raw_path, "evidence_excerpt": ref.text})
    return ExecutorOutput.model_validate({"claims": [{"claim_id": "claim-1", "claim_type": claim_type,
                                                      "claim_text": text, "evidence_bindings": bindings}]})


def _find(recorded, needle, tool):
    # Among every ref, those code sets aside included: a claim may still cite one, and is refused.
    try:
        return find_ref(render_observations(recorded.invocations), needle, tool)
    except LookupError:
        return None


def decided(recorded, output: ExecutorOutput) -> tuple:
    checked = checked_output(recorded, output)
    blockers = sorted(f.rule for findings in checked.blockers.values() for f in findings)
    scored = score_output(recorded, output)
    return checked.gate.status, checked.gate.severity, blockers, [c.claim_id for c in checked.verifiable], \
        scored.verdict


@pytest.mark.parametrize(("case", "needles", "claim_type", "english", "chinese"), PAIRS,
                         ids=[f"{p[0]}-{n}" for n, p in enumerate(PAIRS)])
def test_the_same_claim_in_english_and_chinese_gets_the_same_decisions(evidence, case, needles, claim_type,
                                                                       english, chinese):
    recorded = evidence[case]
    assert decided(recorded, bound(recorded, needles, claim_type, english)) == \
        decided(recorded, bound(recorded, needles, claim_type, chinese))


def test_the_pairs_cover_claims_code_passes_and_claims_code_blocks(evidence):
    """So that equal decisions are not only "everything passed" twice."""
    outcomes = [decided(evidence[case], bound(evidence[case], needles, kind, english))
                for case, needles, kind, english, _ in PAIRS]
    blocked = {rule for outcome in outcomes for rule in outcome[2]}
    assert sum(not outcome[2] for outcome in outcomes) >= 4
    assert {"verdict.state_conflict", "verdict.excluded_topic", "verdict.absence_on_hit",
            "verdict.ungrounded_number", "verdict.ungrounded_topic", "verdict.ungrounded_name"} <= blocked, blocked

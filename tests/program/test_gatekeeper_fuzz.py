"""Property tests: the gatekeeper never crashes, and never passes an excerpt that is not in the ref."""

import json
import re
import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from program import gatekeeper
from program.matching import match_excerpt
from signatures.contracts import ExecutorOutput, ToolInvocation

REF = (
    "[11:17][WARN][order-service] 内存使用率过高: 91.0%, JVM堆内存: 3.8GB/4GB, GC次数: 128; "
    "HikariPool-1 - Connection is not available, request timed out after 30000ms"
)
INVOCATION = ToolInvocation.model_validate(
    {"id": 7, "session_id": "s", "tool_name": "query_logs",
     "retrieval_details": {"evidence_status": "supported", "evidence_refs": [{"raw_path": "$.logs[0]", "text": REF}]}}
)
text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=120)
mixed = st.text(alphabet="abcXYZ019.%:/- =,内存使用率过高未不…", max_size=60)


def _significant(s: str) -> str:
    """Letters and digits only, case-folded: what no normalisation may invent or change."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", s).casefold() if ch.isalnum())


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(excerpt=st.one_of(text, mixed), ref=st.one_of(text, mixed, st.just(REF)))
def test_random_excerpts_never_crash_and_pass_only_when_contained(excerpt, ref):
    result = match_excerpt(excerpt, ref)
    if result.ok:
        pieces = [p for p in re.split(r"\.{3,}|…+", unicodedata.normalize("NFKC", excerpt)) if p.strip()]
        for piece in pieces:
            assert _significant(piece) in _significant(ref)


@settings(max_examples=300, deadline=None)
@given(start=st.integers(0, len(REF) - 1), length=st.integers(6, 60), data=st.data())
def test_changing_a_digit_in_a_real_excerpt_never_passes(start, length, data):
    excerpt = REF[start : start + length]
    digits = [i for i, ch in enumerate(excerpt) if ch.isdigit()]
    if not digits:
        return
    i = data.draw(st.sampled_from(digits))
    replacement = data.draw(st.sampled_from([d for d in "0123456789" if d != excerpt[i]]))
    tampered = excerpt[:i] + replacement + excerpt[i + 1 :]
    if _significant(tampered) in _significant(REF):
        return  # the tampered digits happen to occur elsewhere in the ref
    assert not match_excerpt(tampered, REF).ok


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(payload=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=20,
))
def test_arbitrary_json_is_rejected_by_the_contract_or_checked_without_crashing(payload):
    try:
        output = ExecutorOutput.model_validate_json(json.dumps(payload))
    except ValueError:
        return
    result = gatekeeper.check(output, [INVOCATION], "s")
    assert result.status in ("pass", "fail")


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(excerpt=text, path=st.sampled_from(["$.logs[0]", "$.logs[1]", "", "$.alerts[0]", "garbage"]),
       inv_id=st.sampled_from([7, 8, -1]), tool=st.sampled_from(["query_logs", "query_metrics", "x"]))
def test_random_bindings_never_pass_unless_the_excerpt_is_real(excerpt, path, inv_id, tool):
    output = ExecutorOutput.model_validate({"claims": [{
        "claim_id": "c", "claim_type": "observation", "claim_text": "t",
        "evidence_bindings": [{"tool_name": tool, "source_invocation_id": inv_id, "raw_path": path,
                               "evidence_excerpt": excerpt}]}]})
    result = gatekeeper.check(output, [INVOCATION], "s")
    if result.status == "pass":
        assert (tool, inv_id, path) == ("query_logs", 7, "$.logs[0]")
        assert match_excerpt(excerpt, REF).ok

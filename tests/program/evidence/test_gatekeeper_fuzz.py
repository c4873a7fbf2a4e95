"""Property tests: the gatekeeper never crashes, and never passes an excerpt that is not in the ref."""

import re
import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from program.evidence import gatekeeper
from program.evidence.matching import match_excerpt
from contracts import ExecutorOutput, ToolInvocation
from tools.functions import TOOLBOX

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


TAMPER = {
    # one character that changes what the excerpt says, by class
    "comparison": lambda t, i: t[:i] + "≠" + t[i + 1:] if t[i] == "=" else None,
    "question": lambda t, i: t + "?" if i == len(t) - 1 else None,
    "superscript": lambda t, i: t[:i] + "⁰¹²³⁴⁵⁶⁷⁸⁹"[int(t[i])] + t[i + 1:] if t[i].isdigit() else None,
    "combining": lambda t, i: t[:i + 1] + "\u0338" + t[i + 1:] if t[i].isalnum() else None,
    "digit": lambda t, i: t[:i] + str((int(t[i]) + 1) % 10) + t[i + 1:] if t[i].isdigit() else None,
}


def _real_refs() -> list[str]:
    from tools.functions import alert_text, log_text, query_logs, query_metrics

    refs = [alert_text(a) for a in query_metrics()["alerts"]]
    refs += [log_text(r) for r in query_logs("order-service")["logs"] + query_logs("user-service")["logs"]]
    return refs


REAL_REFS = _real_refs()


def _binding_output(excerpt: str) -> ExecutorOutput:
    return ExecutorOutput.model_validate({"claims": [{
        "claim_id": "c", "claim_type": "observation", "claim_text": "t",
        "evidence_bindings": [{"tool_name": "query_logs", "source_invocation_id": 7, "raw_path": "$.logs[0]",
                               "evidence_excerpt": excerpt}]}]})


def _invocation(ref: str) -> ToolInvocation:
    return ToolInvocation.model_validate(
        {"id": 7, "session_id": "s", "tool_name": "query_logs",
         "retrieval_details": {"evidence_status": "supported", "evidence_refs": [{"raw_path": "$.logs[0]", "text": ref}]}})


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(ref=st.sampled_from(REAL_REFS), data=st.data())
def test_a_real_excerpt_passes_and_every_tampered_copy_is_rejected(ref, data):
    start = data.draw(st.integers(0, max(0, len(ref) - 20)))
    excerpt = ref[start:]  # a suffix never cuts a token at its end
    if not match_excerpt(excerpt, ref).ok:
        return  # the suffix starts inside a token or right after a negation: not a quote the LM may give
    assert gatekeeper.check(_binding_output(excerpt), [_invocation(ref)], "s", toolbox=TOOLBOX).status == "pass"
    kind = data.draw(st.sampled_from(sorted(TAMPER)))
    position = data.draw(st.integers(0, len(excerpt) - 1))
    tampered = TAMPER[kind](excerpt, position)
    if tampered is None or _significant(tampered) in _significant(ref) and kind == "digit":
        return
    result = gatekeeper.check(_binding_output(tampered), [_invocation(ref)], "s", toolbox=TOOLBOX)
    assert result.severity == "reject" and "evidence.excerpt_mismatch" in result.failed_rules, (kind, tampered)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(excerpt=text, path=st.sampled_from(["$.logs[0]", "$.logs[1]", "", "$.alerts[0]", "garbage"]),
       inv_id=st.sampled_from([7, 8, -1]), tool=st.sampled_from(["query_logs", "query_metrics", "x"]))
def test_random_bindings_never_pass_unless_the_excerpt_is_real(excerpt, path, inv_id, tool):
    output = ExecutorOutput.model_validate({"claims": [{
        "claim_id": "c", "claim_type": "observation", "claim_text": "t",
        "evidence_bindings": [{"tool_name": tool, "source_invocation_id": inv_id, "raw_path": path,
                               "evidence_excerpt": excerpt}]}]})
    result = gatekeeper.check(output, [INVOCATION], "s", toolbox=TOOLBOX)
    if result.status == "pass":
        assert (tool, inv_id, path) == ("query_logs", 7, "$.logs[0]")
        assert match_excerpt(excerpt, REF).ok

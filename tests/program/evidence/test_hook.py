from program.evidence.hook import VerifierInputHook, backfill
from program.evidence.trace_summary import build_trace_summary
from contracts import ExecutorOutput, ParseStatus
from tools.functions import TOOLBOX

VALID = ParseStatus(status="valid", detail="parsed")


def _output(*bindings, claim_type="observation"):
    return ExecutorOutput.model_validate(
        {"claims": [{"claim_id": "c1", "claim_type": claim_type, "claim_text": "t", "evidence_bindings": list(bindings)}]}
    )


def test_backfill_fills_only_a_unique_candidate_and_never_raw_path(recorder, store):
    metrics = recorder.call("query_metrics", service="order-service")
    recorder.call("query_logs", query="内存", service="order-service")
    recorder.call("query_logs", query="Full GC", service="order-service")
    output = _output(
        {"tool_name": "query_metrics", "evidence_excerpt": "HighMemoryUsage firing, service=order-service"},
        {"tool_name": "query_logs", "raw_path": "$.logs[0]", "evidence_excerpt": "内存使用率: 86.2%"},
    )
    patched, filled, warnings = backfill(output, store.list_invocations("sess-test"))
    first, second = patched.claims[0].evidence_bindings
    assert first.source_invocation_id == metrics.id and first.raw_path is None
    assert second.source_invocation_id is None
    assert filled == [("c1", 0)]
    assert [w.rule for w in warnings] == ["evidence.invocation_auto_backfill"]
    assert "raw_path remains missing" in warnings[0].message
    assert output.claims[0].evidence_bindings[0].source_invocation_id is None  # input left untouched


def test_backfilled_binding_without_raw_path_can_never_pass(recorder, store):
    recorder.call("query_metrics", service="order-service")
    vi = VerifierInputHook(store, TOOLBOX).run(
        session_id="sess-test", original_query="q", parse_status=VALID,
        executor_output=_output({"tool_name": "query_metrics", "evidence_excerpt": "HighMemoryUsage firing, service=order-service"}),
    )
    gate = vi.gatekeeper_result
    assert gate.status == "fail" and gate.severity == "low_confid"
    assert gate.failed_rules == ["evidence.raw_path_missing"]
    assert gate.checked_bindings[0].backfilled is True
    assert [w.rule for w in gate.warnings] == ["evidence.invocation_auto_backfill"]


def test_ambiguous_backfill_is_low_confid(recorder, store):
    recorder.call("query_logs", query="内存", service="order-service")
    recorder.call("query_logs", query="HikariCP")
    vi = VerifierInputHook(store, TOOLBOX).run(
        session_id="sess-test", original_query="q", parse_status=VALID,
        executor_output=_output({"tool_name": "query_logs", "raw_path": "$.logs[0]", "evidence_excerpt": "内存使用率: 86.2%"}),
    )
    assert vi.gatekeeper_result.failed_rules == ["evidence.invocation_missing"]
    assert vi.gatekeeper_result.warnings == []


def test_fabricated_binding_after_backfill_is_still_reject(recorder, store):
    recorder.call("query_metrics", service="order-service")
    vi = VerifierInputHook(store, TOOLBOX).run(
        session_id="sess-test", original_query="q", parse_status=VALID,
        executor_output=_output({"tool_name": "query_metrics", "raw_path": "$.alerts[0]", "evidence_excerpt": "current=95%, threshold=85%"}),
    )
    assert vi.gatekeeper_result.severity == "reject"


def test_foreign_session_ids_are_looked_up_so_they_read_as_foreign(store):
    from tools.recorder import ToolInvocationRecorder

    other = ToolInvocationRecorder(store, "other", TOOLBOX).call("query_metrics", service="order-service")
    vi = VerifierInputHook(store, TOOLBOX).run(
        session_id="mine", original_query="q", parse_status=VALID,
        executor_output=_output({"tool_name": "query_metrics", "source_invocation_id": other.id, "raw_path": "$.alerts[0]",
                                 "evidence_excerpt": "HighMemoryUsage firing, service=order-service"}),
    )
    assert vi.gatekeeper_result.failed_rules == ["evidence.invocation_session"]


def test_malformed_parse_status_caps_at_low_confid(recorder, store):
    inv = recorder.call("query_metrics", service="order-service")
    vi = VerifierInputHook(store, TOOLBOX).run(
        session_id="sess-test", original_query="q", parse_status=ParseStatus(status="repaired", detail="dropped claim 2"),
        executor_output=_output({"tool_name": "query_metrics", "source_invocation_id": inv.id, "raw_path": "$.alerts[0]",
                                 "evidence_excerpt": "HighMemoryUsage firing, service=order-service"}),
    )
    gate = vi.gatekeeper_result
    assert gate.severity == "low_confid" and gate.failed_rules == ["executor.output_malformed"]
    assert gate.checked_bindings[0].status == "pass"


def test_negative_observation_on_a_no_hit_passes_the_gatekeeper(recorder, store):
    inv = recorder.call("query_logs", query="HikariCP", service="inventory-service")
    vi = VerifierInputHook(store, TOOLBOX).run(
        session_id="sess-test", original_query="q", parse_status=VALID,
        executor_output=_output({"tool_name": "query_logs", "source_invocation_id": inv.id,
                                 "evidence_excerpt": inv.retrieval_details.message}, claim_type="negative_observation"),
    )
    assert vi.gatekeeper_result.status == "pass"
    (entry,) = vi.tool_trace_summary
    assert (entry.evidence_level, entry.no_hit_invocation_count, entry.invocation_count) == ("none", 1, 1)


def test_trace_summary_levels_and_counts(recorder, store):
    recorder.call("query_metrics", service="order-service")
    recorder.call("query_logs", query="内存", service="order-service")
    recorder.call("query_logs", query="HikariCP", service="inventory-service")
    recorder.call("lookup_knowledge", query="HikariCP")
    recorder.call("query_logs", query=3)
    entries = {e.tool_name: e for e in build_trace_summary(store.list_invocations("sess-test"), TOOLBOX)}
    assert entries["query_metrics"].evidence_level == "direct"
    assert entries["lookup_knowledge"].evidence_level == "indirect"
    logs = entries["query_logs"]
    assert (logs.evidence_level, logs.invocation_count, logs.no_hit_invocation_count) == ("direct", 3, 1)
    assert logs.output_summary.startswith("logs (direct): ") and "no_hit" in logs.output_summary
    assert "(+3 more refs)" in logs.output_summary and "failed: query must be a string" in logs.output_summary
    assert [e.trace_ref for e in build_trace_summary(store.list_invocations("sess-test"), TOOLBOX)] == ["trace-1", "trace-2", "trace-3"]

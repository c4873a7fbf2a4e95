"""Each tool is declared once (tools/declaration.py): a fourth tool, declared here and nowhere else,
works end to end."""

import pytest

from devset.gold import refs_in
from program.entry.api import diagnose
from program.evidence.gatekeeper import check
from program.lm.adapter import tool_call_patch
from program.stages.pipeline import Diagnosis
from contracts import ExecutorOutput
from signatures.diagnosis import PlanDiagnosis, for_toolbox
from tests.support.good_lm import good_lm
from tools.calls import tool_call_contract
from tools.catalog import active_catalog
from tools.declaration import Toolbox, ToolDeclaration
from tools.functions import QUERY_LOGS, TOOLBOX
from tools.recorder import ToolInvocationRecorder

SPANS = {"abc123": [{"trace": "abc123", "span": "POST /api/v1/orders", "service": "order-service",
                     "duration_ms": 4200, "status": "error"}]}


def query_traces(trace_id: str, service: str | None = None) -> dict:
    """Spans of one distributed trace, slowest first."""
    spans = [s for s in SPANS.get(trace_id, []) if service is None or s["service"] == service]
    return {"success": True, "spans": spans, "total": len(spans), "source": "test traces",
            "searched": {"trace_id": trace_id, "service": service},
            "message": f"{len(spans)} span(s)" if spans else f"no spans for trace {trace_id!r}"}


QUERY_TRACES = ToolDeclaration(
    function=query_traces,
    items="spans",
    evidence="direct",
    render=lambda s: f"trace {s['trace']} span {s['span']} of {s['service']}: latency {s['duration_ms']}ms, "
                     f"status={s['status']}",
    guide="returns the spans of one trace with their latency.",
    lm_arguments=("trace_id", "service"),
    catalog_values={"service": "services"},
    arg_desc={"trace_id": "the trace id"},
)
BOX = TOOLBOX.with_tools(QUERY_TRACES)
QUESTION = "只确认 order-service 的 trace abc123 是否有慢请求"
PLAN = {"plan": {"target_services": ["order-service"], "topics": ["慢请求"]},
        "tool_calls": [{"tool_name": "query_traces", "trace_id": "abc123", "service": "order-service"}]}


def cite_spans(raw_path=None):
    def executor(observations, attempt, user):
        (ref,) = [r for r in refs_in(observations) if r.tool_name == "query_traces"]
        return {"claims": [{"claim_id": "claim-1", "claim_type": "observation",
                            "claim_text": "order-service 的 trace abc123 span POST /api/v1/orders latency 4200ms, "
                                          "status=error",
                            "evidence_bindings": [{"tool_name": "query_traces", "source_invocation_id": ref.invocation_id,
                                                   "raw_path": raw_path or ref.raw_path, "evidence_excerpt": ref.text}]}],
                "hypotheses": [], "missing_info": [], "recommended_actions": []}

    return executor


def _run(cases, store, executor):
    lm = good_lm(cases["hikaricp_positive"], planner=lambda user: PLAN, executor=executor)
    return diagnose(QUESTION, lm=lm, db=store, compiled=False, program=Diagnosis(store, toolbox=BOX))


def test_a_fourth_tool_declared_here_runs_end_to_end(cases, store):
    result = _run(cases, store, cite_spans())
    assert result.verdict == "PASS" and result.gatekeeper_result.status == "pass"
    (invocation,) = store.list_invocations(result.session_id)
    assert (invocation.tool_name, invocation.input, invocation.source) == (
        "query_traces", {"trace_id": "abc123", "service": "order-service"}, "test traces")
    assert [r.raw_path for r in invocation.retrieval_details.evidence_refs] == ["$.spans[0]"]
    record = store.get_session(result.session_id)
    (summary,) = record.tool_trace_summary
    assert summary.evidence_level == "direct" and summary.output_summary.startswith("spans (direct): #")
    assert record.tool_requests == [[{"tool_name": "query_traces", "trace_id": "abc123", "service": "order-service"}]]


def test_the_fourth_tools_locator_is_enforced_by_the_gatekeeper(cases, store):
    result = _run(cases, store, cite_spans(raw_path="$.logs[0]"))
    assert result.verdict == "REJECT"
    (error,) = {e.message for e in result.gatekeeper_result.errors if e.rule == "evidence.raw_path"}
    assert "cannot come from query_traces, whose refs are $.spans[i]" in error


def test_the_fourth_tool_reaches_the_prompt_the_contract_and_the_grammar():
    instructions = for_toolbox(PlanDiagnosis, BOX).instructions
    assert "query_traces(trace_id, service) returns the spans of one trace with their latency." in instructions
    assert "query_traces" not in PlanDiagnosis.instructions
    call = tool_call_contract(BOX)(tool_name="query_traces", trace_id="t-1", service="order-service", query="ignored")
    assert call.arguments() == {"trace_id": "t-1", "service": "order-service"}
    with pytest.raises(ValueError):
        tool_call_contract(TOOLBOX)(tool_name="query_traces", trace_id="t-1")
    schema = {"properties": {"tool_calls": {"type": "array"}}, "$defs": {"ToolCall": {}}}
    shapes = tool_call_patch(active_catalog(), BOX)(schema)["$defs"]["ToolCall"]["anyOf"]
    traces = next(s for s in shapes if s["properties"]["tool_name"] == {"const": "query_traces"})
    assert traces["properties"]["trace_id"] == {"type": "string", "maxLength": 80}
    assert "order-service" in traces["properties"]["service"]["anyOf"][0]["enum"]


def test_a_toolbox_without_the_tool_does_not_know_its_citations(store):
    invocation = ToolInvocationRecorder(store, "s", BOX).call("query_traces", trace_id="abc123")
    output = ExecutorOutput.model_validate({"claims": [{
        "claim_id": "c1", "claim_type": "observation", "claim_text": "x",
        "evidence_bindings": [{"tool_name": "query_traces", "source_invocation_id": invocation.id,
                               "raw_path": "$.spans[0]", "evidence_excerpt": "latency 4200ms"}]}]})
    assert check(output, [invocation], "s", toolbox=BOX).status == "pass"
    assert "evidence.tool_name" in check(output, [invocation], "s", toolbox=TOOLBOX).failed_rules


@pytest.mark.parametrize(("declarations", "error"), [
    ((QUERY_LOGS, QUERY_LOGS), "declared twice"),
    ((QUERY_LOGS, ToolDeclaration(function=query_traces, items="logs", evidence="direct", render=str, guide="",
                                  lm_arguments=("trace_id",))), "same output list"),
])
def test_a_toolbox_refuses_ambiguous_declarations(declarations, error):
    with pytest.raises(ValueError, match=error):
        Toolbox(declarations)


@pytest.mark.parametrize(("arguments", "catalog_values", "error"), [
    (("span_id",), {}, "not arguments of the function"),
    (("trace_id",), {"trace_id": "trace_ids"}, "must map lm_arguments to Catalog fields"),
    (("trace_id",), {"service": "services"}, "must map lm_arguments to Catalog fields"),
])
def test_a_declaration_names_only_real_arguments_and_catalog_fields(arguments, catalog_values, error):
    with pytest.raises(ValueError, match=error):
        ToolDeclaration(function=query_traces, items="spans", evidence="direct", render=str, guide="",
                        lm_arguments=arguments, catalog_values=catalog_values)

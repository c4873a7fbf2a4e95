import dspy

from program.adapter import citation_patch, tool_call_patch
from signatures.contracts import EvidenceBinding, PlannerOutput, ToolCall
from signatures.diagnosis import CiteEvidence, GatherEvidence
from tools.recorder import ToolInvocationRecorder


def _schema(signature):
    from dspy.adapters.json_adapter import _get_structured_outputs_response_format

    return _get_structured_outputs_response_format(signature).model_json_schema()


def test_tool_call_shapes_follow_the_field_order_demos_are_written_in():
    schema = tool_call_patch(["order-service"], ["HighMemoryUsage"])(_schema(GatherEvidence))
    shapes = schema["$defs"]["ToolCall"]["anyOf"]
    assert [s["properties"]["tool_name"]["const"] for s in shapes] == ["query_metrics", "query_logs", "lookup_knowledge"]
    for shape in shapes:
        assert list(shape["properties"]) == list(ToolCall.model_fields)
    metrics = shapes[0]["properties"]
    assert metrics["query"] == {"type": "null"} and metrics["service"]["anyOf"][0]["enum"] == ["order-service"]
    assert schema["properties"]["tool_calls"]["maxItems"] == 4


def test_citations_are_limited_to_real_triples(store):
    recorder = ToolInvocationRecorder(store, "s")
    metrics = recorder.call("query_metrics", service="order-service")
    empty = recorder.call("query_logs", query="HikariCP", service="inventory-service")
    schema = citation_patch(recorder.invocations)(_schema(CiteEvidence))
    options = schema["$defs"]["EvidenceBinding"]["anyOf"]
    triples = [(o["properties"]["tool_name"]["const"], o["properties"]["source_invocation_id"]["const"],
                o["properties"]["raw_path"].get("const")) for o in options]
    assert triples == [("query_metrics", metrics.id, "$.alerts[0]"), ("query_logs", empty.id, None)]
    assert all(list(o["properties"]) == list(EvidenceBinding.model_fields) for o in options)
    assert schema["properties"]["claims"]["maxItems"] == 3


def test_the_patched_schema_compiles_to_a_llama_grammar(store):
    from llama_cpp import LlamaGrammar
    import json

    recorder = ToolInvocationRecorder(store, "s")
    recorder.call("query_logs", query="内存", service="order-service")
    for schema in (citation_patch(recorder.invocations)(_schema(CiteEvidence)),
                   tool_call_patch(["a"], ["B"])(_schema(GatherEvidence))):
        assert LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False) is not None


def test_adapter_applies_the_patch_only_inside_the_context(store):
    from program.adapter import ConstrainedJSONAdapter, constrained
    from tests.support.scripted import ScriptedEngine

    seen = []

    class Recording(ScriptedEngine):
        def complete(self, request):
            seen.append(request.config.response_format["schema"])
            return super().complete(request)

    engine = Recording(lambda stage, user, demos: {"tool_calls": []})
    lm = dspy.LM("scripted/test", engine=engine, cache=False)
    predict = dspy.Predict(GatherEvidence)
    plan = PlannerOutput(scope="narrow")
    with dspy.context(lm=lm, adapter=ConstrainedJSONAdapter()):
        predict(question="q", plan=plan, observations="none")
        with constrained(tool_call_patch(["x"], ["Y"])):
            predict(question="q", plan=plan, observations="none")
    assert "anyOf" not in seen[0]["$defs"]["ToolCall"]
    assert "anyOf" in seen[1]["$defs"]["ToolCall"]

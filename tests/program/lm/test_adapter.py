import dspy

from program.evidence.matching import match_excerpt
from program.lm.adapter import citation_patch, ref_spans, tool_call_patch
from signatures.contracts import EvidenceBinding, PlannerOutput
from signatures.diagnosis import CiteEvidence, GatherEvidence, PlanDiagnosis
from tools.catalog import Catalog
from tools.functions import TOOLBOX
from tools.recorder import ToolInvocationRecorder

CATALOG = Catalog(services=("order-service",), alert_names=("HighMemoryUsage",), log_levels=("INFO", "WARN"),
                  alert_states=("firing", "resolved"), synonyms={})


def _schema(signature):
    from dspy.adapters.json_adapter import _get_structured_outputs_response_format

    return _get_structured_outputs_response_format(signature).model_json_schema()


def test_tool_call_shapes_carry_only_their_own_arguments_in_declared_order():
    schema = tool_call_patch(CATALOG, TOOLBOX)(_schema(GatherEvidence))
    shapes = schema["$defs"]["ToolCall"]["anyOf"]
    assert [s["properties"]["tool_name"]["const"] for s in shapes] == ["query_metrics", "query_logs", "lookup_knowledge"]
    assert [list(shape["properties"]) for shape in shapes] == [
        ["tool_name", "service", "alert_name", "state"], ["tool_name", "query", "service", "level"], ["tool_name", "query"]]
    assert shapes[1]["properties"]["query"] == {"type": "string", "maxLength": 80}
    metrics = shapes[0]["properties"]
    assert "query" not in metrics and metrics["service"]["anyOf"][0]["enum"] == ["order-service"]
    assert shapes[1]["properties"]["level"]["anyOf"][0]["enum"] == ["INFO", "WARN"]
    assert schema["properties"]["tool_calls"]["maxItems"] == 4 and "minItems" not in schema["properties"]["tool_calls"]


def test_the_planner_must_make_at_least_one_call():
    schema = tool_call_patch(CATALOG, TOOLBOX, min_calls=1)(_schema(PlanDiagnosis))
    assert schema["properties"]["tool_calls"]["minItems"] == 1


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
    assert schema["properties"]["claims"]["maxItems"] == 4
    assert "maxItems" not in schema["properties"]["missing_info"]  # the design does not limit missing_info
    narrow = citation_patch(recorder.invocations, narrow=True)(_schema(CiteEvidence))
    assert narrow["properties"]["claims"]["maxItems"] == 2


def test_an_excerpt_is_chosen_from_the_real_spans_of_its_ref(store):
    recorder = ToolInvocationRecorder(store, "s")
    alert = recorder.call("query_metrics", service="order-service", alert_name="HighMemoryUsage")
    empty = recorder.call("query_logs", query="HikariCP", service="inventory-service")
    schema = citation_patch(recorder.invocations)(_schema(CiteEvidence))
    by_path = {o["properties"]["raw_path"].get("const"): o["properties"]["evidence_excerpt"]["enum"]
               for o in schema["$defs"]["EvidenceBinding"]["anyOf"]}
    text = alert.retrieval_details.evidence_refs[0].text
    assert by_path["$.alerts[0]"][0] == text  # the whole ref first, then its clauses
    assert "JVM heap usage 3.8GB/4GB" in by_path["$.alerts[0]"]
    assert all(span in text and match_excerpt(span, text).ok for span in by_path["$.alerts[0]"])
    assert by_path[None] == [empty.retrieval_details.message]


def test_a_clause_the_gatekeeper_would_refuse_is_not_offered():
    text = "pool check for replica-2 did not; succeed; waiting=0"
    spans = ref_spans(text)
    assert spans[0] == text and "waiting=0" in spans
    # "succeed" alone would drop the negation before it: the gatekeeper refuses it, so it is not offered
    assert not match_excerpt("succeed", text).ok and "succeed" not in spans


def test_the_patched_schema_compiles_to_a_llama_grammar(store):
    import json

    from llama_cpp import LlamaGrammar

    recorder = ToolInvocationRecorder(store, "s")
    recorder.call("query_logs", query="内存", service="order-service")
    from program.lm.engine import schema_grammar_text

    for schema in (citation_patch(recorder.invocations)(_schema(CiteEvidence)),
                   tool_call_patch(CATALOG, TOOLBOX, min_calls=1)(_schema(PlanDiagnosis))):
        grammar = schema_grammar_text(json.dumps(schema))
        assert LlamaGrammar.from_string(grammar, verbose=False) is not None
        # Qwen writes indented JSON: the grammar must let it break lines
        assert 'space ::= | " " | "\\n"' in grammar


def test_adapter_applies_the_patch_only_inside_the_context(store):
    from program.lm.adapter import ConstrainedJSONAdapter, constrained
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
        with constrained(tool_call_patch(CATALOG, TOOLBOX)):
            predict(question="q", plan=plan, observations="none")
    assert "anyOf" not in seen[0]["$defs"]["ToolCall"]
    assert "anyOf" in seen[1]["$defs"]["ToolCall"]


def test_a_planner_without_exclusion_clauses_may_only_choose_names_the_question_spells():
    from program.lm.adapter import choices_patch
    from signatures.contracts import PlannerOutput

    schema = {"$defs": {"PlannerOutput": PlannerOutput.model_json_schema()}}
    patched = choices_patch("PlannerOutput", "excluded_topics", ("order-service", "PodOOMKilled"), 2)(schema)
    prop = patched["$defs"]["PlannerOutput"]["properties"]["excluded_topics"]
    assert prop["items"]["enum"] == ["order-service", "PodOOMKilled"] and prop["maxItems"] == 2
    none = choices_patch("PlannerOutput", "excluded_topics", (), 2)(
        {"$defs": {"PlannerOutput": PlannerOutput.model_json_schema()}})
    assert none["$defs"]["PlannerOutput"]["properties"]["excluded_topics"]["maxItems"] == 0

import dspy

from program.evidence.citations import Menu
from program.lm.adapter import citation_patch, judgement_patch, tool_call_patch
from signatures.contracts import PlannerOutput
from signatures.diagnosis import CiteEvidence, GatherEvidence, JudgeClaim, PlanDiagnosis, narrow_citation
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


def _menu(store, *calls):
    recorder = ToolInvocationRecorder(store, "s")
    invocations = [recorder.call(tool, **arguments) for tool, arguments in calls]
    return Menu(recorder.invocations), invocations


def test_a_binding_is_one_label_of_the_menu_and_claim_types_follow_the_evidence(store):
    menu, (alert, empty) = _menu(store, ("query_metrics", {"service": "order-service"}),
                                 ("query_logs", {"query": "HikariCP", "service": "inventory-service"}))
    schema = citation_patch(menu)(_schema(CiteEvidence))
    branches = {b["properties"]["claim_type"]["const"]: b for b in schema["$defs"]["ClaimDraft"]["anyOf"]}
    assert set(branches) == {"observation", "negative_observation", "root_cause", "risk"}
    for branch in branches.values():
        assert list(branch["properties"]) == ["claim_type", "evidence_bindings", "claim_text"]
        assert branch["properties"]["evidence_bindings"]["minItems"] == 1
    hits = branches["observation"]["properties"]["evidence_bindings"]["items"]["enum"]
    assert hits[0] == f"#{alert.id} $.alerts[0]" and hits[1:] == [f"#{alert.id} $.alerts[0] §{n}"
                                                                  for n in range(1, len(hits))]
    assert branches["root_cause"]["properties"]["evidence_bindings"]["items"]["enum"] == hits
    assert branches["negative_observation"]["properties"]["evidence_bindings"]["items"]["enum"] == [f"#{empty.id} no-hit"]
    assert schema["properties"]["claims"]["maxItems"] == 4 and "minItems" not in schema["properties"]["claims"]
    assert "maxItems" not in schema["properties"]["missing_info"]  # the design does not limit missing_info
    # An action's bindings name real refs and no-hits (the gatekeeper checks their excerpts).
    actions = schema["$defs"]["EvidenceBinding"]["anyOf"]
    assert [(a["properties"]["source_invocation_id"]["const"], a["properties"]["raw_path"].get("const"))
            for a in actions] == [(alert.id, "$.alerts[0]"), (empty.id, None)]


def test_a_narrow_schema_has_no_empty_claim_list_and_no_branch_the_evidence_cannot_support(store):
    menu, _ = _menu(store, ("query_logs", {"query": "HikariCP", "service": "inventory-service"}))
    schema = citation_patch(menu, narrow=True)(_schema(narrow_citation(CiteEvidence)))
    claims = schema["properties"]["claims"]
    assert (claims["minItems"], claims["maxItems"]) == (1, 2)
    # A session without hits has no observation branch: "found" cannot be claimed from a no-hit.
    assert [b["properties"]["claim_type"]["const"] for b in schema["$defs"]["ClaimDraft"]["anyOf"]] == [
        "negative_observation"]
    assert set(schema["properties"]) == {"claims", "missing_info"}

    menu, _ = _menu(store, ("query_logs", {"query": "Full GC", "service": "order-service"}))
    schema = citation_patch(menu, narrow=True)(_schema(narrow_citation(CiteEvidence)))
    # A session whose searches all found something has no negative branch: "not found" cannot cite hits.
    assert [b["properties"]["claim_type"]["const"] for b in schema["$defs"]["ClaimDraft"]["anyOf"]] == ["observation"]


def test_a_multi_clause_ref_offers_a_label_per_clause_the_gatekeeper_accepts(store):
    menu, (alert,) = _menu(store, ("query_metrics", {"service": "order-service", "alert_name": "HighMemoryUsage"}))
    text = alert.retrieval_details.evidence_refs[0].text
    labels = {label: menu.citations[label].excerpt for label in menu.offered}
    assert labels[f"#{alert.id} $.alerts[0]"] == text
    assert labels[f"#{alert.id} $.alerts[0] §2"] == "JVM heap usage 3.8GB/4GB"
    assert all(excerpt in text for excerpt in labels.values())


def test_the_patched_schema_compiles_to_a_llama_grammar(store):
    import json

    from llama_cpp import LlamaGrammar

    recorder = ToolInvocationRecorder(store, "s")
    recorder.call("query_logs", query="内存", service="order-service")
    # A runbook ref with double quotes in it ('Search the service logs for "Slow request" lines'):
    # no ref text may reach the grammar, whose converter cannot parse such a literal.
    runbook = recorder.call("lookup_knowledge", query="slow response")
    assert any('"' in ref.text for ref in runbook.retrieval_details.evidence_refs)
    from program.lm.engine import schema_grammar_text

    for schema in (citation_patch(Menu(recorder.invocations), narrow=True)(_schema(narrow_citation(CiteEvidence))),
                   citation_patch(Menu(recorder.invocations))(_schema(CiteEvidence)),
                   tool_call_patch(CATALOG, TOOLBOX, min_calls=1)(_schema(PlanDiagnosis)),
                   judgement_patch(_schema(JudgeClaim))):
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


def test_a_planner_may_only_choose_exclusions_among_the_names_the_question_spells():
    from program.lm.adapter import choices_patch

    schema = _schema(PlanDiagnosis)
    patched = choices_patch("PlanDraft", "excluded_topics", ("order-service", "PodOOMKilled"), 2)(schema)
    prop = patched["$defs"]["PlanDraft"]["properties"]["excluded_topics"]
    assert prop["items"]["enum"] == ["order-service", "PodOOMKilled"] and prop["maxItems"] == 2
    # With nothing to choose, the planner does not write the (optional) list at all.
    none = choices_patch("PlanDraft", "excluded_topics", (), 2)(_schema(PlanDiagnosis))
    assert "excluded_topics" not in none["$defs"]["PlanDraft"]["properties"]
    assert list(none["$defs"]["PlanDraft"]["properties"]) == ["target_services", "topics"]


def test_a_supported_judgement_writes_no_reason_and_any_other_says_why():
    supported, other = judgement_patch(_schema(JudgeClaim))["anyOf"]
    assert supported["properties"] == {"judgement": {"const": "supported"}, "reason": {"const": ""}}
    assert other["properties"]["judgement"] == {"enum": ["over-reaches", "contradicted"]}
    assert other["properties"]["reason"]["type"] == "string"

import contextlib
import re
from typing import Annotated

import dspy
import pytest
from pydantic import Field

from program.store.audit import AuditStore
from program.evidence.citations import Menu
from program.lm.adapter import (
    SCHEMA_PATCH,
    ConstrainedJSONAdapter,
    choices_patch,
    citation_patch,
    judgement_patch,
    length_patch,
    narrowing,
    tool_call_patch,
)
from program.stages.pipeline import Diagnosis
from contracts import PlannerOutput
from signatures.diagnosis import (
    CiteEvidence,
    ComposeAnswer,
    GatherEvidence,
    JudgeClaim,
    PlanDiagnosis,
    narrow_citation,
)
from tests.support.good_lm import good_lm
from tests.support.scripted import ScriptedEngine
from tools.calls import ToolCall
from tools.catalog import Catalog
from tools.functions import TOOLBOX
from tools.recorder import ToolInvocationRecorder

CATALOG = Catalog(services=("order-service",), alert_names=("HighMemoryUsage",), log_levels=("INFO", "WARN"),
                  alert_states=("firing", "resolved"), synonyms={})


class SchemaRecorder(ScriptedEngine):
    """Keeps the response schema of every request, as the LM receives it."""

    def __init__(self):
        super().__init__(lambda stage, user, demos: {})
        self.schemas = []

    def complete(self, request):
        self.schemas.append(request.config.response_format["schema"])
        return super().complete(request)


def _sent(signature, patch=None, *, adapter=None, config=None) -> dict:
    """The response schema one call of `signature` sends through `adapter`, narrowed by `patch` (the
    scripted reply does not parse, which does not matter here)."""
    engine = SchemaRecorder()
    if config is None:
        config = narrowing(patch) if patch else {}
    lm = dspy.LM("scripted/test", engine=engine, cache=False)
    with dspy.context(lm=lm, adapter=adapter or ConstrainedJSONAdapter()):
        with contextlib.suppress(dspy.AdapterParseError):
            dspy.Predict(signature)(config=config)
    (schema,) = engine.schemas
    return schema


def undefined_rules(grammar: str) -> set[str]:
    """The rules a GBNF grammar uses but does not define, and `root` if it has none: what would make
    llama.cpp refuse it when the sampler is built (LlamaGrammar.from_string only keeps the text)."""
    rules = dict(re.findall(r"^([\w-]+)\s*::=\s*(.*)$", grammar, re.M))
    bodies = re.sub(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]', " ", " ".join(rules.values()))
    used = set(re.findall(r"(?<![\w-])([A-Za-z][\w-]*)", bodies))
    return (used | {"root"}) - set(rules)


def test_tool_call_shapes_carry_only_their_own_arguments_in_declared_order():
    schema = _sent(GatherEvidence, tool_call_patch(CATALOG, TOOLBOX))
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
    schema = _sent(PlanDiagnosis, tool_call_patch(CATALOG, TOOLBOX, min_calls=1))
    assert schema["properties"]["tool_calls"]["minItems"] == 1


def _menu(store, *calls):
    recorder = ToolInvocationRecorder(store, "s", TOOLBOX)
    invocations = [recorder.call(tool, **arguments) for tool, arguments in calls]
    return Menu(recorder.invocations), invocations


def test_a_binding_is_one_label_of_the_menu_and_claim_types_follow_the_evidence(store):
    menu, (alert, empty) = _menu(store, ("query_metrics", {"service": "order-service"}),
                                 ("query_logs", {"query": "HikariCP", "service": "inventory-service"}))
    schema = _sent(CiteEvidence, citation_patch(menu))
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
    schema = _sent(narrow_citation(CiteEvidence), citation_patch(menu, narrow=True))
    claims = schema["properties"]["claims"]
    assert (claims["minItems"], claims["maxItems"]) == (1, 2)
    # A session without hits has no observation branch: "found" cannot be claimed from a no-hit.
    assert [b["properties"]["claim_type"]["const"] for b in schema["$defs"]["ClaimDraft"]["anyOf"]] == [
        "negative_observation"]
    assert set(schema["properties"]) == {"ref_decisions", "claims", "missing_info"}

    menu, _ = _menu(store, ("query_logs", {"query": "Full GC", "service": "order-service"}))
    schema = _sent(narrow_citation(CiteEvidence), citation_patch(menu, narrow=True))
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


    recorder = ToolInvocationRecorder(store, "s", TOOLBOX)
    recorder.call("query_logs", query="内存", service="order-service")
    # A runbook ref with double quotes in it ('Search the service logs for "Slow request" lines'):
    # no ref text may reach the grammar, whose converter cannot parse such a literal.
    runbook = recorder.call("lookup_knowledge", query="slow response")
    assert any('"' in ref.text for ref in runbook.retrieval_details.evidence_refs)
    from program.lm.wire import schema_grammar_text

    for schema in (_sent(narrow_citation(CiteEvidence), citation_patch(Menu(recorder.invocations), narrow=True)),
                   _sent(CiteEvidence, citation_patch(Menu(recorder.invocations))),
                   _sent(PlanDiagnosis, tool_call_patch(CATALOG, TOOLBOX, min_calls=1)),
                   _sent(JudgeClaim, judgement_patch)):
        grammar = schema_grammar_text(json.dumps(schema))
        assert not undefined_rules(grammar), undefined_rules(grammar)
        # Qwen writes indented JSON: the grammar must let it break lines
        assert 'space ::= | " " | "\\n"' in grammar


def test_only_a_call_that_carries_a_narrowing_sends_a_narrowed_schema():
    engine = SchemaRecorder()
    predict = dspy.Predict(GatherEvidence)
    inputs = {"question": "q", "plan": PlannerOutput(scope="narrow"), "observations": "none"}
    with dspy.context(lm=dspy.LM("scripted/test", engine=engine, cache=False), adapter=ConstrainedJSONAdapter()):
        for config in ({}, narrowing(tool_call_patch(CATALOG, TOOLBOX)), {}):
            with contextlib.suppress(dspy.AdapterParseError):
                predict(**inputs, config=config)
    plain, narrowed, after = engine.schemas
    assert "anyOf" in narrowed["$defs"]["ToolCall"] and narrowed["properties"]["tool_calls"]["maxItems"] == 4
    # DSPy's own response model is left as DSPy built it: the next call is not narrowed.
    assert plain == after and "anyOf" not in after["$defs"]["ToolCall"]


def test_a_bound_declared_on_a_signature_field_never_reaches_the_schema_dspy_sends():
    """Why the adapter keeps its private hook: every stage's narrowing bounds a top-level output
    field, and DSPy builds the response schema from each field's type alone. Should this fail, a
    DSPy release sends field bounds, and the top-level bounds can move into the signatures."""

    class Bounded(dspy.Signature):
        question: str = dspy.InputField()
        answer: str = dspy.OutputField(max_length=200)

    bounded_calls = GatherEvidence.with_updated_fields("tool_calls",
                                                       type_=Annotated[list[ToolCall], Field(max_length=4)])
    assert "maxItems" not in _sent(bounded_calls, adapter=dspy.JSONAdapter())["properties"]["tool_calls"]
    assert "maxLength" not in _sent(Bounded, adapter=dspy.JSONAdapter())["properties"]["answer"]
    # The same bounds, sent as a narrowing:
    assert _sent(GatherEvidence, length_patch({"tool_calls": 4}))["properties"]["tool_calls"]["maxItems"] == 4
    assert _sent(ComposeAnswer, length_patch({}))["properties"]["answer"]["maxLength"] == 200


def test_a_response_format_given_with_the_call_is_replaced_by_dspys_own():
    """Why the verifier's schema needs the hook: it is not an object of fields but a choice of two
    (a supported judgement with no reason, or another with one), and a schema the call brings
    through Predict's config= is overwritten by the one DSPy builds from the fields."""
    verifier = _sent(JudgeClaim, judgement_patch)
    given = {"response_format": {"type": "json_schema",
                                 "json_schema": {"name": "JudgeClaim", "schema": verifier, "strict": True}}}
    sent = _sent(JudgeClaim, adapter=dspy.JSONAdapter(), config=given)
    assert list(verifier) == ["anyOf"]
    assert "anyOf" not in sent and list(sent["properties"]) == ["judgement", "reason"]


def test_a_narrowing_no_adapter_takes_fails_the_call_instead_of_running_unconstrained():
    """Under DSPy's plain adapter (or a DSPy without the hook) the narrowing reaches the LM, which
    refuses a setting it does not know; the stage then fails closed."""
    with pytest.raises(dspy.LMUnsupportedFeatureError, match=SCHEMA_PATCH):
        _sent(ComposeAnswer, length_patch({}), adapter=dspy.JSONAdapter())


def test_a_planner_may_only_choose_exclusions_among_the_names_the_question_spells():
    patched = _sent(PlanDiagnosis, choices_patch("PlanDraft", "excluded_topics", ("order-service", "PodOOMKilled"), 2))
    prop = patched["$defs"]["PlanDraft"]["properties"]["excluded_topics"]
    assert prop["items"]["enum"] == ["order-service", "PodOOMKilled"] and prop["maxItems"] == 2
    # With nothing to choose, the planner does not write the (optional) list at all.
    none = _sent(PlanDiagnosis, choices_patch("PlanDraft", "excluded_topics", (), 2))
    assert "excluded_topics" not in none["$defs"]["PlanDraft"]["properties"]
    assert list(none["$defs"]["PlanDraft"]["properties"]) == ["target_services", "topics"]


def test_a_supported_judgement_writes_no_reason_and_any_other_says_why():
    supported, other = _sent(JudgeClaim, judgement_patch)["anyOf"]
    assert supported["properties"] == {"judgement": {"const": "supported"}, "reason": {"const": ""}}
    assert other["properties"]["judgement"] == {"enum": ["over-reaches", "contradicted"]}
    assert other["properties"]["reason"]["type"] == "string"


def test_a_constrained_run_under_an_adapter_that_cannot_narrow_fails_closed(cases):
    case = cases["high_memory_positive"]

    def run(adapter):
        with dspy.context(lm=good_lm(case), adapter=adapter):
            return Diagnosis(AuditStore("sqlite://"), constrain=True)(question=case["question"]).result

    narrowed, plain = run(ConstrainedJSONAdapter()), run(dspy.JSONAdapter())
    assert narrowed.verdict == "PASS"
    assert plain.verdict == "LOW_CONFID" and not plain.claims
    planner = next(e for e in plain.errors if e.rule == "lm.planner.error")
    assert SCHEMA_PATCH in planner.message

"""The citation module: labels the LM points at, expanded by code, checked by the unchanged gatekeeper."""

import json

import dspy
import pytest

from optimization.experiment import Calls, evaluate
from devset import load_devset
from devset.gold import gold_executor_output, gold_plan, gold_tool_calls
from devset.recorded import record
from program.entry.api import diagnose
from program.store.audit import AuditStore
from program.evidence import gatekeeper
from program.evidence.checks import CitationCheck, check_citations
from program.evidence.citations import Menu
from program.evidence.relevance import question_target
from program.lm.adapter import ConstrainedJSONAdapter
from program.stages.executor import Cite
from program.stages.pipeline import Diagnosis
from contracts import ClaimDraft, EvidenceBinding, ExecutorOutput, ParseStatus, PlannerOutput
from tests.support.good_lm import good_lm, pass_all
from tests.support.scripted import ScriptedEngine, field_value, scripted_lm
from tools.catalog import active_catalog
from tools.functions import TOOLBOX

VALID = ParseStatus(status="valid", detail="test")
QUESTION = "只确认 order-service 是否存在 HighMemoryUsage 告警"


def _session(recorder):
    alert = recorder.call("query_metrics", service="order-service", alert_name="HighMemoryUsage")
    empty = recorder.call("query_logs", query="Elasticsearch timeout", service="order-service")
    return alert, empty


def _check(store, recorder, claims, refused=()):
    return check_citations(store, TOOLBOX, CitationCheck(
        session_id=recorder.session_id, question=QUESTION, output=ExecutorOutput(claims=claims), parse_status=VALID,
        refused=tuple(refused), target=question_target(QUESTION, active_catalog()), names=active_catalog().names))


def test_a_label_expands_into_the_binding_the_gatekeeper_checks_as_if_it_were_quoted(store, recorder):
    alert, empty = _session(recorder)
    ref = alert.retrieval_details.evidence_refs[0]
    drafts = [ClaimDraft(claim_type="observation", evidence_bindings=[f"#{alert.id} $.alerts[0]",
                                                                      f"#{alert.id} $.alerts[0] §2"],
                         claim_text="order-service 存在 HighMemoryUsage 告警（firing），JVM heap usage 3.8GB/4GB。"),
              ClaimDraft(claim_type="negative_observation", evidence_bindings=[f"#{empty.id} no-hit"],
                         claim_text="order-service 的日志中未检索到 Elasticsearch timeout 记录。")]
    claims, refused = Menu(recorder.invocations).expand(drafts)
    assert refused == []
    assert [c.claim_id for c in claims] == ["claim-1", "claim-2"]
    assert claims[0].evidence_bindings == [
        EvidenceBinding(tool_name="query_metrics", source_invocation_id=alert.id, raw_path="$.alerts[0]",
                        evidence_excerpt=ref.text),
        EvidenceBinding(tool_name="query_metrics", source_invocation_id=alert.id, raw_path="$.alerts[0]",
                        evidence_excerpt="JVM heap usage 3.8GB/4GB")]
    assert claims[1].evidence_bindings[0].raw_path is None
    assert claims[1].evidence_bindings[0].evidence_excerpt == empty.retrieval_details.message
    # The gatekeeper sees only the expanded bindings, checks them as quoted ones, and finds each
    # exactly where the label points.
    gate = _check(store, recorder, claims).gate
    assert gate.status == "pass"
    assert [cb.matched_text for cb in gate.checked_bindings] == [ref.text, "JVM heap usage 3.8GB/4GB",
                                                                 empty.retrieval_details.message]


@pytest.mark.parametrize("written", ["#{id} $.alerts[0]:", "＃{id}  $.alerts[0]", " #{id} $.alerts[0] ",
                                     "#{id} $.alerts[0] § 2"])
def test_a_label_is_read_as_the_lm_meant_it_whatever_its_spacing(recorder, written):
    alert, _ = _session(recorder)
    citation = Menu(recorder.invocations).lookup(written.format(id=alert.id))
    assert citation is not None and citation.invocation_id == alert.id and citation.raw_path == "$.alerts[0]"


def test_a_clause_not_offered_is_still_the_refs_own_text_and_the_gatekeeper_judges_it():
    from contracts import EvidenceRef, RetrievalDetails, ToolInvocation

    text = "pool check for replica-2 did not; succeed; waiting=0"
    inv = ToolInvocation(id=1, session_id="s", tool_name="query_logs", input={}, retrieval_details=RetrievalDetails(
        evidence_status="supported", evidence_refs=[EvidenceRef(raw_path="$.logs[0]", text=text)]))
    menu = Menu([inv])
    assert "#1 $.logs[0] §2" not in menu.offered and "#1 $.logs[0] §3" in menu.offered
    claims, refused = menu.expand([ClaimDraft(claim_type="observation", evidence_bindings=["#1 $.logs[0] §2"],
                                              claim_text="replica-2 pool check succeeded")])
    assert refused == [] and claims[0].evidence_bindings[0].evidence_excerpt == "succeed"
    # "succeed" alone drops the negation before it: the gatekeeper refuses it, as it would a quote.
    assert gatekeeper.check(ExecutorOutput(claims=claims), [inv], "s", toolbox=TOOLBOX).status == "fail"


def test_claims_keep_unique_ids_the_lm_gave_and_the_others_are_numbered(recorder):
    alert, _ = _session(recorder)
    label = f"#{alert.id} $.alerts[0]"
    drafts = [ClaimDraft(claim_type="observation", evidence_bindings=[label], claim_text=f"claim {n}", claim_id=cid)
              for n, cid in enumerate([None, "claim-1", "claim-1", "c9"])]
    claims, _ = Menu(recorder.invocations).expand(drafts)
    assert [c.claim_id for c in claims] == ["claim-2", "claim-1", "claim-3", "c9"]


@pytest.mark.parametrize("label", ["#99 $.alerts[0]", "#{alert} $.alerts[3]", "#{alert} $.alerts[0] §9",
                                   "#{alert} $.alerts[0] §0",
                                   "#{empty} $.logs[0]", "#{alert} no-hit", "$.alerts[0]", "HighMemoryUsage firing"])
def test_a_label_that_names_no_citation_is_refused_as_fabricated(store, recorder, label):
    alert, empty = _session(recorder)
    label = label.format(alert=alert.id, empty=empty.id)
    drafts = [ClaimDraft(claim_type="observation", evidence_bindings=[f"#{alert.id} $.alerts[0]", label],
                         claim_text="order-service 存在 HighMemoryUsage 告警（firing）。")]
    claims, refused = Menu(recorder.invocations).expand(drafts)
    assert [(f.rule, f.claim_id, f.binding_index) for f in refused] == [("evidence.unknown_label", "claim-1", None)]
    assert "binding 1 " in refused[0].message and repr(label) in refused[0].message
    assert len(claims[0].evidence_bindings) == 1  # only the real citation was expanded
    checked = _check(store, recorder, claims, refused)
    assert (checked.gate.status, checked.gate.severity) == ("fail", "reject")
    assert "evidence.unknown_label" in checked.gate.failed_rules
    # The claim's one real binding passed, but a claim with a made-up label is not verifiable: the
    # metric must not score it as if the label were not there.
    assert all(cb.status == "pass" for cb in checked.gate.checked_bindings)
    assert checked.verifiable == []


def _capturing(responder):
    requests = []

    class Capturing(ScriptedEngine):
        def complete(self, request):
            requests.append(request)
            return super().complete(request)

    return dspy.LM("scripted/test", engine=Capturing(responder), cache=False), requests


def _pointing_executor(case):
    def respond(stage, user, demos):
        if stage == "plan":
            return {"plan": gold_plan(case), "tool_calls": gold_tool_calls(case)}
        if stage == "claims":
            return gold_executor_output(case, field_value(user, "observations"), point=True)
        if stage == "judgement":
            return pass_all(user)
        return {"answer": "-"}

    return respond


def test_a_diagnosis_whose_executor_points_passes_and_the_audit_keeps_labels_and_bindings(cases, store):
    case = cases["high_memory_positive"]
    lm = scripted_lm(_pointing_executor(case))
    result = diagnose(case["question"], lm=lm, db=store)
    assert result.verdict == "PASS", result.errors
    attempt = store.get_session(result.session_id).executor_attempts[0]
    labels = attempt.drafts[0].evidence_bindings
    assert labels and all(isinstance(label, str) and label.startswith("#") for label in labels)
    bindings = attempt.executor_output.claims[0].evidence_bindings
    assert len(bindings) == len(labels)
    refs = {(inv.id, ref.raw_path): ref.text for inv in store.list_invocations(result.session_id)
            for ref in inv.retrieval_details.evidence_refs}
    for label, binding in zip(labels, bindings, strict=True):
        assert label.startswith(f"#{binding.source_invocation_id} {binding.raw_path}")
        assert binding.evidence_excerpt in refs[binding.source_invocation_id, binding.raw_path]


def test_an_unknown_label_is_rejected_and_the_retry_is_told_which(cases, store):
    case = cases["high_memory_positive"]
    replies = []

    def executor(observations, attempt, user):
        replies.append(user)
        output = gold_executor_output(case, observations, point=True)
        if attempt == 1:
            output["claims"][0]["evidence_bindings"].append("#42 $.logs[7]")
        return output

    result = diagnose(case["question"], lm=good_lm(case, executor=executor), db=store)
    record = store.get_session(result.session_id)
    first, second = record.executor_attempts
    assert first.gatekeeper_result.severity == "reject"
    assert "evidence.unknown_label" in first.gatekeeper_result.failed_rules
    assert "#42 $.logs[7]" in field_value(replies[1], "retry_context")
    assert second.gatekeeper_result.status == "pass" and result.verdict == "PASS"


def _executor_request(requests):
    (request,) = [r for r in requests if "`claims`" in (r.system if isinstance(r.system, str) else "")]
    return request


def _module_parts(request):
    """What the citation module decides: instructions, demos and the response schema (not the
    question's own input, whose plan comes from different places)."""
    return request.system, [m.text for m in request.messages[:-1]], json.dumps(request.config.response_format,
                                                                                  sort_keys=True)


def test_the_optimizer_scores_the_module_the_pipeline_runs(cases, monkeypatch):
    """Fails if the optimizer's program and the pipeline's citation step drift apart: the same
    case must reach the LM with the same instructions, demos and response schema from both."""
    case = next(c for c in load_devset() if c["case_id"] == "hikaricp_negative")
    assert type(Diagnosis().executor) is Cite
    assert [name for name, _ in Diagnosis().named_predictors() if name.startswith("executor")] == ["executor.predict"]

    lm, requests = _capturing(_pointing_executor(case))
    with dspy.context(lm=lm, adapter=ConstrainedJSONAdapter(compact=True)):
        Diagnosis(AuditStore("sqlite://"), constrain=True)(question=case["question"])
    from_pipeline = _module_parts(_executor_request(requests))

    requests.clear()
    evidence = record([case], TOOLBOX)
    example = evidence[case["case_id"]].example()
    monkeypatch.setattr("program.stages.executor.narrows", lambda lm: True)
    with dspy.context(lm=lm, adapter=ConstrainedJSONAdapter(compact=True)):
        runs = evaluate(Cite(), "uncompiled", [example], evidence, Calls())
    from_optimizer = _module_parts(_executor_request(requests))
    assert runs[0].score == 1.0, runs[0].feedback
    assert from_pipeline == from_optimizer


def test_the_module_does_not_ask_the_lm_when_nothing_can_be_cited(recorder):
    lm, requests = _capturing(lambda stage, user, demos: {"claims": []})
    recorder.call("no_such_tool")
    plan = PlannerOutput(scope="narrow")
    with dspy.context(lm=lm):
        nothing = Cite()(question=QUESTION, plan=plan, invocations=[], narrow=True)
        failed = Cite()(question=QUESTION, plan=plan, invocations=recorder.invocations, narrow=True)
    assert requests == []
    assert (nothing.error.rule, failed.error.rule) == ("executor.no_evidence_gathered", "executor.nothing_to_cite")
    assert nothing.output.claims == failed.output.claims == []


def test_output_that_does_not_parse_is_salvaged_with_only_the_fields_a_narrow_question_asks_for(recorder):
    alert, _ = _session(recorder)
    label = f"#{alert.id} $.alerts[0]"
    # The second claim has no text, so the reply does not fit the contract as a whole.
    broken = ('{"claims": [{"claim_type": "observation", "evidence_bindings": ["' + label + '"], '
              '"claim_text": "order-service 存在 HighMemoryUsage 告警（firing）。"}, {"claim_type": "observation", '
              '"evidence_bindings": ["' + label + '"]}], "missing_info": [], '
              '"recommended_actions": [{"action_id": "a1", "action_text": "restart it"}]}')
    lm = scripted_lm(lambda stage, user, demos: broken)
    with dspy.context(lm=lm):
        cited = Cite()(question=QUESTION, plan=PlannerOutput(scope="narrow"), invocations=recorder.invocations,
                       narrow=True)
    assert cited.error.rule == "lm.executor.unparseable" and cited.parse_status.status == "repaired"
    assert len(cited.drafts) == 1 and cited.drafts[0].evidence_bindings == [label]
    assert "claims[1] dropped" in cited.parse_status.detail
    assert cited.output.claims[0].evidence_bindings[0].raw_path == "$.alerts[0]"
    assert cited.output.recommended_actions == [] and cited.output.hypotheses == []


def test_a_saved_and_loaded_program_shows_its_demos_as_the_one_that_was_saved(tmp_path, cases):
    """A loaded program's demos are plain dicts; the prompt must still show them in the shape the
    grammar lets the model write (no claim_id, bindings before text, a tool call's own arguments)."""
    from devset.recorded import record as record_cases

    case = cases["hikaricp_negative"]
    evidence = record_cases([case], TOOLBOX)
    saved = Diagnosis(citation=dspy.LabeledFewShot(k=1).compile(Cite(), trainset=[
        evidence[case["case_id"]].example()]))
    saved.save(str(tmp_path / "program.json"))
    loaded = Diagnosis()
    loaded.load(str(tmp_path / "program.json"))
    adapter = ConstrainedJSONAdapter(compact=True)
    inputs = {"question": QUESTION, "plan": PlannerOutput(scope="narrow"), "observations": "-", "retry_context": "none"}
    for name in ("executor.predict", "planner"):
        before, after = (dict(p.named_predictors())[name] for p in (saved, loaded))
        assert isinstance(after.demos[0], dict)  # what a load gives back
        shown = [adapter.format(predictor.signature, predictor.demos, inputs if name != "planner" else
                                {"question": QUESTION}) for predictor in (before, after)]
        assert shown[0] == shown[1]
        assert '"claim_id"' not in json.dumps(shown[1], ensure_ascii=False)

"""The remote LM path: an OpenAI-compatible server gets the same narrowed schemas as the embedded
model, in the form it reads, found by asking it; where none can be sent the prompt states the
narrowed schema; a setting that names no form or a server that does not answer fails the run closed.
The embedded tests run llama-cpp-python's own server (`python -m llama_cpp.server`) with the 0.5B."""

import json

import dspy
import pytest

from program.entry.api import diagnose
from program.lm.adapter import ConstrainedJSONAdapter, narrowing
from program.lm.engine import preflight, resolve_lm
from program.stages.pipeline import Diagnosis
from program.lm.server_lm import ServerEngine, wire_format
from program.lm.transcript import recording_lm
from program.lm.wire import schema_grammar_text
from program.store.audit import AuditStore
from tests.support.good_lm import good_lm
from tests.support.lm_server import llama_cpp_server
from tests.support.prometheus_server import free_port
from tests.support.scripted import ScriptedEngine
from tests.support.servers import Loopback, answer

QUESTION = "只确认 order-service 是否存在 HighMemoryUsage 告警"


def test_the_grammar_a_server_gets_is_the_one_the_embedded_model_decodes_with():
    schema = {"type": "object", "properties": {"service": {"enum": ["order-service"]}}, "required": ["service"]}
    assert wire_format("gbnf", schema)["grammar"] == schema_grammar_text(json.dumps(schema))
    assert wire_format("json_schema", schema)["response_format"]["json_schema"]["schema"] == schema
    assert wire_format("json_object", schema)["response_format"] == {"type": "json_object", "schema": schema}
    # llama-cpp-python's server penalises repeats unless told not to; the embedded engine never does.
    assert wire_format("gbnf", schema)["repeat_penalty"] == wire_format("json_object", schema)["repeat_penalty"] == 1.0
    assert wire_format("none", schema) == {}


class NoSchemaEngine(ScriptedEngine):
    """An LM whose stages are narrowed but that cannot be sent a schema, as a server under
    DIAGNOSIS_LM_SCHEMA=none; it keeps what it was sent."""

    narrows = True

    def __init__(self, responder):
        super().__init__(responder, supports_response_schema=False)
        self.formats = []

    def complete(self, request):
        self.formats.append(request.config.response_format)
        return super().complete(request)


def test_an_lm_that_takes_no_schema_is_told_the_narrowed_one_in_its_prompt(cases):
    case = cases["high_memory_positive"]
    engine = NoSchemaEngine(good_lm(case).engine.responder)
    lm = dspy.LM("openai/qwen", engine=engine, cache=False)
    store = AuditStore("sqlite://")
    result = diagnose(case["question"], lm=lm, db=store, program=Diagnosis(store=store))
    assert result.verdict == "PASS"
    executor = next(user for stage, user in engine.calls if stage == "claims")
    stated = json.loads(executor.split("must match this JSON schema: ", 1)[1])
    record = store.get_session(result.session_id)
    labels = {label for claim in record.executor_attempts[0].drafts for label in claim.evidence_bindings}
    offered = {label for branch in stated["$defs"]["ClaimDraft"]["anyOf"]
               for label in branch["properties"]["evidence_bindings"]["items"]["enum"]}
    assert labels and labels <= offered
    assert stated["properties"]["claims"]["maxItems"] == 2
    # Nothing was sent as a schema: at most DSPy's plain JSON mode.
    assert all(fmt is None or fmt.get("type") != "json_schema" for fmt in engine.formats)


def test_the_prompt_states_nothing_when_the_schema_is_sent(cases):
    case = cases["high_memory_positive"]
    lm = good_lm(case)
    lm.engine.narrows = True
    store = AuditStore("sqlite://")
    diagnose(case["question"], lm=lm, db=store, program=Diagnosis(store=store))
    assert lm.engine.calls and not any("must match this JSON schema" in user for _, user in lm.engine.calls)


def test_a_schema_setting_that_names_no_form_fails_the_run_closed(monkeypatch):
    with Loopback({"/v1/models": answer(200, b"{}")}) as server:
        monkeypatch.setenv("DIAGNOSIS_LM_API_BASE", f"{server.url}/v1")
        monkeypatch.setenv("DIAGNOSIS_LM_SCHEMA", "xml")
        store = AuditStore("sqlite://")
        result = diagnose(QUESTION, lm="openai/qwen", db=store)
    assert [e.rule for e in result.errors] == ["lm.not_configured"]
    assert "DIAGNOSIS_LM_SCHEMA" in result.errors[0].message and "'xml'" in result.errors[0].message
    assert store.get_session(result.session_id).status == "failed"


def test_a_server_that_does_not_answer_fails_the_run_closed(monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_LM_API_BASE", f"http://127.0.0.1:{free_port()}/v1")
    lm = resolve_lm("openai/qwen")
    assert isinstance(lm.engine, ServerEngine)
    assert preflight(lm)[0] == "lm.unreachable"


# --- against llama-cpp-python's server with the 0.5B ---------------------------------------------

class Pick(dspy.Signature):
    """Name the service."""

    question: str = dspy.InputField()
    service: str = dspy.OutputField()


def _only(values):
    def patch(schema):
        schema["properties"]["service"] = {"enum": values}
        return schema

    return patch


@pytest.mark.embedded
def test_the_server_is_found_to_take_the_grammar_and_decodes_only_what_the_narrowed_schema_allows():
    with llama_cpp_server("embedded-small") as url:
        engine = ServerEngine(url, "qwen")
        assert engine.check() == "gbnf"
        # llama-cpp-python's server does not enforce an OpenAI json_schema (it refuses the request, or
        # answers unconstrained), so the grammar is what is found to work.
        assert engine.detection[0].startswith("json_schema: ") and engine.detection[0] != "json_schema: enforced", \
            engine.detection
        assert engine.detection[1] == "gbnf: enforced"
        lm = dspy.LM("openai/qwen", engine=engine, temperature=0.0, max_tokens=40, cache=False)
        # Names no model would give for this question: only the narrowed schema can make it write one.
        odd = ["zq-17-kappa", "vx-42-lambda"]
        with dspy.context(lm=lm, adapter=ConstrainedJSONAdapter(compact=True)):
            pred = dspy.Predict(Pick)(question="Which service has HighMemoryUsage? order-service does.",
                                      config=narrowing(_only(odd)))
        assert pred.service in odd


@pytest.mark.embedded
def test_a_diagnosis_through_the_server_points_by_label_under_the_narrowed_schemas(monkeypatch, tmp_path):
    with llama_cpp_server("embedded-small") as url:
        monkeypatch.setenv("DIAGNOSIS_LM_API_BASE", url)
        store = AuditStore("sqlite://")
        result = diagnose(QUESTION, lm="openai/qwen", db=store, compiled=False)
    record = store.get_session(result.session_id)
    assert record.status == "completed" and record.lm_model == "openai/qwen"
    (schema,) = [n.message for n in record.notes if n.rule == "lm.schema"]
    assert "as gbnf" in schema and "json_schema: refused" in schema
    assert record.usage["planner"].lm_calls == 1 and record.usage["executor"].lm_calls >= 1
    # Under the narrowed schema every binding the executor wrote is a label of the session's menu.
    drafts = [claim for attempt in record.executor_attempts for claim in attempt.drafts]
    assert drafts and all(label.startswith("#") for claim in drafts for label in claim.evidence_bindings)
    gate = result.gatekeeper_result
    assert gate is not None and (gate.status == "pass" or result.verdict != "PASS")


@pytest.mark.embedded
def test_a_server_sent_no_schema_is_told_it_in_the_prompt(monkeypatch, tmp_path):
    with llama_cpp_server("embedded-small") as url:
        monkeypatch.setenv("DIAGNOSIS_LM_API_BASE", url)
        monkeypatch.setenv("DIAGNOSIS_LM_SCHEMA", "none")
        transcript = tmp_path / "transcript.jsonl"
        lm = recording_lm(resolve_lm("openai/qwen"), transcript)
        store = AuditStore("sqlite://")
        result = diagnose(QUESTION, lm=lm, db=store, compiled=False)
    record = store.get_session(result.session_id)
    assert record.status == "completed"
    (schema,) = [n.message for n in record.notes if n.rule == "lm.schema"]
    assert "no schema: the prompt states each narrowed schema" in schema
    calls = [json.loads(line) for line in transcript.read_text(encoding="utf-8").splitlines()]
    assert calls and all("must match this JSON schema" in call["messages"][-1]["text"] for call in calls)

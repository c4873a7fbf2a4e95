"""Real runs of the embedded 0.5B model (no network, CPU only): the engine, its chat template and its
grammar, through the whole pipeline. They check that the run completes, that the stored record is
consistent, and that the fast greedy grammar path gives the library's own answer; the benchmark,
not this test, measures answer quality."""

import json

import pytest

from program.entry.api import diagnose
from program.lm.wire import schema_grammar_text
from program.lm.models import EMBEDDED_MODELS, assemble

pytestmark = pytest.mark.embedded


def test_embedded_model_runs_the_whole_pipeline(store):
    result = diagnose("只确认 order-service 是否存在 HighMemoryUsage 告警", lm="embedded-small", db=store,
                      compiled=False)
    record = store.get_session(result.session_id)
    assert record is not None and record.status == "completed"
    assert record.lm_model == "embedded/qwen2.5-coder-0.5b-instruct-q4_k_m"
    gate = record.self_evaluation.verifier_evaluation.gatekeeper_result
    assert gate == result.gatekeeper_result
    if gate.status == "fail":
        assert result.verdict != "PASS"
    if gate.severity == "reject":
        assert result.verdict == "REJECT"
    assert record.usage["planner"].lm_calls == 1 and record.usage["executor"].lm_calls >= 1
    assert sum(u.completion_tokens for u in record.usage.values()) > 0
    assert result.answer.strip()


def test_greedy_grammar_sampling_gives_the_librarys_own_tokens():
    from llama_cpp import Llama, LlamaGrammar

    from program.lm.grammar_sampling import GreedyGrammarLlama

    schema = {"type": "object", "properties": {"service": {"enum": ["order-service", "user-service"]},
                                               "alerts": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
              "required": ["service", "alerts"]}
    messages = [{"role": "user", "content": "Which service has a HighMemoryUsage alert? order-service does. JSON."}]
    path = str(assemble(EMBEDDED_MODELS["embedded-small"]))
    replies = []
    for cls in (Llama, GreedyGrammarLlama):
        llm = cls(model_path=path, n_ctx=1024, n_threads=2, verbose=False)
        grammar = LlamaGrammar.from_string(schema_grammar_text(json.dumps(schema)), verbose=False)
        out = llm.create_chat_completion(messages=messages, max_tokens=60, temperature=0.0, grammar=grammar)
        replies.append(out["choices"][0]["message"]["content"])
        llm.close()
    assert replies[0] == replies[1]
    assert json.loads(replies[1])["service"] in ("order-service", "user-service")


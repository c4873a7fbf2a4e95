"""The stages as modules: the names a saved program and a stored record use stay what they were, a
stage failure is classified by its type, and a run needs of its store only `RunStore`."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import dspy
import litellm
import pytest
from dspy.utils.exceptions import LMTimeoutError, LMUnexpectedError

from program.entry.api import diagnose
from program.stages.executor import Cite
from program.stages.compose import Compose, composer_not_asked
from program.stages.gather import Gather
from program.stages.judge import Judge
from program.stages.pipeline import NEAREST, Diagnosis
from program.stages.plan import Plan
from program.stages.stage_errors import stage_error
from contracts import Claim
from tests.support.good_lm import broad, good_lm

# The names compiled files and audit records already hold.
PREDICTOR_NAMES = ["planner", "gather", "executor.predict", "verifier", "composer"]
USAGE_KEYS = {Plan: "planner", Gather: "executor_tools", Cite: "executor", Judge: "verifier", Compose: "composer"}


def test_a_saved_program_keeps_the_predictor_names_compiled_files_are_stored_under(tmp_path):
    program = Diagnosis()
    assert [name for name, _ in program.named_predictors()] == PREDICTOR_NAMES
    program.planner.demos = program.planner.demos[:1]
    program.verifier.demos = []
    path = tmp_path / "diagnosis.json"
    program.save(str(path))
    state = json.loads(path.read_text(encoding="utf-8"))
    assert [name for name in state if name not in ("metadata", NEAREST)] == PREDICTOR_NAMES
    assert state[NEAREST] == {"pool": []}
    loaded = Diagnosis()
    assert len(loaded.planner.demos) == 2 and len(loaded.verifier.demos) == 10  # five cases, each in both languages
    loaded.load(str(path))
    assert len(loaded.planner.demos) == 1 and loaded.verifier.demos == []
    assert loaded.dump_state() == program.dump_state()
    # A file saved before the citation step had a pool loads with an empty one.
    del state[NEAREST]
    path.write_text(json.dumps(state), encoding="utf-8")
    older = Diagnosis()
    older.load(str(path))
    assert older.executor.nearest.pool == [] and older.dump_state() == program.dump_state()


def test_a_copied_program_keeps_its_stages_and_their_demos():
    program = Diagnosis()
    copy = program.deepcopy()
    assert [type(p) for _, p in copy.named_predictors()] == [Plan, Gather, dspy.Predict, Judge, Compose]
    assert copy.planner is not program.planner and len(copy.planner.demos) == len(program.planner.demos)


def test_every_stage_of_a_broad_run_records_its_usage_under_its_key(cases, store):
    case = broad(cases["high_memory_positive"], "排查 order-service 的内存告警情况。")
    # The gold answer's facts, each grounded in the verified claim, so that the composed answer stands.
    composed = case["gold"]["answer"].split("。")[0] + "。"
    result = diagnose(case["question"], lm=good_lm(case, composer=lambda user: {"answer": composed}), db=store)
    assert result.verdict == "PASS" and result.composer_status == "valid"
    assert set(store.get_session(result.session_id).usage) == set(USAGE_KEYS.values())
    assert {stage: stage.usage_key for stage in USAGE_KEYS} == USAGE_KEYS


def _raised_from(cause: BaseException, wrapper: type[Exception] = LMUnexpectedError) -> Exception:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise wrapper(str(exc)) from exc
    except Exception as wrapped:
        return wrapped


@pytest.mark.parametrize("exc", [
    _raised_from(litellm.APIConnectionError(message="refused", llm_provider="openai", model="x")),
    _raised_from(ConnectionRefusedError(111, "Connection refused")),
    _raised_from(socket.gaierror(-2, "Name or service not known")),
    LMTimeoutError("the provider took too long"),
    TimeoutError(),
], ids=["litellm-in-dspy", "refused-in-dspy", "dns-in-dspy", "dspy-timeout", "timeout"])
def test_an_endpoint_that_cannot_be_reached_is_named_by_the_type_of_its_error(exc):
    assert stage_error("planner", exc).rule == "lm.unreachable"


def test_a_diagnosis_on_an_in_process_engine_never_loads_litellm():
    """litellm takes a new process seconds to import: only an LM that goes through it loads it, and
    the stage errors name its connection errors only once it is loaded."""
    code = ("import sys\n"
            "from devset import load_cases\n"
            "from program.entry.api import diagnose\n"
            "from tests.support.good_lm import good_lm\n"
            "case = next(c for c in load_cases() if c['case_id'] == 'high_memory_positive')\n"
            "result = diagnose(case['question'], lm=good_lm(case), db='sqlite://')\n"
            "print(result.verdict, 'litellm' in sys.modules)\n")
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.stdout.split() == ["PASS", "False"], done.stderr[-2000:]


def test_the_text_of_a_message_does_not_decide_the_rule():
    finding = stage_error("verifier", RuntimeError("connection refused, timed out, unreachable"))
    assert finding.rule == "lm.verifier.error" and "connection refused" in finding.message


def test_the_composer_is_asked_only_for_a_broad_pass_with_something_positive_to_phrase():
    positive = Claim(claim_id="claim-1", claim_type="observation", claim_text="HighMemoryUsage fires")
    negative = Claim(claim_id="claim-2", claim_type="negative_observation", claim_text="no OOM in the logs")
    assert composer_not_asked("PASS", [positive, negative], narrow=False) is None
    assert "narrow" in composer_not_asked("PASS", [positive], narrow=True)
    assert "no positive" in composer_not_asked("PASS", [negative], narrow=False)
    assert "no positive" in composer_not_asked("LOW_CONFID", [positive], narrow=False)


class MemoryStore:
    """Only what `RunStore` declares: a run must need nothing else of its store."""

    def __init__(self):
        self.sessions, self.invocations = {}, []

    def claim_session(self, record):
        assert record.session_id not in self.sessions
        self.sessions[record.session_id] = record.model_copy(deep=True)

    def save_session(self, record):
        self.sessions[record.session_id] = record.model_copy(deep=True)

    def add_invocation(self, invocation):
        stored = invocation.model_copy(update={"id": len(self.invocations) + 1})
        self.invocations.append(stored)
        return stored

    def list_invocations(self, session_id):
        return [inv for inv in self.invocations if inv.session_id == session_id]

    def get_invocations(self, ids):
        wanted = set(ids)
        return {inv.id: inv for inv in self.invocations if inv.id in wanted}


def test_a_run_is_written_against_the_run_store_interface(cases):
    case = cases["high_memory_positive"]
    store = MemoryStore()
    with dspy.context(lm=good_lm(case)):
        result = Diagnosis(store=store)(question=case["question"], session_id="memory-1").result
    assert result.verdict == "PASS"
    record = store.sessions["memory-1"]
    assert record.status == "completed" and record.verdict == "PASS"
    assert [inv.tool_name for inv in store.invocations] == [inv.tool_name for inv in store.list_invocations("memory-1")]
    assert store.invocations


def test_a_source_that_fails_while_it_is_read_ends_in_the_record(cases, store, monkeypatch):
    def broken_source():
        raise ValueError("the metrics source answered something that is not JSON")

    monkeypatch.setattr("program.stages.run.active_catalog", broken_source)
    case = cases["high_memory_positive"]
    result = diagnose(case["question"], lm=good_lm(case), db=store)
    assert result.verdict == "LOW_CONFID" and [e.rule for e in result.errors] == ["pipeline.internal_error"]
    record = store.get_session(result.session_id)
    assert record.status == "failed" and "not JSON" in record.errors[0].message
    assert [n.rule for n in record.notes] == ["pipeline.traceback"]

"""The recording engine serves an exact repeat from the run's own transcript under greedy decoding,
counts it, and records it so that a replay answers the same sequence."""

import itertools
import json
import time
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest
from dspy.lm15 import Config, Message, Request
from dspy.utils.exceptions import LMTimeoutError

from program.lm.transcript import RecordedFailure, TranscriptMissing, recording_lm, replaying_lm
from tests.support.scripted import ScriptedEngine


def counted_lm(temperature=0.0, pause=0.0):
    """A model whose every reply is numbered, so a reply that did not come from it shows; its
    engine's `calls` lists what reached it."""
    numbers = itertools.count(1)

    def respond(stage, user, demos):
        time.sleep(pause)
        return f"reply {next(numbers)} to {user}"

    engine = ScriptedEngine(respond)
    settings = {} if temperature is None else {"temperature": temperature}
    return dspy.LM("scripted/test", engine=engine, cache=False, **settings), engine


def entries(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_repeat_is_served_without_the_model_and_counted(tmp_path):
    base, model = counted_lm()
    lm = recording_lm(base, tmp_path / "transcript.jsonl")
    assert lm("what fires?") == lm("what fires?") == ["reply 1 to what fires?"]
    assert len(model.calls) == 1 and (lm.engine.calls, lm.engine.repeats) == (1, 1)
    first, repeat = entries(tmp_path / "transcript.jsonl")
    assert "repeat" not in first and repeat["repeat"] is True and repeat["seconds"] == 0
    assert (repeat["key"], repeat["reply"], repeat["messages"]) == (first["key"], first["reply"], first["messages"])
    assert (repeat["prompt_tokens"], repeat["completion_tokens"]) == (0, 0)


def test_a_different_request_reaches_the_model(tmp_path):
    base, model = counted_lm()
    lm = recording_lm(base, tmp_path / "transcript.jsonl")
    assert lm("one") == ["reply 1 to one"] and lm("two") == ["reply 2 to two"]
    # The same prompt under another output budget is another request: its reply may be cut elsewhere.
    assert lm("one", max_tokens=50) == ["reply 3 to one"]
    assert len(model.calls) == 3 and (lm.engine.calls, lm.engine.repeats) == (3, 0)


def test_the_replay_of_a_transcript_with_repeats_gives_every_reply(tmp_path):
    base, _ = counted_lm()
    path = tmp_path / "transcript.jsonl"
    lm = recording_lm(base, path)
    prompts = ["a", "a", "b", "a", "b", "c"]
    recorded = [lm(p) for p in prompts]
    assert (lm.engine.calls, lm.engine.repeats) == (3, 3)

    replay = replaying_lm(base, path)
    assert [replay(p) for p in prompts] == recorded
    assert (replay.engine.calls, replay.engine.repeats) == (3, 3)
    # Every recorded "a" was answered: a fourth is a request the recorded run never made.
    with pytest.raises(TranscriptMissing):
        replay.engine.complete(Request(model="scripted/test", messages=(Message.user("a"),),
                                      config=Config(temperature=0.0)))


def request(user: str, system: str = "instructions") -> Request:
    return Request(model="scripted/test", system=system, messages=(Message.user(user),), config=Config(temperature=0.0))


def test_a_replay_by_inputs_answers_a_reworded_prompt_for_the_same_inputs_in_order(tmp_path):
    base, _ = counted_lm()
    path = tmp_path / "transcript.jsonl"
    lm = recording_lm(base, path, serve_repeats=False)
    asked = "[[ ## question ## ]]\n{q}\n\n[[ ## observations ## ]]\n{o}\n\nRespond with a JSON object."
    recorded = [lm.engine.complete(request(asked.format(q=q, o=o))).message.text
                for q, o in (("does x fire?", "#1 x firing"), ("does x fire?", "#1 x firing"), ("does y fire?", "#2 y"))]

    replay = replaying_lm(base, path, by_inputs=("question", "observations"))
    # Other instructions and another field around the same inputs: the replies recorded for them, in order.
    again = "[[ ## language ## ]]\nen\n\n" + asked
    answered = [replay.engine.complete(request(again.format(q=q, o=o), system="reworded")).message.text
                for q, o in (("does y fire?", "#2 y"), ("does x fire?", "#1 x firing"), ("does x fire?", "#1 x firing"))]
    assert answered == [recorded[2], recorded[0], recorded[1]] and replay.engine.unused == 0
    with pytest.raises(TranscriptMissing):  # the same question on other evidence was never answered
        replay.engine.complete(request(asked.format(q="does x fire?", o="#1 x resolved")))
    with pytest.raises(TranscriptMissing):  # a prompt without the inputs matches nothing
        replay.engine.complete(request("does x fire?"))
    assert replay.engine.missing == 2


@pytest.mark.parametrize("temperature", [0.7, None])
def test_sampling_turns_the_repeat_cache_off(tmp_path, temperature):
    base, model = counted_lm(temperature=temperature)
    lm = recording_lm(base, tmp_path / "transcript.jsonl")
    assert lm("again") == ["reply 1 to again"] and lm("again") == ["reply 2 to again"]
    assert len(model.calls) == 2 and (lm.engine.calls, lm.engine.repeats) == (2, 0)


def test_a_sampling_copy_of_a_greedy_lm_is_not_served_repeats(tmp_path):
    """Optimizers sample through a copy at a higher temperature; the copy shares the engine."""
    base, model = counted_lm()
    lm = recording_lm(base, tmp_path / "transcript.jsonl")
    lm("again")
    assert lm.copy(temperature=1.0)("again") == ["reply 2 to again"]
    assert len(model.calls) == 2 and lm.engine.repeats == 0


def test_repeats_can_be_sent_to_the_model(tmp_path):
    base, model = counted_lm()
    lm = recording_lm(base, tmp_path / "transcript.jsonl", serve_repeats=False)
    assert lm("again") != lm("again") and len(model.calls) == 2 and lm.engine.repeats == 0


def test_concurrent_identical_requests_reach_the_model_once(tmp_path):
    base, model = counted_lm(pause=0.05)
    lm = recording_lm(base, tmp_path / "transcript.jsonl")
    with ThreadPoolExecutor(max_workers=6) as pool:
        replies = list(pool.map(lambda _: lm("same"), range(6)))
    assert replies == [["reply 1 to same"]] * 6
    assert len(model.calls) == 1 and (lm.engine.calls, lm.engine.repeats) == (1, 5)
    assert sum(bool(e.get("repeat")) for e in entries(tmp_path / "transcript.jsonl")) == 5


def test_repeated_diagnoses_replay_exactly(tmp_path, cases):
    """The second asking of a question repeats at least its planner's request; a replay of both
    diagnoses, repeats included, gives the same verdicts, answers and token counts."""
    from program.entry.api import diagnose
    from program.store.audit import AuditStore
    from tests.support.good_lm import good_lm

    case = cases["high_memory_positive"]
    base = good_lm(case).copy(temperature=0.0)
    path = tmp_path / "transcript.jsonl"
    lm = recording_lm(base, path)
    store = AuditStore("sqlite://")
    recorded = [diagnose(case["question"], lm=lm, db=store, compiled=False) for _ in range(2)]
    assert lm.engine.repeats >= 1 and len(base.engine.calls) == lm.engine.calls
    assert len(entries(path)) == lm.engine.calls + lm.engine.repeats

    replay = replaying_lm(base, path)
    store = AuditStore("sqlite://")
    replayed = [diagnose(case["question"], lm=replay, db=store, compiled=False) for _ in range(2)]
    assert (replay.engine.calls, replay.engine.repeats) == (lm.engine.calls, lm.engine.repeats)
    for before, after in zip(recorded, replayed, strict=True):
        assert (after.verdict, after.answer) == (before.verdict, before.answer) == ("PASS", before.answer)
        assert ({k: (u.lm_calls, u.prompt_tokens) for k, u in after.usage.items()}
                == {k: (u.lm_calls, u.prompt_tokens) for k, u in before.usage.items()})


def test_a_call_the_engine_fails_is_recorded_with_its_error_and_failed_again_in_the_replay(tmp_path):
    """A prompt longer than the model's context raised in the engine and left no entry: the run
    counted it a model call, its replay counted it a request never made (results/20261208T003135Z)."""
    def respond(stage, user, demos):
        if "too long" in user:
            raise ValueError("Requested tokens (6543) exceed context window of 6144")
        return f"reply to {user}"

    engine = ScriptedEngine(respond)
    base = dspy.LM("scripted/test", engine=engine, cache=False, temperature=0.0)
    path = tmp_path / "transcript.jsonl"
    lm = recording_lm(base, path, cache=tmp_path / "replies")
    for _ in range(2):
        with pytest.raises(ValueError, match="exceed context window"):
            lm.engine.complete(request("too long"))
    assert lm("fits") == ["reply to fits"]
    # Neither a repeat nor a kept reply stands in for a failure: each asking reached the engine.
    assert len(engine.calls) == 3 and (lm.engine.calls, lm.engine.failed, lm.engine.repeats, lm.engine.cached) == (1, 2, 0, 0)
    failed = entries(path)[:2]
    assert [e["error"] for e in failed] == ["ValueError: Requested tokens (6543) exceed context window of 6144"] * 2
    assert [(e["reply"], e["finish_reason"], e["prompt_tokens"]) for e in failed] == [("", None, None)] * 2
    assert "error" not in entries(path)[2]

    replay = replaying_lm(base, path)
    for _ in range(2):
        with pytest.raises(RecordedFailure, match="as recorded: ValueError: Requested tokens"):
            replay.engine.complete(request("too long"))
    assert replay("fits") == ["reply to fits"]
    assert (replay.engine.calls, replay.engine.failed, replay.engine.missing) == (1, 2, 0)


def test_a_transient_failure_dspy_asked_again_replays_as_one(tmp_path):
    """DSPy asks a call again after a timeout: the recorded run holds the failure and then the reply,
    and its replay must fail the first the same way, so that DSPy asks again and gets the second."""
    timeouts = iter([LMTimeoutError("the server took too long", retry_after=0)])

    def respond(stage, user, demos):
        return next(timeouts, None) or f"reply to {user}"

    engine = ScriptedEngine(respond)
    base = dspy.LM("scripted/test", engine=engine, cache=False, temperature=0.0)
    path = tmp_path / "transcript.jsonl"
    lm = recording_lm(base, path)
    assert lm("slow") == ["reply to slow"]
    assert len(engine.calls) == 2 and (lm.engine.calls, lm.engine.failed) == (1, 1)
    failure, reply = entries(path)
    assert failure["transient"] is True and "the server took too long" in failure["error"] and "transient" not in reply

    replay = replaying_lm(base, path)
    assert replay("slow") == ["reply to slow"]
    assert (replay.engine.calls, replay.engine.failed, replay.engine.missing) == (1, 1, 0)

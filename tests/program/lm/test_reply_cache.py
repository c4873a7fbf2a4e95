"""The reply cache keeps the model's greedy replies across runs: a later run's recording engine
serves them without the model, records them marked cached, and never serves a sampled request, a
reply kept for another model, or an entry that cannot be trusted."""

import json

import pytest
from dspy.lm15 import Config, Message, Request, Response, TextPart, Usage

from program.lm import reply_cache
from program.lm.engine import embedded_lm
from program.lm.models import EMBEDDED_MODELS
from program.lm.transcript import recording_lm, repeat_key, replaying_lm
from tests.program.lm.test_transcript import counted_lm, entries


def run(tmp_path, name, cache, prompts=("what fires?",), temperature=0.0, model="scripted/test"):
    """One run: a new model (its replies numbered from 1) behind a new recording engine on `cache`."""
    base, model_engine = counted_lm(temperature=temperature)
    base.model = model
    lm = recording_lm(base, tmp_path / f"{name}.jsonl", cache=cache)
    return [lm(p) for p in prompts], lm.engine, model_engine


def test_a_later_run_is_served_the_kept_reply_and_records_it_as_cached(tmp_path):
    cache = tmp_path / "replies"
    first, _, _ = run(tmp_path, "first", cache, ["a", "b", "a"])
    second, engine, model = run(tmp_path, "second", cache, ["a", "b", "a"])
    assert second == first == [["reply 1 to a"], ["reply 2 to b"], ["reply 1 to a"]]
    assert model.calls == [] and (engine.calls, engine.cached, engine.repeats) == (0, 2, 1)
    recorded = entries(tmp_path / "second.jsonl")
    assert [(e.get("cached"), e.get("repeat"), e["seconds"]) for e in recorded] == [
        (True, None, 0), (True, None, 0), (None, True, 0)]
    assert [e["key"] for e in recorded] == [e["key"] for e in entries(tmp_path / "first.jsonl")]

    # The replay of a run served from the cache answers every request it made, and counts as it did.
    replay = replaying_lm(counted_lm()[0], tmp_path / "second.jsonl")
    assert [replay(p) for p in ("a", "b", "a")] == second
    assert (replay.engine.calls, replay.engine.cached, replay.engine.repeats) == (0, 2, 1)


def test_a_reply_kept_for_another_model_is_not_served(tmp_path):
    cache = tmp_path / "replies"
    run(tmp_path, "first", cache)
    _, engine, model = run(tmp_path, "second", cache, model="scripted/another")
    assert len(model.calls) == 1 and (engine.calls, engine.cached) == (1, 0)


def test_an_embedded_model_is_known_by_its_weights_its_build_its_cpu_and_its_context(monkeypatch):
    import json

    from program.lm import native

    def identity(name):
        return json.loads(recording_lm(embedded_lm(name), "unused.jsonl", cache="unused").engine.cache.model)

    identities = {name: identity(name) for name in ("embedded", "embedded-small")}
    assert {name: i["sha256"] for name, i in identities.items()} == {n: EMBEDDED_MODELS[n].sha256 for n in identities}
    assert identities["embedded"]["library"] == native.library_digest() and identities["embedded"]["n_ctx"]
    # Another CPU takes other kernels, so its greedy replies are not this one's.
    monkeypatch.setattr(native, "cpu_flags", lambda: {"avx512f"})
    assert identity("embedded")["cpu"] != identities["embedded"]["cpu"]


@pytest.mark.parametrize("temperature", [0.7, None])
def test_a_sampled_request_is_neither_kept_nor_served(tmp_path, temperature):
    cache = tmp_path / "replies"
    run(tmp_path, "first", cache, ["again", "again"], temperature=temperature)
    assert not cache.exists()
    # Nor is a reply kept under the sampled request's own key, which no run writes.
    _, engine, model = run(tmp_path, "second", cache, [], temperature=temperature)
    request = Request(model="scripted/test", messages=(Message.user("again"),), config=Config(temperature=temperature))
    engine.cache.put(repeat_key(request), Response(id=None, model="scripted", message=Message.assistant([TextPart("kept")]),
                                                   finish_reason="stop", usage=Usage()))
    assert engine.complete(request).message.text == "reply 1 to again"
    assert len(model.calls) == 1 and (engine.calls, engine.cached) == (1, 0)


def damaged(text: str, how: str) -> str | bytes:
    entry = json.loads(text)
    if how == "cut off":
        return text[: len(text) // 2]
    if how == "reply changed":
        return json.dumps({**entry, "reply": "the fire is out"})
    if how == "no digest":
        return json.dumps({k: v for k, v in entry.items() if k != "digest"})
    return b"\xff\xfe" + text.encode()


@pytest.mark.parametrize("how", ["cut off", "reply changed", "no digest", "not utf-8"])
def test_a_damaged_entry_is_ignored_counted_and_replaced(tmp_path, how):
    cache = tmp_path / "replies"
    run(tmp_path, "first", cache)
    (path,) = cache.glob("*.json")
    text = path.read_text(encoding="utf-8")
    bad = damaged(text, how)
    path.write_bytes(bad if isinstance(bad, bytes) else bad.encode())
    replies, engine, model = run(tmp_path, "second", cache)
    assert replies == [["reply 1 to what fires?"]] and len(model.calls) == 1
    assert (engine.calls, engine.cached, engine.cache.ignored) == (1, 0, 1)
    assert len(engine.cache.problems) == 1 and engine.cache.problems[0].startswith(f"ignored {path}")
    # The model's reply took its place: the next run is served it.
    _, engine, model = run(tmp_path, "third", cache)
    assert model.calls == [] and (engine.cached, engine.cache.ignored) == (1, 0)


def test_an_entry_unreadable_as_a_file_is_ignored(tmp_path):
    cache = tmp_path / "replies"
    run(tmp_path, "first", cache)
    (path,) = cache.glob("*.json")
    path.unlink()
    path.mkdir()
    _, engine, model = run(tmp_path, "second", cache)
    assert len(model.calls) == 1 and engine.cache.ignored == 1
    # It cannot be replaced either: said, and the run goes on.
    assert engine.cache.problems[1].startswith(f"not kept {path}")


def test_a_write_killed_before_its_rename_leaves_nothing_to_serve(tmp_path, monkeypatch):
    cache = tmp_path / "replies"

    def killed(source, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(reply_cache.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, "first", cache)
    assert list(cache.iterdir()) == []
    monkeypatch.undo()
    _, engine, model = run(tmp_path, "second", cache)
    assert len(model.calls) == 1 and (engine.cached, engine.cache.ignored) == (0, 0)


def test_a_cache_that_cannot_be_written_does_not_stop_the_run(tmp_path):
    cache = tmp_path / "replies"
    cache.write_text("a file, not a folder")
    replies, engine, _ = run(tmp_path, "first", cache, ["a", "a"])
    assert replies == [["reply 1 to a"]] * 2 and (engine.calls, engine.repeats) == (1, 1)
    # Under a file no entry can be read or written: both are said, and the run goes on.
    found, kept = engine.cache.problems
    assert found.startswith("ignored") and kept.startswith("not kept")

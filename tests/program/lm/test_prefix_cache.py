"""Stage prefixes saved on disk: a key that does not match in every part is a miss, a damaged file is
a miss with a note and never reaches llama.cpp, the directory stays within its bound, and (with the
real 0.5B) a new engine starts from a saved prefix and writes exactly what a warm one writes."""

import os
import time

import dspy
import pytest

from program.lm import prefix_cache
from program.lm.engine import LlamaEngine, preflight
from program.lm.models import EMBEDDED_MODELS
from program.lm.prefix_cache import MAGIC, PrefixStore

IDENTITY = {"model_sha256": "ab" * 32, "library": "cd" * 32, "n_ctx": 6144, "cpu": "ef" * 32}
TOKENS = list(range(1000, 1100))
STATE = bytes(range(256)) * 40


def store_at(directory, max_bytes=1 << 20, identity=IDENTITY):
    return PrefixStore(directory, max_bytes, identity)


def test_a_saved_state_is_read_back_for_exactly_its_tokens_and_identity(tmp_path):
    store = store_at(tmp_path)
    assert store.write(TOKENS, STATE) is None
    assert store.read(TOKENS) == (STATE, None)
    # Other tokens, a longer or shorter prefix, or another model, build, n_ctx or CPU: no state, no note.
    assert store.read(TOKENS[:-1]) == (None, None) and store.read([*TOKENS, 7]) == (None, None)
    for key in IDENTITY:
        assert store_at(tmp_path, identity={**IDENTITY, key: "other"}).read(TOKENS) == (None, None)


def _damaged(tmp_path, change) -> tuple:
    store = store_at(tmp_path)
    store.write(TOKENS, STATE)
    path = store.path(TOKENS)
    blob = path.read_bytes()
    path.write_bytes(change(blob))
    state, note = store.read(TOKENS)
    return state, note, path.exists()


@pytest.mark.parametrize(("change", "said"), [
    (lambda blob: blob[:-1] + bytes([blob[-1] ^ 1]), "does not match its checksum"),
    (lambda blob: blob[: len(blob) // 2], "is cut short"),
    (lambda blob: blob[:40], "has an unreadable header"),
    (lambda blob: b"", "is not a prefix state file"),
    (lambda blob: b"\x00" * len(blob), "is not a prefix state file"),
    (lambda blob: blob.replace(b'"n_ctx": 6144', b'"n_ctx": 2048'), "another model, build, context size or CPU"),
    (lambda blob: blob.replace((1050).to_bytes(4, "little"), (9).to_bytes(4, "little")), "other tokens"),
])
def test_a_damaged_file_is_a_miss_with_a_note_and_is_removed(tmp_path, change, said):
    state, note, kept = _damaged(tmp_path, change)
    assert state is None and said in note and "read the prefix again" in note
    assert not kept


def test_a_file_saved_under_another_key_but_renamed_to_this_one_is_refused(tmp_path):
    other = store_at(tmp_path, identity={**IDENTITY, "model_sha256": "00" * 32})
    other.write(TOKENS, STATE)
    store = store_at(tmp_path)
    os.replace(other.path(TOKENS), store.path(TOKENS))
    state, note = store.read(TOKENS)
    assert state is None and "another model" in note


def test_the_directory_keeps_within_its_bound_removing_the_least_recently_used(tmp_path):
    store = store_at(tmp_path, max_bytes=3 * (len(STATE) + 2000))
    for n in range(3):
        store.write([n, *TOKENS], STATE)
        time.sleep(0.02)
    store.read([0, *TOKENS])  # used: now the most recent
    time.sleep(0.02)
    store.write([3, *TOKENS], STATE)
    kept = {n for n in range(4) if store.path([n, *TOKENS]).exists()}
    assert kept == {0, 2, 3}
    assert sum(p.stat().st_size for p in tmp_path.glob("*.state")) <= store.max_bytes


def test_a_state_larger_than_the_bound_is_not_saved_and_says_so(tmp_path):
    note = store_at(tmp_path, max_bytes=len(STATE) - 1).write(TOKENS, STATE)
    assert "larger than DIAGNOSIS_PREFIX_CACHE_MB allows" in note
    assert list(tmp_path.iterdir()) == []


def test_a_directory_that_cannot_be_written_is_a_note_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    note = store_at(blocker / "prefixes").write(TOKENS, STATE)
    assert "cannot be written" in note


def test_the_files_name_the_format_they_hold(tmp_path):
    store = store_at(tmp_path)
    store.write(TOKENS, STATE)
    assert store.path(TOKENS).read_bytes().startswith(MAGIC)


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_a_size_setting_that_cannot_be_used_fails_the_run_closed_before_any_model_loads(monkeypatch, tmp_path, value):
    monkeypatch.setenv("DIAGNOSIS_PREFIX_CACHE_MB", value)
    lm = dspy.LM("embedded/probe-test", engine=LlamaEngine(model_path=str(tmp_path / "absent.gguf")))
    rule, message = preflight(lm)
    assert rule == "lm.not_configured" and "DIAGNOSIS_PREFIX_CACHE_MB" in message and repr(value) in message


def test_zero_turns_the_cache_off(monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_PREFIX_CACHE_MB", "0")
    assert prefix_cache.settings()[1] == 0


# --- with the real 0.5B -------------------------------------------------------------------------

SYSTEM = ("You answer questions about services with one short JSON object. " * 12).strip()
DEMO = [{"role": "user", "content": "Which service alerts? order-service fires HighMemoryUsage."},
        {"role": "assistant", "content": '{"service": "order-service"}'}]


def _ask(engine, question: str) -> str:
    lm = dspy.LM(EMBEDDED_MODELS["embedded-small"].model, engine=engine, temperature=0.0, max_tokens=24, cache=False)
    return lm(messages=[{"role": "system", "content": SYSTEM}, *DEMO, {"role": "user", "content": question}])[0]


def _engine():
    engine = LlamaEngine(EMBEDDED_MODELS["embedded-small"], n_threads=2)
    assert preflight(dspy.LM(EMBEDDED_MODELS["embedded-small"].model, engine=engine)) is None
    return engine


def _sources(engine):
    return [use.source for _, use in engine.prefix_log]


@pytest.mark.embedded
def test_a_new_engine_starts_from_the_saved_prefix_and_writes_what_a_warm_one_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_PREFIX_CACHE", str(tmp_path))
    first = _engine()
    cold = [_ask(first, "Which service alerts? user-service fires SlowResponse."),
            _ask(first, "Which service alerts? payment-service fires HighCPUUsage.")]
    assert _sources(first) == ["read", "memory"]
    (saved,) = tmp_path.glob("*.state")
    use = first.prefix_log[0][1]
    assert use.prefix_tokens >= prefix_cache.MIN_TOKENS and use.state_bytes > 0
    assert saved.stat().st_size > use.state_bytes
    first.close()

    second = _engine()  # as a new process: nothing of the first engine's memory
    warm = [_ask(second, "Which service alerts? user-service fires SlowResponse."),
            _ask(second, "Which service alerts? payment-service fires HighCPUUsage.")]
    assert _sources(second) == ["disk", "memory"]
    assert warm == cold
    second.close()


@pytest.mark.embedded
def test_a_damaged_saved_prefix_is_read_again_with_a_note_and_the_same_answer(tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_PREFIX_CACHE", str(tmp_path))
    first = _engine()
    answer = _ask(first, "Which service alerts? user-service fires SlowResponse.")
    first.close()
    (saved,) = tmp_path.glob("*.state")
    blob = bytearray(saved.read_bytes())
    blob[-100] ^= 0xFF
    saved.write_bytes(bytes(blob))

    second = _engine()
    assert _ask(second, "Which service alerts? user-service fires SlowResponse.") == answer
    (_, use), = second.prefix_log
    assert use.source == "read" and "does not match its checksum" in use.note
    # It was saved again, whole.
    assert PrefixStore(tmp_path, 1 << 30, second._prefixes.store.identity).read(
        second._llm.chat_tokens([{"role": "system", "content": SYSTEM}, *DEMO])[:use.prefix_tokens])[0] is not None
    second.close()


@pytest.mark.embedded
def test_a_changed_prefix_is_a_new_key_never_the_old_state(tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_PREFIX_CACHE", str(tmp_path))
    engine = _engine()
    _ask(engine, "Which service alerts? user-service fires SlowResponse.")
    lm = dspy.LM(EMBEDDED_MODELS["embedded-small"].model, engine=engine, temperature=0.0, max_tokens=24, cache=False)
    lm(messages=[{"role": "system", "content": SYSTEM.replace("short", "brief")}, *DEMO,
                 {"role": "user", "content": "Which service alerts? user-service fires SlowResponse."}])
    assert _sources(engine) == ["read", "read"]
    assert len(list(tmp_path.glob("*.state"))) == 2
    engine.close()


@pytest.mark.embedded
def test_a_warmed_machine_reads_no_stage_prefix_in_its_first_diagnosis(tmp_path, monkeypatch):
    from program.entry.api import diagnose
    from program.entry.warm import warm

    monkeypatch.setenv("DIAGNOSIS_PREFIX_CACHE", str(tmp_path))
    uses = dict(warm("embedded-small"))
    # The executor and the verifier are shown the demos in the answer's language: a prompt per language.
    assert set(uses) == {"planner", "gather", "composer", *(f"{stage} [{language}]" for language in ("zh", "en")
                         for stage in ("executor (narrow)", "executor (broad)", "verifier"))}
    assert all(use.source == "read" and use.prefix_tokens >= prefix_cache.MIN_TOKENS for use in uses.values())
    assert len(list(tmp_path.glob("*.state"))) == len(uses)

    engine = _engine()  # as the first `ask` after the warm-up, in a new process
    lm = dspy.LM(EMBEDDED_MODELS["embedded-small"].model, engine=engine, temperature=0.0, max_tokens=700)
    result = diagnose("只确认 order-service 是否存在 HighMemoryUsage 告警", lm=lm, db="sqlite://", compiled=False)
    assert result.usage["planner"].lm_calls == 1
    assert _sources(engine) and set(_sources(engine)) <= {"disk", "memory"}
    assert all(usage.cached_prompt_tokens > 0 for usage in result.usage.values() if usage.lm_calls)
    engine.close()

"""A saved program records the LM it was compiled for; diagnose() loads it only for that LM, and
otherwise runs uncompiled and says why in the audit record."""

import json

import pytest

from program.entry.api import diagnose
from program.stages.executor import Cite
from program.stages.compiled import COMPILED_REFUSED, COMPILED_USED, compiled_for, load_program, save_program
from program.lm.engine import embedded_lm, lm_identity
from program.lm.models import QWEN_0_5B
from program.stages.pipeline import Diagnosis
from tests.support.good_lm import good_lm

RUN = "20260101T000000Z"


@pytest.fixture
def compiled(tmp_path, monkeypatch):
    directory = tmp_path / "compiled"
    monkeypatch.setenv("DIAGNOSIS_COMPILED_DIR", str(directory))
    return directory


@pytest.fixture
def case(cases):
    return cases["high_memory_positive"]


def watched(case):
    """A good LM for the case, and the number of demo messages each of its citation prompts carried:
    the shipped citation step has demos, the one saved here has none, so it shows which one ran."""
    lm = good_lm(case)
    respond = lm.engine.responder
    demo_counts = []

    def counting(stage, user, demos):
        if stage == "claims":
            demo_counts.append(len(demos))
        return respond(stage, user, demos)

    lm.engine.responder = counting
    return lm, demo_counts


def without_demos() -> Cite:
    citation = Cite()
    citation.predict.demos = []
    return citation


def notes(store, result, rule):
    return [n.message for n in store.get_session(result.session_id).notes if n.rule == rule]


def test_a_program_saved_for_this_lm_is_used_and_the_record_names_it(compiled, case, store):
    lm, demo_counts = watched(case)
    path = save_program(without_demos(), RUN, lm)
    assert sorted(p.name for p in compiled.iterdir()) == [f"diagnosis-{RUN}.json"]
    assert compiled_for(path) == {"model": "scripted/test"}

    result = diagnose(case["question"], lm=lm, db=store)
    assert demo_counts == [0] and result.verdict == "PASS"
    assert notes(store, result, COMPILED_USED) == [f"compiled program {path}, compiled for scripted/test"]
    assert notes(store, result, COMPILED_REFUSED) == []


def test_a_program_saved_for_another_lm_is_refused_and_the_record_says_why(compiled, case, store):
    lm, demo_counts = watched(case)
    other = lm.copy(model="scripted/other")
    save_program(without_demos(), RUN, lm)

    result = diagnose(case["question"], lm=other, db=store)
    plain = diagnose(case["question"], lm=other, db=store, compiled=False)
    assert demo_counts[0] > 0 and demo_counts[0] == demo_counts[1]
    assert notes(store, result, COMPILED_REFUSED) == [
        f"diagnosis-{RUN}.json was compiled for scripted/test, this run uses scripted/other: running uncompiled"]
    # A note, not an error: the verdict is the uncompiled program's.
    assert result.verdict == plain.verdict == "PASS" and result.errors == plain.errors == []
    assert notes(store, plain, COMPILED_REFUSED) == []


def test_embedded_models_are_told_apart_by_weights_and_quantisation(compiled, store):
    small, default = embedded_lm("embedded-small"), embedded_lm("embedded")
    path = save_program(Cite(), RUN, small)
    saved = json.loads(path.read_text(encoding="utf-8"))["metadata"]["compiled_for"]
    assert saved == lm_identity(small)
    assert (saved["name"], saved["quantisation"], saved["sha256"]) == ("embedded-small", "Q4_K_M", QWEN_0_5B.sha256)

    program, note = load_program(store, default)
    assert program is None and note.rule == COMPILED_REFUSED
    assert note.message == (f"diagnosis-{RUN}.json was compiled for embedded-small (Qwen2.5-Coder-0.5B-Instruct "
                            "Q4_K_M), this run uses embedded (Qwen2.5-Coder-1.5B-Instruct Q4_K_M): running uncompiled")
    program, note = load_program(store, small)
    assert isinstance(program, Diagnosis) and note.rule == COMPILED_USED


def test_the_newest_file_compiled_for_this_lm_counts(compiled, case, store):
    lm, _ = watched(case)
    save_program(without_demos(), "20260101T000000Z", lm)
    newer = save_program(without_demos(), "20260102T000000Z", lm)
    # A program compiled for a hosted LM leaves the one shipped for this LM in use.
    save_program(without_demos(), "20260103T000000Z", lm.copy(model="scripted/other"))
    program, note = load_program(store, lm)
    assert isinstance(program, Diagnosis) and note.message == f"compiled program {newer}, compiled for scripted/test"
    # An LM none was compiled for is told about the newest file.
    program, note = load_program(store, lm.copy(model="scripted/third"))
    assert program is None and note.message == ("diagnosis-20260103T000000Z.json was compiled for scripted/other, "
                                                "this run uses scripted/third: running uncompiled")


def test_a_newer_file_that_cannot_say_its_lm_is_not_passed_over(compiled, case, store):
    lm, _ = watched(case)
    save_program(without_demos(), "20260101T000000Z", lm)
    (compiled / "diagnosis-20260102T000000Z.json").write_text("{broken")
    # It may be the newest program for this LM: running an older one in its place would hide that.
    program, note = load_program(store, lm)
    assert program is None and note.message.startswith("diagnosis-20260102T000000Z.json cannot be read")


def test_a_file_saved_before_programs_recorded_their_lm_is_refused(compiled, case, store):
    lm, demo_counts = watched(case)
    compiled.mkdir()
    Diagnosis(citation=without_demos()).save(str(compiled / f"diagnosis-{RUN}.json"))

    result = diagnose(case["question"], lm=lm, db=store)
    assert demo_counts[0] > 0 and result.verdict == "PASS"
    assert notes(store, result, COMPILED_REFUSED) == [
        f"diagnosis-{RUN}.json does not record which LM it was compiled for (files saved before that was "
        "recorded do not): running uncompiled"]


@pytest.mark.parametrize("content, reason", [
    (b"{broken", "cannot be read (JSONDecodeError"),
    (b"\xff\xfe{}", "cannot be read (UnicodeDecodeError"),
    (b"[1, 2]", "does not record which LM"),
    (b'{"metadata": {"compiled_for": "scripted/test"}}', "does not record which LM"),
    # The right LM, but a state this program's stages cannot take (the executor was once a Predict).
    (json.dumps({"executor": {"demos": []}, "metadata": {"compiled_for": {"model": "scripted/test"},
                                                         "dependency_versions": {}}}).encode(), "cannot be loaded ("),
])
def test_an_unusable_file_is_refused_with_a_reason_never_a_crash(compiled, case, store, content, reason):
    lm, demo_counts = watched(case)
    compiled.mkdir()
    (compiled / f"diagnosis-{RUN}.json").write_bytes(content)

    program, note = load_program(store, lm)
    assert program is None and note.rule == COMPILED_REFUSED
    assert note.message.startswith(f"diagnosis-{RUN}.json ") and reason in note.message
    assert note.message.endswith(": running uncompiled")
    result = diagnose(case["question"], lm=lm, db=store)
    assert result.verdict == "PASS" and demo_counts[0] > 0
    assert notes(store, result, COMPILED_REFUSED) == [note.message]


def test_with_nothing_compiled_the_record_has_no_compiled_note(compiled, case, store):
    lm, demo_counts = watched(case)
    assert load_program(store, lm) == (None, None)
    result = diagnose(case["question"], lm=lm, db=store)
    rules = {n.rule for n in store.get_session(result.session_id).notes}
    assert demo_counts[0] > 0 and not rules & {COMPILED_USED, COMPILED_REFUSED}

"""The answer's language reaches every stage that writes what a user reads (the executor, the
verifier, the composer): as an input the instruction names, and in the demos each is shown, which
are only those written in it. A compiled program keeps its demos in both languages through a save
and a load, and shows each question those in its answer's language."""

import pytest

from program.entry.api import diagnose
from program.evidence.language import question_language
from program.stages.executor import Cite
from program.stages.compiled import load_program, save_program
from signatures.demos import executor_demos, for_language, judge_demos
from tests.support.good_lm import broad, good_lm
from tests.support.scripted import field_value

WRITERS = ("claims", "judgement", "answer")


def asked(case, question, store, lm=None):
    """Every request of a diagnosis of `question`: (stage, user message, demo messages)."""
    seen = []
    lm = lm or good_lm(broad(case, question))
    respond = lm.engine.responder

    def recording(stage, user, demos):
        seen.append((stage, user, demos))
        return respond(stage, user, demos)

    lm.engine.responder = recording
    diagnose(question, lm=lm, db=store)
    return seen


def demo_questions(demos) -> list[str]:
    return [q for d in demos if (q := field_value(d, "question"))]


@pytest.mark.parametrize("question", ["Investigate the memory alerts of order-service.", "排查 order-service 的内存告警情况。"])
def test_each_writing_stage_gets_the_answer_s_language_and_only_demos_in_it(cases, store, question):
    language = question_language(question)
    seen = asked(cases["high_memory_positive"], question, store)
    assert {stage for stage, _, _ in seen} >= set(WRITERS), [s for s, _, _ in seen]
    for stage, user, demos in seen:
        if stage not in WRITERS:
            continue
        assert field_value(user, "language") == language, stage
        shown = demo_questions(demos)
        if stage != "answer":  # the composer ships no demos
            assert shown, f"{stage} was shown no demos"
        assert all(question_language(q) == language for q in shown), (stage, shown)


def test_the_language_setting_beats_the_question_s_own(cases, store, monkeypatch):
    """DIAGNOSIS_LANGUAGE=en: a Chinese question is answered in English, by every writing stage."""
    monkeypatch.setenv("DIAGNOSIS_LANGUAGE", "en")
    question = "排查 order-service 的内存告警情况。"
    seen = asked(cases["high_memory_positive"], question, store)
    writing = [(stage, user, demos) for stage, user, demos in seen if stage in WRITERS]
    assert writing and all(field_value(user, "language") == "en" for _, user, _ in writing)
    assert all(question_language(q) == "en" for _, _, demos in writing for q in demo_questions(demos))


def test_the_shipped_demos_are_the_same_cases_in_both_languages_with_the_same_labels():
    for demos, label in ((executor_demos(), lambda d: [(c.claim_type, c.evidence_bindings) for c in d.claims]),
                         (judge_demos(), lambda d: (d.excerpts, d.judgement))):
        zh, en = for_language(demos, "zh"), for_language(demos, "en")
        assert len(zh) == len(en) == len(demos) // 2
        assert [label(d) for d in zh] == [label(d) for d in en]
        assert all(question_language(d.question) == d.language for d in demos)


def test_the_instructions_say_to_write_in_the_answer_s_language():
    from signatures.diagnosis import CiteEvidence, ComposeAnswer, JudgeClaim

    for signature in (CiteEvidence, JudgeClaim, ComposeAnswer):
        assert "language" in signature.input_fields
        assert "answer's language" in signature.instructions, signature.__name__


def test_a_compiled_program_keeps_both_languages_through_save_and_load(cases, store, tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_COMPILED_DIR", str(tmp_path / "compiled"))
    case = cases["high_memory_positive"]
    citation = Cite()
    # One case in both languages, and a demo saved before demos named a language (shown to both).
    unnamed = executor_demos()[0].copy()
    del unnamed["language"]
    citation.predict.demos = [*executor_demos()[2:4], unnamed]
    lm = good_lm(case)
    save_program(citation, "20260101T000000Z", lm)
    loaded, _ = load_program(None, lm)
    demos = loaded.executor.predict.demos
    assert [d.get("language") for d in demos] == ["zh", "en", None]
    assert [len(for_language(demos, language)) for language in ("zh", "en")] == [2, 2]
    for question in ("Only confirm whether order-service has a HighMemoryUsage alert.",
                     "只确认 order-service 是否存在 HighMemoryUsage 告警"):
        seen = asked(case, question, store, lm=good_lm({**case, "question": question}))
        shown = [demo_questions(demos) for stage, _, demos in seen if stage == "claims"]
        named = next(d.question for d in for_language(executor_demos()[2:4], question_language(question)))
        assert shown and all(sorted(qs) == sorted([named, unnamed.question]) for qs in shown), shown

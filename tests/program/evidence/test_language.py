"""Answers speak the user's language: the sentences code writes follow the question (Chinese or
English) unless DIAGNOSIS_LANGUAGE or the caller says otherwise, in the result, the record and the CLI."""

import json
import re

import pytest

from program.entry import cli
from program.entry.api import diagnose
from program.evidence.language import HAN, NO_HIT, TEXT, answer_language, question_language
from tests.support.good_lm import good_lm

ENGLISH = "Only confirm whether inventory-service has HikariCP connection pool exhaustion."


def english(case):
    return {**case, "question": ENGLISH}


def test_the_question_decides_the_language():
    assert question_language("只确认 order-service 是否存在 HighMemoryUsage 告警") == "zh"
    assert question_language("Does order-service have a HighMemoryUsage alert?") == "en"
    assert question_language("order-service 有 HighCPUUsage 吗") == "zh"


def test_a_setting_overrides_the_question_and_a_bad_one_is_an_error(monkeypatch):
    assert answer_language("Does order-service alert?", "zh") == "zh"
    monkeypatch.setenv("DIAGNOSIS_LANGUAGE", "en")
    assert answer_language("order-service 告警了吗") == "en"
    monkeypatch.setenv("DIAGNOSIS_LANGUAGE", "auto")
    assert answer_language("order-service 告警了吗") == "zh"
    monkeypatch.setenv("DIAGNOSIS_LANGUAGE", "fr")
    with pytest.raises(ValueError, match="DIAGNOSIS_LANGUAGE must be zh, en or auto"):
        answer_language("anything")


def test_both_languages_have_every_sentence():
    assert TEXT["zh"].keys() == TEXT["en"].keys()
    assert not any(HAN.search(text) for text in TEXT["en"].values())
    assert all(HAN.search(text) for key, text in TEXT["zh"].items() if key not in ("excerpt_join", "negative_line"))
    assert NO_HIT["zh"].keys() == NO_HIT["en"].keys()
    assert not any(HAN.search(text) for text in NO_HIT["en"].values())
    assert all(HAN.search(text) for text in NO_HIT["zh"].values())


def test_an_english_question_gets_an_english_answer_in_the_result_and_the_record(cases, store):
    case = english(cases["hikaricp_negative"])
    result = diagnose(case["question"], lm=good_lm(case), db=store)
    assert result.verdict == "PASS" and result.language == "en"
    assert result.answer.startswith("Conclusion: the evidence was verified.")
    assert "- inventory-service's logs have no line matching 'HikariCP' (the search found none)" in result.answer
    assert not HAN.search(result.answer)
    record = store.get_session(result.session_id)
    assert record.language == "en" and record.answer == result.answer


def test_a_chinese_question_keeps_its_chinese_answer(cases, store):
    case = cases["hikaricp_negative"]
    result = diagnose(case["question"], lm=good_lm(case), db=store)
    assert result.language == "zh" and result.answer.startswith("结论：证据核实通过。")
    assert "- inventory-service 的日志中没有与“HikariCP”匹配的记录（检索未找到）" in result.answer


def test_the_cli_answers_in_the_language_asked_for(cases, monkeypatch, tmp_path, capsys):
    case = english(cases["hikaricp_negative"])
    monkeypatch.setattr("program.entry.api.resolve_lm", lambda spec: good_lm(case))
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    assert cli.main(["--db", db, "ask", ENGLISH, "--json", "--language", "zh"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["language"] == "zh" and result["answer"].startswith("结论：")
    assert cli.main(["--db", db, "ask", ENGLISH]) == 0
    out = capsys.readouterr().out
    assert "Conclusion: the evidence was verified." in out and not re.search("结论", out)


def test_a_bad_language_setting_is_a_usage_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DIAGNOSIS_LANGUAGE", "klingon")
    assert cli.main(["--db", f"sqlite:///{tmp_path / 'audit.db'}", "ask", ENGLISH]) == 2
    assert "DIAGNOSIS_LANGUAGE must be zh, en or auto" in capsys.readouterr().err

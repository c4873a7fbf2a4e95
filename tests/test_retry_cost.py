"""benchmarks/retry_cost.py: each LM call is assigned to its question, and a retry's seconds are
taken off only the narrow diagnoses that retried."""

import json

import pytest

from benchmarks.retry_cost import main, measure

QUESTION_A = "只确认 order-service 是否存在 HighMemoryUsage 告警"
QUESTION_B = "Did order-service log any database connection timeouts?"


def call(stage: str, question: str, seconds: float, scope: str = "narrow", retry: str = "none") -> dict:
    sections = {"question": question}
    if stage == "claims":
        sections |= {"plan": json.dumps({"scope": scope}), "observations": "#1 ...", "retry_context": retry}
    text = "\n\n".join(f"[[ ## {k} ## ]]\n{v}" for k, v in sections.items())
    return {"system": f"Your output fields are:\n1. `{stage}` (str):", "messages": [{"role": "user", "text": text}],
            "reply": "{}", "seconds": seconds}


def write_run(folder, rows, calls):
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"rows": rows}), encoding="utf-8")
    (folder / "transcript.jsonl").write_text("\n".join(json.dumps(c) for c in calls), encoding="utf-8")
    return folder


@pytest.fixture
def questions(monkeypatch):
    monkeypatch.setattr("benchmarks.retry_cost.every_question", lambda: [
        {"id": "a", "question": QUESTION_A}, {"id": "b", "question": QUESTION_B}, {"id": "c", "question": QUESTION_A}])


def test_the_retry_calls_come_off_the_narrow_diagnoses_that_retried(tmp_path, questions):
    rows = [{"id": "a", "set": "hard", "lm_calls": 4, "seconds": 30.0},
            {"id": "b", "set": "hard", "lm_calls": 3, "seconds": 12.0},
            {"id": "c", "set": "hard", "lm_calls": 3, "seconds": 50.0}]
    calls = [call("plan", QUESTION_A, 5), call("claims", QUESTION_A, 8),
             call("claims", QUESTION_A, 14, retry="Refused claim-1: ..."), call("judgement", QUESTION_A, 3),
             call("plan", QUESTION_B, 4), call("claims", QUESTION_B, 6), call("judgement", QUESTION_B, 2),
             call("plan", QUESTION_A, 5), call("claims", QUESTION_A, 40, scope="broad"), call("judgement", QUESTION_A, 5)]
    result = measure(write_run(tmp_path / "run", rows, calls))
    assert [r["id"] for r in result["rows"]] == ["a", "b"]
    assert result["rows"][0]["retry_seconds"] == 14 and not result["rows"][1]["retried"]
    assert result["sets"]["hard"] == {"narrow": 2, "retried": 1, "median_seconds": 21.0,
                                      "median_seconds_without_retry": 14.0, "growth": 0.5}


def test_a_transcript_that_does_not_match_its_rows_is_refused(tmp_path, questions, capsys):
    rows = [{"id": "a", "set": "hard", "lm_calls": 2, "seconds": 9.0},
            {"id": "b", "set": "hard", "lm_calls": 2, "seconds": 9.0}]
    shifted = write_run(tmp_path / "shifted", rows, [call("plan", QUESTION_A, 1), call("plan", QUESTION_B, 1),
                                                     call("claims", QUESTION_B, 1), call("judgement", QUESTION_B, 1)])
    assert main([str(shifted)]) == 2
    assert "a: its calls were asked" in capsys.readouterr().err
    short = write_run(tmp_path / "short", rows, [call("plan", QUESTION_A, 1)])
    assert main([str(short)]) == 2
    assert "1 transcript entries" in capsys.readouterr().err

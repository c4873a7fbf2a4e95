"""The whole-pipeline benchmark's comparison of a compiled program with the uncompiled one: what its
report says moved, from rows as a run writes them (no model)."""

from benchmarks.diagnosis_time import UNCOMPILED, report, summary

COMPILED = "compiled/diagnosis-20261207T132226Z.json"
META = {"run": "bench-test", "lm": "embedded", "mode": "recorded", "started": "now", "compiled": COMPILED}


def row(qid: str, program: str, verdict: str, right: bool, seconds: float = 10.0) -> dict:
    return {"id": qid, "set": "hard", "kind": "", "verdict": verdict, "expected": "PASS", "right": right,
            "unsafe_pass": False, "wrong_pass": verdict == "PASS" and not right, "gatekeeper": "pass/none",
            "claims": 1, "verified": int(right), "forbidden_hits": [], "missing_facts": [], "lm_calls": 3,
            "prompt_tokens": 100, "completion_tokens": 10, "seconds": seconds, "verifier_judged": 1,
            "overrides": [], "program": program}


def test_the_report_names_every_question_whose_verdict_or_rightness_moved_between_the_programs():
    name = "diagnosis-20261207T132226Z"
    rows = [row("same", UNCOMPILED, "PASS", True), row("same", name, "PASS", True),
            row("lost", UNCOMPILED, "PASS", True), row("lost", name, "LOW_CONFID", False),
            row("wrong_now", UNCOMPILED, "PASS", True), row("wrong_now", name, "PASS", False, seconds=30.0)]
    totals = {**summary([r for r in rows if r["program"] == UNCOMPILED]),
              "compiled": summary([r for r in rows if r["program"] == name])}
    text = report(META, rows, totals)
    assert "| hard | 3 of 3 | 0 | 0 | 3 of 3 |" in text and "| hard | 1 of 3 | 0 | 1 | 3 of 3 |" in text
    assert "- lost: uncompiled PASS (right), compiled LOW_CONFID (wrong)" in text
    assert "- wrong_now: uncompiled PASS (right), compiled PASS (wrong)" in text
    assert "- same:" not in text
    assert "| wrong_now | diagnosis-20261207T132226Z | hard | PASS |" in text


def test_a_run_of_one_program_reports_as_before():
    rows = [row("only", UNCOMPILED, "PASS", True)]
    text = report({**META, "compiled": None}, rows, summary(rows))
    assert "compiled" not in text.split("| question |")[0] and "| hard | 1 of 1 |" in text

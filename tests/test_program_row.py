import json

import pytest

from benchmarks.program_row import Mismatch, compare, main


def results(run_id, scores, *, rules=None, recording=None, first=None):
    runs = [{"label": "uncompiled", "case_id": c, "kind": c.split("_")[0], "split": "held-out", "score": s,
             "normalised": round((s - 0.1) / 0.9, 4), "floor": 0.1, "ceiling": 1.0,
             "verdict": "PASS" if s > 0.5 else "LOW_CONFID", "expected_verdict": "PASS"} for c, s in scores.items()]
    for run in runs:
        if first is not None:
            run.update(first_score=first[run["case_id"]], attempts=2 if first[run["case_id"]] != run["score"] else 1)
    for label, rule in (rules or {}).items():
        runs += [{**r, "label": label, "score": rule[r["case_id"]]} for r in runs if r["label"] == "uncompiled"]
    return {"meta": {"run_id": run_id, "recording": recording or {"shuffled_refs": True}, "lm_identity": {"model": "m"}},
            "runs": runs}


def test_the_gain_is_paired_per_case_and_the_moved_cases_are_named():
    before = results("a", {"near_one": 0.3, "near_two": 0.3, "mixed_one": 1.0})
    after = results("b", {"near_one": 1.0, "near_two": 0.3, "mixed_one": 0.8},
                    rules={"rule": {"near_one": 0.5, "near_two": 0.5, "mixed_one": 0.5},
                           "structured rule": {"near_one": 1.0, "near_two": 1.0, "mixed_one": 1.0}})
    found = compare(before, after)
    assert found["gain"]["gain"] == round((0.7 + 0.0 - 0.2) / 3, 4)
    assert found["rows"]["before"]["kinds"] == {"mixed": 1.0, "near": 0.3}
    assert found["rows"]["after"]["answers_right"] == 2
    assert [m["case_id"] for m in found["moved"]] == ["mixed_one", "near_one"]
    assert found["over_rules"]["rule"]["gain"] == round((0.5 - 0.2 + 0.3) / 3, 4)
    assert found["over_rules"]["structured rule"]["gain"] == round((0.0 - 0.7 - 0.2) / 3, 4)
    # One attempt per case: no first-attempt row of its own.
    assert "after, first attempt" not in found["rows"] and found["first_attempt_gain"] is None


def test_a_wrong_answer_passed_is_no_right_answer():
    """A PASS for the opposite of what the evidence says is the expected verdict for a wrong answer."""
    before = results("a", {"near_one": 0.3, "near_two": 0.3})
    after = results("b", {"near_one": 1.0, "near_two": 0.6})
    after["runs"][1]["parts"] = {"verdict": 0.0, "polarity": 0.0}
    assert after["runs"][1]["verdict"] == after["runs"][1]["expected_verdict"] == "PASS"
    assert compare(before, after)["rows"]["after"]["answers_right"] == 1


def test_a_second_chance_is_reported_apart_from_the_first_attempt():
    before = results("a", {"near_one": 0.3, "near_two": 0.3})
    after = results("b", {"near_one": 1.0, "near_two": 1.0}, first={"near_one": 0.3, "near_two": 1.0},
                    recording={"shuffled_refs": True, "screened_refs": True})
    found = compare(before, after)
    assert found["rows"]["after, first attempt"]["mean"] == round((0.3 + 1.0) / 2, 3)
    assert found["first_attempt_gain"]["gain"] == round(0.7 / 2, 4) and found["gain"]["gain"] == 0.7
    # A first attempt that was not used has no verdict of its own in the run.
    assert found["rows"]["after, first attempt"]["answers_right"] is None
    # The screen is part of the program: runs that differ in it alone are compared, and it is said.
    assert found["screened"] == {"before": False, "after": True}


def test_runs_that_recorded_other_evidence_or_other_cases_are_refused(tmp_path, capsys):
    with pytest.raises(Mismatch, match="recording"):
        compare(results("a", {"x": 1.0}, recording={"shuffled_refs": False}), results("b", {"x": 1.0}))
    with pytest.raises(Mismatch, match="same held-out cases"):
        compare(results("a", {"x": 1.0}), results("b", {"y": 1.0}))
    for name, payload in (("a", results("a", {"x": 1.0})), ("b", results("b", {"y": 1.0}))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(payload))
    assert main(["--before", str(tmp_path / "a"), "--after", str(tmp_path / "b")]) == 2
    assert "Mismatch" in capsys.readouterr().err and not (tmp_path / "b" / "program_row.md").exists()

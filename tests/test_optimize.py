"""optimize.py end to end on a scripted LM that cites correctly only when it is shown demos."""

import json

import pytest

import optimize
from devset.gold import gold_executor_output, gold_plan, gold_tool_calls
from program.entry.api import diagnose
from program.entry.audit import AuditStore
from program.lm.compiled import load_program, newest_compiled
from tests.support.good_lm import pass_all
from tests.support.scripted import field_value, scripted_lm


def learner(cases, *, learns=True):
    lm_cases = [c for c in cases.values() if c["runs_lm"]]

    def case_for(user):
        # The longest question that occurs in the message: two cases may share a prefix.
        return max((c for c in lm_cases if c["question"] in user), key=lambda c: len(c["question"]))

    def respond(stage, user, demos):
        case = case_for(user)
        if stage == "plan":
            return {"plan": gold_plan(case), "tool_calls": gold_tool_calls(case)}
        if stage == "tool_calls":
            return {"tool_calls": []}
        if stage == "claims":
            output = gold_executor_output(case, field_value(user, "observations"))
            # Only gold demos from the devset teach it; the demos the program ships with do not.
            shown_gold = any(c["question"] in demo for demo in demos for c in lm_cases)
            if not (learns and shown_gold):
                output["claims"][0]["evidence_bindings"][0]["raw_path"] = "$.alerts[42]"
            return output
        if stage == "judgement":
            return pass_all(user)
        return {"answer": case["gold"]["answer"]}

    return scripted_lm(respond)


@pytest.fixture
def run_optimize(tmp_path, monkeypatch):
    def run(lm, *extra):
        monkeypatch.setattr(optimize, "resolve_lm", lambda spec: lm)
        code = optimize.main(["--out", str(tmp_path / "results"), "--compiled-dir", str(tmp_path / "compiled"),
                              "--no-cache", *extra])
        assert code == 0
        (run_dir,) = sorted((tmp_path / "results").iterdir())[-1:]
        return json.loads((run_dir / "results.json").read_text()), (run_dir / "report.md").read_text(), run_dir

    return run


def test_optimize_saves_a_program_that_loads_and_changes_behaviour(cases, run_optimize, tmp_path, monkeypatch):
    lm = learner(cases)
    results, report, run_dir = run_optimize(lm)
    by_label = {ev["label"]: ev for ev in results["evaluations"]}
    assert set(by_label) == {"uncompiled", "labeled-executor", "labeled-all", "bootstrap"}
    assert by_label["uncompiled"]["held_out"] < by_label["labeled-executor"]["held_out"] == 1.0
    assert by_label["uncompiled"]["fixture"] == 1.0  # the offline reject fixture needs no LM
    assert results["meta"]["saved"] and results["meta"]["chosen"] in ("labeled-executor", "labeled-all", "bootstrap")

    monkeypatch.setenv("DIAGNOSIS_COMPILED_DIR", str(tmp_path / "compiled"))
    assert newest_compiled() is not None
    store = AuditStore("sqlite://")
    question = cases["narrow_forbidden"]["question"]  # held out: never a demo
    compiled = diagnose(question, lm=lm, db=store, program=load_program(store))
    plain = diagnose(question, lm=lm, db=store, compiled=False)
    assert compiled.verdict == "PASS" and plain.verdict == "REJECT"


def test_report_figures_come_from_the_run(cases, run_optimize):
    good, good_report, run_dir = run_optimize(learner(cases), "--optimizers", "labeled-executor")
    bad, _, _ = run_optimize(learner(cases, learns=False), "--optimizers", "labeled-executor")
    good_ev = {ev["label"]: ev for ev in good["evaluations"]}
    bad_ev = {ev["label"]: ev for ev in bad["evaluations"]}
    assert good_ev["labeled-executor"]["held_out"] > bad_ev["labeled-executor"]["held_out"]
    assert bad["meta"].get("saved") is None and "not saved" in json.dumps(bad["notes"])

    store = AuditStore(f"sqlite:///{run_dir / 'audit.db'}")
    for ev in good["evaluations"]:
        held = [r["score"] for r in ev["runs"] if r["split"] == "held-out"]
        assert ev["held_out"] == pytest.approx(sum(held) / len(held), abs=1e-4)
        assert f"| {ev['label']} | {ev['train']} | {ev['held_out']} |" in good_report
        for r in ev["runs"]:
            if r["split"] != "fixture":
                record = store.get_session(r["session_id"])
                assert record.verdict == r["verdict"]
                assert sum(u.lm_calls for u in record.usage.values()) == r["lm_calls"]


def test_eval_only_and_bad_flags(cases, run_optimize):
    results, report, _ = run_optimize(learner(cases), "--eval-only", "--no-compiled")
    assert [ev["label"] for ev in results["evaluations"]] == ["uncompiled"]
    assert "| uncompiled | high_memory_positive | train |" in report
    with pytest.raises(SystemExit):
        optimize.main(["--optimizers", "magic"])

"""optimize.py end to end on a scripted LM that cites correctly only when it is shown devset demos."""

import json

import pytest

import optimize
from devset import load_devset
from devset.gold import gold_executor_output, gold_plan, gold_tool_calls
from program.entry.api import diagnose
from program.entry.audit import AuditStore
from program.lm.compiled import load_program, newest_compiled
from tests.support.good_lm import pass_all
from tests.support.scripted import field_value, scripted_lm

DEVSET = [c for c in load_devset() if c["runs_lm"]]
HELD_OUT_QUESTION = next(c for c in DEVSET if c["case_id"] == "alert_gateway_errorrate_zh")["question"]


def learner(*, learns=True):
    def case_for(user):
        # The longest question that occurs in the message: two cases may share a prefix.
        return max((c for c in DEVSET if c["question"] in user), key=lambda c: len(c["question"]))

    def respond(stage, user, demos):
        if stage == "new_instruction":  # GEPA's reflection: it proposes an instruction
            return {"new_instruction": "Cite the exact refs; never guess."}
        case = case_for(user)
        if stage == "plan":
            return {"plan": gold_plan(case), "tool_calls": gold_tool_calls(case)}
        if stage == "claims":
            output = gold_executor_output(case, field_value(user, "observations"))
            # Only gold demos from the devset teach it; the demos the program ships with do not.
            shown_gold = any(c["question"] in demo for demo in demos for c in DEVSET)
            if not (learns and shown_gold):
                output["claims"][0]["evidence_bindings"][0]["raw_path"] = "$.alerts[42]"
            return output
        if stage == "judgement":
            return pass_all(user)
        return {"answer": "-"}

    return scripted_lm(respond)


@pytest.fixture
def run_optimize(tmp_path, monkeypatch):
    def run(lm, *extra):
        monkeypatch.setattr(optimize, "resolve_lm", lambda spec: lm)
        code = optimize.main(["--out", str(tmp_path / "results"), "--compiled-dir", str(tmp_path / "compiled"),
                              *extra])
        assert code == 0
        run_dir = sorted((tmp_path / "results").iterdir())[-1]
        return json.loads((run_dir / "results.json").read_text()), run_dir

    return run


def test_optimize_saves_a_program_that_beats_the_noise_and_diagnose_uses_it(run_optimize, tmp_path, monkeypatch):
    lm = learner()
    results, run_dir = run_optimize(lm, "--optimizers", "labeled,bootstrap,knn,gepa", "--gepa-calls", "8")
    by_label = {c["label"]: c for c in results["candidates"]}
    assert list(by_label) == ["uncompiled", "labeled", "bootstrap", "knn", "gepa"]
    assert by_label["uncompiled"]["held_out"] < 0.5 < by_label["labeled"]["held_out"] == by_label["knn"]["held_out"] == 1.0
    assert "no training run reached" in by_label["bootstrap"]["note"] and not by_label["bootstrap"]["runs"]
    assert by_label["gepa"]["runs"] and by_label["gepa"]["held_out"] == by_label["uncompiled"]["held_out"]
    gain = results["gains"]["labeled"]
    assert gain["cases"] == 16 and 0 < gain["low"] <= gain["gain"] <= gain["high"]
    assert results["meta"]["chosen"] == "labeled" and results["meta"]["saved"]
    assert results["fixture"]["ok"] and results["fixture"]["severity"] == "reject"
    for name in ("report.md", "report.html", "transcript.jsonl", "embeddings.json"):
        assert (run_dir / name).stat().st_size > 0
    page = (run_dir / "report.html").read_text()
    assert "<svg" in page and page.count("<tr>") == 1 + 5 + 1 + 4 * 34

    monkeypatch.setenv("DIAGNOSIS_COMPILED_DIR", str(tmp_path / "compiled"))
    assert newest_compiled() is not None
    store = AuditStore("sqlite://")
    compiled = diagnose(HELD_OUT_QUESTION, lm=lm, db=store)
    plain = diagnose(HELD_OUT_QUESTION, lm=lm, db=store, compiled=False)
    assert compiled.verdict == "PASS" and plain.verdict == "REJECT"
    train = {c["question"] for c in DEVSET if c["split"] == "train"}
    demos = load_program(store).executor.predict.demos
    assert demos and all(demo["question"] in train for demo in demos)


def test_a_gain_within_the_noise_saves_nothing(run_optimize):
    results, run_dir = run_optimize(learner(learns=False), "--optimizers", "labeled")
    assert results["gains"]["labeled"] == {"gain": 0.0, "low": 0.0, "high": 0.0, "cases": 16}
    assert results["meta"].get("saved") is None and "within the noise" in results["meta"]["why"]
    assert "Saved: nothing" in (run_dir / "report.md").read_text()


def test_replay_rescores_a_run_without_the_model_and_notices_a_changed_transcript(run_optimize, monkeypatch, capsys):
    results, run_dir = run_optimize(learner(), "--optimizers", "labeled", "--pipeline")
    whole = {(r["program"], r["verdict"]) for r in results["pipeline"]}
    assert ("labeled", "PASS") in whole and ("uncompiled", "PASS") not in whole
    assert "## Whole diagnoses on the held-out split" in (run_dir / "report.md").read_text()
    untouchable = scripted_lm(lambda *request: pytest.fail("a replay must not call the model"))
    monkeypatch.setattr(optimize, "resolve_lm", lambda spec: untouchable)
    capsys.readouterr()
    assert optimize.main(["--replay", str(run_dir)]) == 0
    assert "replay reproduces every recorded score, verdict and rule: True" in capsys.readouterr().out
    replayed = json.loads((run_dir / "replay" / "results.json").read_text())
    assert [c["held_out"] for c in replayed["candidates"]] == [c["held_out"] for c in results["candidates"]]

    transcript = (run_dir / "transcript.jsonl").read_text()
    (run_dir / "transcript.jsonl").unlink()
    with pytest.raises(SystemExit):
        optimize.main(["--replay", str(run_dir)])
    assert "has no transcript.jsonl" in capsys.readouterr().err
    (run_dir / "transcript.jsonl").write_text(transcript)
    lines = transcript.splitlines()
    (run_dir / "transcript.jsonl").write_text("\n".join(lines[:-3]) + "\n")
    assert optimize.main(["--replay", str(run_dir)]) == 1
    assert "replay reproduces every recorded score, verdict and rule: False" in capsys.readouterr().out


def test_bootstrap_interval_of_a_paired_gain():
    def runs(scores):
        return [optimize.CaseRun(f"c{n}", "f", "held-out", s, "PASS", "pass/none", [], [], 1, 0.0, "")
                for n, s in enumerate(scores)]

    same = optimize.bootstrap_gain(runs([0.5, 1.0, 0.0]), runs([0.5, 1.0, 0.0]))
    assert same == {"gain": 0.0, "low": 0.0, "high": 0.0, "cases": 3}
    mixed = optimize.bootstrap_gain(runs([0.0] * 10), runs([1.0] * 5 + [-1.0] * 5))
    assert mixed["gain"] == 0.0 and mixed["low"] < 0 < mixed["high"]


@pytest.mark.parametrize("flags", [["--optimizers", "magic"], ["--k", "0"], ["--threshold", "1.5"],
                                   ["--replay", "/nowhere"]])
def test_bad_flags_exit_with_usage(flags):
    with pytest.raises(SystemExit) as exit_info:
        optimize.main(flags)
    assert exit_info.value.code == 2


def test_a_compiled_program_that_cannot_be_loaded_is_not_used(tmp_path, monkeypatch, caplog):
    """A file saved for another program's stages (the executor was a Predict before it became the
    citation module) or a broken one: the uncompiled program runs, and the log says why."""
    monkeypatch.setenv("DIAGNOSIS_COMPILED_DIR", str(tmp_path))
    (tmp_path / "diagnosis-20260101T000000Z.json").write_text(json.dumps({"executor": {"demos": []}}))
    with caplog.at_level("WARNING"):
        assert load_program(AuditStore("sqlite://")) is None
    assert "cannot be loaded" in caplog.text
    (tmp_path / "diagnosis-20260102T000000Z.json").write_text("{broken")
    assert load_program(AuditStore("sqlite://")) is None

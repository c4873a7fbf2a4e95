"""python optimize.py end to end with scripted LMs: what it compiles, scores, saves and replays."""

import html
import json
from pathlib import Path

import dspy
import pytest

import optimize
from devset import load_devset
from devset.gold import gold_executor_output, gold_plan, gold_tool_calls
from devset.questions import ask, questions
from devset.recorded import WEIGHTS
from optimization.candidates import STRATA, per_kind, stratified, stratum
from optimization.guard import Guard, narrower_than_saved
from optimization.replay import scores
from optimization.report import gain_text
from optimization.statistics import paired_gain, part_correlation
from program.entry.api import diagnose
from program.store.audit import AuditStore
from program.stages.compiled import newest_compiled, save_program
from program.stages.executor import Cite
from tests.support.good_lm import pass_all
from tests.support.scripted import ScriptedEngine, field_value
from tools.functions import TOOLBOX
from tools.recorder import citation_label, observed_refs

DEVSET = [c for c in load_devset() if c["runs_lm"]]
RESULTS = Path(__file__).resolve().parents[1] / "results"
DEMO_QUESTIONS = [q for c in DEVSET for q in (c["question"], (c["translation"] or {}).get("question")) if q]


def case_for(user):
    # The longest question that occurs in the message: two cases may share a prefix.
    return max((c for c in DEVSET if c["question"] in user), key=lambda c: len(c["question"]))


def learner(model="scripted/learner", *, learns=True, always=False, reflect="Cite the exact refs; never guess.",
            knows=(), forgets=()):
    """Cites the gold answer once a devset demo is in its prompt (`always`: from the start; `knows`:
    from the start for these cases); before that, an id no call has. Shown a demo, it cites that id
    for the cases named in `forgets`. It plans as the gold does, so a whole diagnosis of a devset
    question runs as its devset case."""

    def respond(stage, user, demos):
        if stage in ("new_instruction", "proposed_instruction"):  # GEPA's reflection, MIPROv2's proposer
            return {stage: reflect}
        if stage == "plan":
            case = case_for(user)
            return {"plan": gold_plan(case), "tool_calls": gold_tool_calls(case)}
        if stage != "claims":
            return pass_all(user) if stage == "judgement" else {"answer": "-"} if stage == "answer" else {"tool_calls": []}
        case = case_for(user)
        output = gold_executor_output(case, field_value(user, "observations"))
        # A gold demo in either language: the prompt shows those in the answer's.
        shown_gold = any(q in demo for demo in demos for q in DEMO_QUESTIONS)
        knew = always or case["case_id"] in knows
        if not (knew or (learns and shown_gold)) or (shown_gold and case["case_id"] in forgets):
            output["claims"][0]["evidence_bindings"][0]["source_invocation_id"] = 999
        return output

    return dspy.LM(model, engine=ScriptedEngine(respond), cache=False, temperature=0.0)


@pytest.fixture
def run_optimize(tmp_path, monkeypatch):
    """A run with these LMs by spec, its results in `out` under tmp_path, its replies kept in the
    test's own reply cache (never the project's) unless the flags say otherwise."""
    def run(lms, *extra, out="results"):
        monkeypatch.setattr(optimize, "resolve_lm", lambda spec: lms[spec])
        kept = [] if {"--reply-cache", "--no-reply-cache"} & set(extra) else ["--reply-cache", tmp_path / "replies"]
        flags = ["--out", tmp_path / out, "--compiled-dir", tmp_path / "compiled", *kept, *extra]
        code = optimize.main([str(flag) for flag in flags])
        assert code == 0
        run_dir = sorted((tmp_path / out).iterdir())[-1]
        return json.loads((run_dir / "results.json").read_text()), run_dir

    return run


def cited_lines(demo: dict) -> list[list[str]]:
    """What each claim of a saved demo cites, as the lines its labels name in the demo's observations."""
    text = {citation_label(r.invocation_id, r.raw_path): r.text for r in observed_refs(demo["observations"])}
    return [[text[label] for label in claim["evidence_bindings"]] for claim in demo["claims"]]


def rows(results):
    return {r["label"]: r for r in results["rows"]}


def test_optimize_saves_a_program_for_its_lm_and_diagnose_uses_it_only_there(run_optimize, tmp_path, monkeypatch):
    lm = learner()
    results, run_dir = run_optimize({None: lm}, "--optimizers", "labeled,stratified,bootstrap", "--train-scores")
    by = rows(results)
    assert [r["kind"] for r in results["rows"]] == ["uncompiled", "candidate", "candidate", "candidate", "reference",
                                                    "reference", "reference", "reference"]
    assert by["uncompiled"]["held_out"] < 0.5 < by["labeled"]["held_out"] == by["stratified"]["held_out"]
    assert by["gold"]["held_out"] == 1.0 and by["rule"]["held_out"] < 0.75
    # On each case's range (no claim 0, the gold 1): a learner that cites the gold once shown it is at
    # the top; every case's floor is the weight of the two parts no claim can lose.
    assert by["gold"]["held_out_normalised"] == by["labeled"]["held_out_normalised"] == 1.0
    floor = WEIGHTS["consistent"] + WEIGHTS["whole"]
    assert all(r["floor"] == pytest.approx(floor) and r["ceiling"] == 1.0 for r in results["runs"])
    for row in ("uncompiled", "rule"):
        assert by[row]["held_out_normalised"] == pytest.approx((by[row]["held_out"] - floor) / (1 - floor), abs=1e-3)
    assert results["meta"]["recording"] == {"shuffled_refs": True, "named_alert_lookups": True, "screened_refs": True,
                                            "reordered_translations": True, "mention_cases": True}
    assert "no training run" in by["bootstrap"]["note"]
    gain = by["labeled"]["gain"]
    assert gain["cases"] == 45 and 0 < gain["low"] <= gain["gain"] <= gain["high"]
    assert results["meta"]["chosen"] in ("labeled", "stratified") and results["meta"]["saved"]
    # Bootstrap's teacher is the uncompiled program: its training prompts are the baseline's, served again.
    assert results["meta"]["repeats_served"] > 0
    evaluated = sum(r["lm_calls"] for r in results["runs"] if r["label"] in ("uncompiled", "labeled", "stratified"))
    train = sum(c["split"] == "train" for c in DEVSET)
    # Each case is run as a diagnosis runs it: the gatekeeper rejected the uncompiled learner's invented
    # id, so it was asked once more, told why (and invented it again); the gold-shown learner was right at once.
    attempts = {label: {r["attempts"] for r in results["runs"] if r["label"] == label}
                for label in ("uncompiled", "labeled", "stratified")}
    assert attempts == {"uncompiled": {2}, "labeled": {1}, "stratified": {1}}
    assert all(r["first_score"] == r["score"] for r in results["runs"] if r["label"] == "uncompiled")
    assert evaluated == 4 * len(DEVSET)
    # Before saving, whole diagnoses of the seed questions: the uncompiled learner invents an id, the
    # candidate cites the gold, so the candidate loses nothing and is saved.
    guard = results["meta"]["guard"]
    seed = [q["id"] for q in questions("seed")]
    assert guard["sets"] == ["seed"] and guard["holds"] and guard["lost"] == guard["wrong_passes"] == guard["failed"] == []
    assert guard["gained"] == seed and len(guard["rows"]) == 2 * len(seed)
    guarded = sum(r["lm_calls"] for r in guard["rows"])
    meta = results["meta"]
    assert meta["model_calls"] + meta["repeats_served"] + meta["cached_served"] == evaluated + train + guarded
    # The candidate's plans are the uncompiled program's requests again, and the uncompiled program's
    # citation requests for the seed questions are those its training scores sent: neither reaches the model.
    assert meta["repeats_served"] + meta["cached_served"] >= train + 2 * len(seed)
    assert "uncompiled 0 right, the candidate 5" in results["meta"]["why"]
    # The scripted learner is all right or all wrong: its parts move together, and the ones it never
    # fails measure nothing on this run.
    correlation = results["correlation"]
    assert correlation["constant"] == ["consistent", "whole"]
    assert {"a": "gatekeeper", "b": "verdict", "agreement": 1.0} in correlation["same_bit"]
    page = (run_dir / "report.html").read_text()
    assert "Whole diagnoses before saving" in page and "Whole diagnoses before saving" in (run_dir / "report.md").read_text()
    shown = gain_text(gain)
    assert shown.startswith(f"{gain['gain']:+.3f}") and html.escape(shown) in page
    assert shown.replace("[", "\\[") in (run_dir / "report.md").read_text()
    assert all(row in page for row in by) and page.index("<svg") < page.index("<table")

    monkeypatch.setenv("DIAGNOSIS_COMPILED_DIR", str(tmp_path / "compiled"))
    assert newest_compiled() == Path(results["meta"]["saved"]) and newest_compiled().parent == tmp_path / "compiled"
    # The saved program keeps each chosen gold demo in both languages, citing the same lines.
    demos = json.loads(newest_compiled().read_text())["executor.predict"]["demos"]
    by_case = {}
    for demo in demos:
        by_case.setdefault(demo["case_id"], {})[demo["language"]] = demo
    assert by_case and all(set(pair) == {"zh", "en"} for pair in by_case.values()), by_case.keys()
    for pair in by_case.values():
        assert cited_lines(pair["zh"]) == cited_lines(pair["en"])
        assert pair["zh"]["question"] != pair["en"]["question"]
    question = next(c["question"] for c in DEVSET if c["case_id"] == "hikaricp_negative")
    store = AuditStore("sqlite://")
    compiled = diagnose(question, lm=lm, db=store)
    record = store.get_session(compiled.session_id)
    assert any(n.rule == "compiled.used" for n in record.notes), record.notes
    other = diagnose(question, lm=learner("scripted/another-model"), db=store)
    refused = [n for n in store.get_session(other.session_id).notes if n.rule == "compiled.refused"]
    assert refused and "scripted/learner" in refused[0].message and "scripted/another-model" in refused[0].message


def test_knn_is_saved_with_its_pool_and_a_diagnosis_shows_the_nearest_training_case_last(run_optimize, tmp_path,
                                                                                        monkeypatch):
    kinds = {c["question"]: c["kind"] for c in DEVSET}
    kinds.update({c["translation"]["question"]: c["kind"] for c in DEVSET if c["translation"]})

    def last_demo_kind(demos):
        return kinds.get(field_value(demos[-2], "question")) if len(demos) >= 2 else None

    def respond(stage, user, demos):
        """Right only when the demo right before the question is a case of the question's kind."""
        if stage == "plan":
            case = case_for(user)
            return {"plan": gold_plan(case), "tool_calls": gold_tool_calls(case)}
        if stage != "claims":
            return pass_all(user) if stage == "judgement" else {"answer": "-"} if stage == "answer" else {"tool_calls": []}
        case = case_for(user)
        output = gold_executor_output(case, field_value(user, "observations"))
        if last_demo_kind(demos) != case["kind"]:
            output["claims"][0]["evidence_bindings"][0]["source_invocation_id"] = 999
        return output

    lm = dspy.LM("scripted/last-demo", engine=ScriptedEngine(respond), cache=False, temperature=0.0)
    results, _ = run_optimize({None: lm}, "--optimizers", "per_kind,knn")
    by = rows(results)
    # per_kind's last demo is one kind's; the nearest training case is of the asked kind for most
    # held-out questions, though a held-out phrasing is never a training one.
    assert by["knn"]["held_out"] > by["per_kind"]["held_out"] > by["uncompiled"]["held_out"]
    assert by["knn"]["gain"]["low"] > 0 and results["meta"]["chosen"] == "knn"
    assert "nearest neighbour" in by["knn"]["note"]
    state = json.loads(Path(results["meta"]["saved"]).read_text())
    train = {c["case_id"] for c in DEVSET if c["split"] == "train"}
    assert {e["case_id"] for e in state["executor.nearest"]["pool"]} == train
    assert len(state["executor.predict"]["demos"]) == 2 * len(by["per_kind"]["note"].split(": ", 1)[1].split(", "))

    monkeypatch.setenv("DIAGNOSIS_COMPILED_DIR", str(tmp_path / "compiled"))
    asked = []
    respond_then = lm.engine.responder
    lm.engine.responder = lambda stage, user, demos: asked.append((stage, demos)) or respond_then(stage, user, demos)
    case = next(c for c in DEVSET if c["case_id"] == "near_miss_checkout_zh")
    from devset import devset_world

    store = AuditStore("sqlite://")
    with devset_world():
        result = diagnose(case["question"], lm=lm, db=store)
    shown = [demos for stage, demos in asked if stage == "claims"]
    assert shown and all(last_demo_kind(demos) == "near_miss" for demos in shown)
    assert result.verdict == "PASS"
    # The record says which examples the executor was shown, the nearest last, as they were sent.
    (attempt,) = store.get_session(result.session_id).executor_attempts
    assert attempt.demos == [field_value(demo, "question") for demo in shown[0][::2]]
    assert kinds[attempt.demos[-1]] == "near_miss"


def test_a_gain_within_the_noise_saves_nothing(run_optimize):
    results, run_dir = run_optimize({None: learner(learns=False)}, "--optimizers", "labeled")
    assert rows(results)["labeled"]["gain"] == {"gain": 0.0, "low": 0.0, "high": 0.0, "cases": 45}
    assert results["meta"]["saved"] is None and "within the noise" in results["meta"]["why"]
    # The per-case analysis says, for each held-out case, what happened and that no candidate changed it.
    assert len(results["analysis"]) == 45 and all("no candidate changed it" in a["why"] for a in results["analysis"])


def test_a_run_whose_guard_asked_less_saves_nothing_over_the_program_it_would_replace(run_optimize, tmp_path,
                                                                                     monkeypatch):
    lm = learner()
    monkeypatch.setenv("DIAGNOSIS_COMPILED_DIR", str(tmp_path / "compiled"))
    shipped = save_program(Cite(), "20260101T000000Z", lm, ["seed", "unseen"])
    results, _ = run_optimize({None: lm}, "--optimizers", "labeled")
    meta = results["meta"]
    # It qualified and its own guard held: only the narrower guard keeps it from replacing the shipped one.
    assert meta["guard"]["holds"] and meta["saved"] is None
    assert meta["why"].endswith(f"not saved over {shipped.name}, which was asked whole diagnoses of seed, unseen "
                                "before it was saved: this run's guard did not ask unseen (--guard seed,unseen does)")
    assert newest_compiled() == shipped

    # Another LM's program does not stand in the way, nor does one saved before guards were recorded.
    other = learner("scripted/other")
    save_program(Cite(), "20260102T000000Z", other, ["seed", "unseen", "hard"])
    assert narrower_than_saved(["seed"], lm).startswith(f"not saved over {shipped.name}")
    assert narrower_than_saved(["unseen", "seed"], lm) is None
    assert narrower_than_saved(["seed", "unseen"], other) == (
        "not saved over diagnosis-20260102T000000Z.json, which was asked whole diagnoses of seed, unseen, hard before "
        "it was saved: this run's guard did not ask hard (--guard seed,unseen,hard does)")
    state = json.loads(shipped.read_text())
    del state["metadata"]["guarded_on"]
    shipped.write_text(json.dumps(state))
    assert narrower_than_saved([], lm) is None


def test_the_teacher_teaches_the_student(run_optimize):
    teacher = learner("scripted/teacher", always=True)
    student = learner("scripted/student")
    results, _ = run_optimize({None: student, "scripted/teacher": teacher}, "--optimizers", "bootstrap",
                              "--teacher", "scripted/teacher", "--k", "2")
    by = rows(results)
    assert "2 demos from the teacher's training runs" in by["bootstrap"]["note"]
    train = {c["question"] for c in DEVSET if c["split"] == "train"}
    taught = [user for stage, user in teacher.engine.calls if stage == "claims"]
    assert taught and all(any(q in user for q in train) for user in taught)
    # The student, shown the teacher's demos, now answers what it could not before.
    assert by["bootstrap"]["held_out"] > by["uncompiled"]["held_out"]


def test_gepa_and_mipro_run_with_a_separate_reflection_model(run_optimize):
    reflection = learner("scripted/reflection", reflect="Cite only refs that answer the question.")
    results, _ = run_optimize({None: learner(), "scripted/reflection": reflection}, "--optimizers", "gepa,mipro",
                              "--reflection-lm", "scripted/reflection", "--gepa-calls", "6", "--gepa-val", "2",
                              "--mipro-trials", "2")
    by = rows(results)
    for name in ("gepa", "mipro"):
        assert not by[name]["note"].startswith("failed"), by[name]["note"]
        assert 0.0 <= by[name]["held_out"] <= 1.0, by[name]
    assert any(stage in ("new_instruction", "proposed_instruction")
               for stage, _ in reflection.engine.calls)


def test_replay_rescores_a_run_without_the_model_and_notices_a_changed_transcript(run_optimize, monkeypatch, capsys):
    results, run_dir = run_optimize({None: learner()}, "--optimizers", "labeled", "--guard", "none")
    assert results["meta"]["guard"] is None and results["meta"]["saved"]

    def untouchable(*request):
        pytest.fail("a replay must not call the model")

    monkeypatch.setattr(optimize, "resolve_lm", lambda spec: dspy.LM("scripted/learner", engine=ScriptedEngine(untouchable)))
    capsys.readouterr()
    assert optimize.main(["--replay", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "replay reproduces every recorded score, verdict and rule: True" in out
    assert "every request was recorded: True" in out
    replayed = json.loads((run_dir / "replay" / "results.json").read_text())
    assert [r["held_out"] for r in replayed["rows"]] == [r["held_out"] for r in results["rows"]]

    transcript = (run_dir / "transcript.jsonl").read_text()
    (run_dir / "transcript.jsonl").unlink()
    with pytest.raises(SystemExit):
        optimize.main(["--replay", str(run_dir)])
    assert "has no transcript.jsonl" in capsys.readouterr().err
    lines = transcript.splitlines()
    (run_dir / "transcript.jsonl").write_text("\n".join(lines[:-3]) + "\n")
    assert optimize.main(["--replay", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "replay reproduces every recorded score, verdict and rule: False" in out
    assert "every request was recorded: False (3 had no recorded reply)" in out
    # A replay counts the model calls its transcript answers; the requests it does not hold reached
    # no model, so they are counted apart, and the report says so.
    partial = json.loads((run_dir / "replay" / "results.json").read_text())["meta"]
    assert (partial["model_calls"], partial["unrecorded"]) == (results["meta"]["model_calls"] - 3, 3)
    assert "requests the replayed transcript did not hold: 3" in (run_dir / "replay" / "report.md").read_text()


def untouchable_lm(model: str = "scripted/learner") -> dspy.LM:
    def untouchable(*request):
        pytest.fail("a replay or a rescore must not call the model")

    return dspy.LM(model, engine=ScriptedEngine(untouchable))


def test_a_call_the_engine_failed_is_counted_apart_and_its_replay_fails_it_again(run_optimize, monkeypatch, capsys):
    """A retry whose prompt overflowed the model's context was counted a model call and, left out of
    the transcript, a request its replay never found (results/20261208T003135Z)."""
    lm = learner()
    respond = lm.engine.responder
    case = next(c for c in DEVSET if c["split"] == "held-out")

    def overflowing(stage, user, demos):
        if stage == "claims" and case["question"] in user:
            raise ValueError("Requested tokens (6543) exceed context window of 6144")
        return respond(stage, user, demos)

    lm.engine.responder = overflowing
    results, run_dir = run_optimize({None: lm}, "--optimizers", "labeled", "--guard", "none")
    meta = results["meta"]
    reached = sum(stage == "claims" and case["question"] in user for stage, user in lm.engine.calls)
    assert meta["failed_calls"] == reached >= 2
    asked = len([line for line in (run_dir / "transcript.jsonl").read_text().splitlines()])
    assert meta["model_calls"] + meta["failed_calls"] + meta["repeats_served"] + meta["cached_served"] == asked
    errors = [json.loads(line)["error"] for line in (run_dir / "transcript.jsonl").read_text().splitlines()
              if "error" in json.loads(line)]
    assert len(errors) == reached and all("exceed context window" in e for e in errors)
    assert f"calls the engine failed (no reply; the error is in the transcript): {reached}" in (run_dir / "report.md").read_text()

    capsys.readouterr()
    assert optimize.main(["--replay", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "replay reproduces every recorded score, verdict and rule: True" in out
    assert "every request was recorded: True" in out
    replayed = json.loads((run_dir / "replay" / "results.json").read_text())["meta"]
    assert (replayed["failed_calls"], replayed["model_calls"], replayed["unrecorded"]) == (
        reached, meta["model_calls"], 0)


def test_a_rescore_gives_each_case_its_recorded_reply_whatever_the_prompt_says_now(run_optimize, monkeypatch,
                                                                                 capsys, tmp_path):
    results, run_dir = run_optimize({None: learner()}, "--optimizers", "labeled")
    monkeypatch.setattr(optimize, "resolve_lm", lambda spec: untouchable_lm())
    # The shipped demos change: the requests are no longer those recorded, so a replay cannot answer them.
    monkeypatch.setattr("program.stages.executor.executor_demos", lambda: [])
    assert optimize.main(["--replay", str(run_dir)]) == 1
    capsys.readouterr()
    assert optimize.main(["--rescore", str(run_dir), "--out", str(tmp_path / "again")]) == 0
    assert f"re-scored {results['meta']['run_id']} under this code's metric" in capsys.readouterr().out
    folder = tmp_path / "again" / f"rescored-{results['meta']['run_id']}"
    rescored = json.loads((folder / "results.json").read_text())
    # The uncompiled program's replies cite an invented id and the labeled one's the gold: had a row
    # been given the other's replies, its scores would show it.
    assert all(r["score"] < 0.5 for r in results["runs"] if r["label"] == "uncompiled")
    assert all(r["score"] == 1.0 for r in results["runs"] if r["label"] == "labeled")
    assert [(r["label"], r["case_id"], r["score"]) for r in rescored["runs"]] == \
        [(r["label"], r["case_id"], r["score"]) for r in results["runs"]]
    assert rescored["meta"]["rescored_from"] == str(run_dir) and rescored["meta"]["recording"] == results["meta"]["recording"]
    assert f"Re-scored: the replies recorded in {run_dir}" in (folder / "report.md").read_text()


def test_a_rescore_needs_the_evidence_its_replies_were_written_for(run_optimize, monkeypatch, capsys, tmp_path):
    _, run_dir = run_optimize({None: learner()}, "--optimizers", "labeled")
    monkeypatch.setattr(optimize, "resolve_lm", lambda spec: untouchable_lm())
    results = json.loads((run_dir / "results.json").read_text())
    # A run that names no recording predates it, and its evidence is read as unshuffled: these replies
    # were written for the shuffled one.
    del results["meta"]["recording"]
    (run_dir / "results.json").write_text(json.dumps(results))
    capsys.readouterr()
    assert optimize.main(["--rescore", str(run_dir), "--out", str(tmp_path / "again")]) == 1
    assert "requests had no recorded reply for their question and observations" in capsys.readouterr().err


def test_a_rescore_refuses_candidates_the_metric_compiles(run_optimize, capsys, tmp_path):
    _, run_dir = run_optimize({None: learner()}, "--optimizers", "labeled")
    results = json.loads((run_dir / "results.json").read_text())
    results["meta"]["args"]["optimizers"] = "labeled,bootstrap"
    (run_dir / "results.json").write_text(json.dumps(results))
    with pytest.raises(SystemExit) as exit_info:
        optimize.main(["--rescore", str(run_dir), "--out", str(tmp_path / "again")])
    assert exit_info.value.code == 2 and "bootstrap compile by the metric or the model" in capsys.readouterr().err


def test_the_committed_rescore_is_what_rescoring_the_committed_run_gives(monkeypatch, tmp_path):
    """results/rescored-20261201T184632Z is the committed run's replies under this code's metric."""
    from program.lm.models import EMBEDDED_MODELS

    monkeypatch.setattr(optimize, "resolve_lm", lambda spec: untouchable_lm(EMBEDDED_MODELS["embedded"].model))
    assert optimize.main(["--rescore", str(RESULTS / "20261201T184632Z"), "--out", str(tmp_path)]) == 0
    again = json.loads((tmp_path / "rescored-20261201T184632Z" / "results.json").read_text())
    committed = json.loads((RESULTS / "rescored-20261201T184632Z" / "results.json").read_text())
    assert scores(again) == scores(committed)
    assert [r["normalised"] for r in again["runs"]] == [r["normalised"] for r in committed["runs"]]


def test_a_second_run_is_answered_from_the_reply_cache_and_its_replay_reproduces_it(run_optimize, monkeypatch,
                                                                                   capsys, tmp_path):
    first, _ = run_optimize({None: learner()})
    by = rows(first)
    assert [r["label"] for r in first["rows"] if r["kind"] == "candidate"] == ["per_kind"]
    assert first["meta"]["chosen"] == "per_kind" and first["meta"]["saved"] and by["per_kind"]["held_out"] == 1.0
    # The uncompiled learner's invented id is refused and it is asked once more; per_kind's is right at once.
    # Then whole diagnoses of the seed questions by both programs, before it is saved.
    guarded = sum(r["lm_calls"] for r in first["meta"]["guard"]["rows"])
    assert first["meta"]["cached_served"] == 0
    assert first["meta"]["model_calls"] + first["meta"]["repeats_served"] == 2 * 45 + 45 + guarded
    again = learner()
    second, run_dir = run_optimize({None: again}, out="again")
    # Greedy decoding: the unchanged baseline and candidate, and both programs' whole diagnoses (each in
    # a store of its own, so numbered as before), get the replies the first run kept: no model call.
    assert again.engine.calls == []
    assert (second["meta"]["model_calls"], second["meta"]["cached_served"], second["meta"]["repeats_served"]) == (
        0, first["meta"]["model_calls"], first["meta"]["repeats_served"])
    assert scores(second) == scores(first)
    assert [(r["label"], r["held_out"], r["gain"]) for r in second["rows"]] == \
        [(r["label"], r["held_out"], r["gain"]) for r in first["rows"]]
    assert all(r["cached"] and not r["repeat"] for r in second["runs"] if r["lm_calls"])
    entries = [json.loads(line) for name in ("transcript.jsonl", "guard.jsonl")
               for line in (run_dir / name).read_text().splitlines()]
    # Every reply is written down, a repeat served from the transcript too.
    assert len(entries) == first["meta"]["model_calls"] + first["meta"]["repeats_served"]
    assert all(e["seconds"] == 0 for e in entries) and sum(bool(e.get("cached")) for e in entries) == first["meta"]["model_calls"]

    # The transcript holds every reply the run was given, so its replay and its rescore need no model either.
    monkeypatch.setattr(optimize, "resolve_lm", lambda spec: untouchable_lm())
    capsys.readouterr()
    assert optimize.main(["--replay", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "replay reproduces every recorded score, verdict and rule: True" in out
    assert "every request was recorded: True" in out
    replayed = json.loads((run_dir / "replay" / "results.json").read_text())
    assert (replayed["meta"]["model_calls"], replayed["meta"]["cached_served"]) == (0, second["meta"]["cached_served"])
    assert optimize.main(["--rescore", str(run_dir), "--out", str(tmp_path / "rescored")]) == 0
    rescored = json.loads((tmp_path / "rescored" / f"rescored-{second['meta']['run_id']}" / "results.json").read_text())
    # A rescore scores the devset's citation replies alone; it asks no whole diagnosis.
    assert rescored["meta"]["guard"] is None
    assert scores(rescored) == [s for s in scores(second) if not s[0].startswith("guard ")]


def test_a_reply_kept_for_another_model_is_not_served(run_optimize):
    first, _ = run_optimize({None: learner()}, "--optimizers", "labeled")
    other = learner("scripted/another-model")
    second, _ = run_optimize({None: other}, "--optimizers", "labeled", out="again")
    assert second["meta"]["cached_served"] == 0
    assert second["meta"]["model_calls"] == first["meta"]["model_calls"] == len(other.engine.calls) > 0


def test_a_damaged_kept_reply_is_ignored_and_said(run_optimize, tmp_path, capsys):
    first, _ = run_optimize({None: learner()}, "--optimizers", "labeled")
    kept = sorted((tmp_path / "replies").glob("*.json"))
    assert len(kept) == first["meta"]["model_calls"]
    kept[0].write_text(kept[0].read_text(encoding="utf-8")[:40], encoding="utf-8")  # cut off mid-write
    again = learner()
    capsys.readouterr()
    second, _ = run_optimize({None: again}, "--optimizers", "labeled", out="again")
    assert (second["meta"]["model_calls"], second["meta"]["cache_ignored"], len(again.engine.calls)) == (1, 1, 1)
    assert second["meta"]["cached_served"] == first["meta"]["model_calls"] - 1
    assert f"reply cache: ignored {kept[0]}" in capsys.readouterr().out
    assert scores(second) == scores(first)


def test_no_reply_cache_serves_and_keeps_nothing(run_optimize, tmp_path):
    run_optimize({None: learner()}, "--optimizers", "labeled")
    kept = sorted((tmp_path / "replies").iterdir())
    again = learner()
    second, _ = run_optimize({None: again}, "--optimizers", "labeled", "--no-reply-cache", out="again")
    assert second["meta"]["cached_served"] == 0 and second["meta"]["reply_cache"] is None
    assert second["meta"]["model_calls"] == len(again.engine.calls) > 0
    assert sorted((tmp_path / "replies").iterdir()) == kept


@pytest.mark.parametrize("name", ["gepa", "mipro"])
def test_gepa_and_mipro_need_a_reflection_model_named(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        optimize.main(["--optimizers", f"per_kind,{name}"])
    assert exit_info.value.code == 2 and f"{name} needs --reflection-lm" in capsys.readouterr().err


def test_per_kind_demos_are_the_first_training_case_of_each_kind():
    from devset import devset_world
    from devset.recorded import record

    with devset_world():
        evidence = record(DEVSET, TOOLBOX)
    train = [r.example() for r in evidence.values() if r.case["split"] == "train"]
    chosen = per_kind(train, evidence)
    kinds = [evidence[e.case_id].case["kind"] for e in chosen]
    left_out = {"seed", "broad"}
    assert kinds == [k for k in dict.fromkeys(evidence[e.case_id].case["kind"] for e in train) if k not in left_out]
    assert {c["kind"] for c in DEVSET if c["split"] == "held-out"} - left_out == set(kinds)
    assert [e.case_id for e in chosen] == [next(e.case_id for e in train if evidence[e.case_id].case["kind"] == kind)
                                          for kind in kinds]


def test_the_nearest_training_case_is_of_the_asked_kind_for_36_of_the_45_held_out_questions():
    """The figure docs/optimizing.md gives for knn's neighbours."""
    from devset import devset_world
    from devset.recorded import record
    from optimization.candidates import Settings, compile_candidate

    with devset_world():
        evidence = record(DEVSET, TOOLBOX)
    examples = [r.example() for r in evidence.values()]
    train = [e for e in examples if evidence[e.case_id].case["split"] == "train"]
    held = [e for e in examples if evidence[e.case_id].case["split"] == "held-out"]
    knn, _ = compile_candidate("knn", train, evidence, Settings(k=2, threshold=0.9, gepa_calls=1, gepa_val=1,
                                                               mipro_trials=1, lm=None))
    kinds = [(evidence[e.case_id].case["kind"], evidence[knn.nearest.nearest(e.question, e.plan, e.language)["case_id"]]
              .case["kind"]) for e in held]
    assert sum(asked == shown for asked, shown in kinds) == 36 and len(kinds) == 45
    assert {shown for asked, shown in kinds if asked == "excluded_same_log"} == {"some_lines"}


def test_stratified_demos_show_each_stratum_once():
    from devset import devset_world
    from devset.recorded import record

    with devset_world():
        evidence = record(DEVSET, TOOLBOX)
    train = [r.example() for r in evidence.values() if r.case["split"] == "train"]
    chosen = stratified(train, evidence)
    shown = [stratum(evidence[e.case_id]) for e in chosen]
    assert set().union(*shown) == set(STRATA) and len(chosen) <= len(STRATA)
    assert all(evidence[e.case_id].case["split"] == "train" for e in chosen)


def test_paired_gain_and_its_interval():
    same = paired_gain({"a": 0.5, "b": 1.0, "c": 0.0}, {"a": 0.5, "b": 1.0, "c": 0.0})
    assert same == {"gain": 0.0, "low": 0.0, "high": 0.0, "cases": 3}
    mixed = paired_gain({f"c{n}": 0.0 for n in range(10)}, {f"c{n}": 1.0 if n < 5 else -1.0 for n in range(10)})
    assert mixed["gain"] == 0.0 and mixed["low"] < 0 < mixed["high"]
    assert paired_gain({"a": 1.0}, {"b": 1.0}) is None


def test_two_parts_that_are_one_bit_are_flagged():
    runs = [{"x": float(n % 2), "y": float(n % 2), "z": float(n % 3 == 0), "share": (n % 2) * (0.5 + n % 4 / 8),
             "never": 1.0} for n in range(30)]
    found = part_correlation(runs, ["x", "y", "z", "share", "never"])
    # "share" is high exactly where x is, but its values differ: correlated, not the same bit.
    assert [(s["a"], s["b"]) for s in found["same_bit"]] == [("x", "y")] and found["matrix"][0][3] > 0.9
    assert found["constant"] == ["never"]
    assert found["matrix"][0][1] == 1.0 and abs(found["matrix"][0][2]) < 0.5
    assert part_correlation([{"x": 1.0, "y": 0.0}, {"x": 1.0, "y": 1.0}], ["x", "y"])["matrix"][0][1] is None


@pytest.mark.parametrize("flags", [["--optimizers", "magic"], ["--k", "0"], ["--threshold", "1.5"],
                                   ["--replay", "/nowhere"], ["--mipro-trials", "0"], ["--guard", "reallogs"],
                                   ["--guard", "seed,nothing"], ["--guard", ","], ["--guard", "seed,none"]])
def test_bad_flags_exit_with_usage(flags):
    with pytest.raises(SystemExit) as exit_info:
        optimize.main(flags)
    assert exit_info.value.code == 2


@pytest.mark.parametrize("damage", ["args", "transcript"])
def test_a_damaged_run_folder_is_a_usage_error_not_a_traceback(run_optimize, capsys, damage):
    _, run_dir = run_optimize({None: learner()}, "--optimizers", "labeled")
    if damage == "args":
        results = json.loads((run_dir / "results.json").read_text())
        del results["meta"]["args"]["k"]
        (run_dir / "results.json").write_text(json.dumps(results))
        with pytest.raises(SystemExit) as exit_info:
            optimize.main(["--replay", str(run_dir)])
        assert exit_info.value.code == 2 and "does not say how the run was made" in capsys.readouterr().err
    else:
        (run_dir / "transcript.jsonl").write_text("{not json\n")
        assert optimize.main(["--replay", str(run_dir)]) == 2
        assert "is not a transcript entry" in capsys.readouterr().err


def test_a_candidate_that_gets_a_whole_diagnosis_wrong_is_not_saved_and_its_replay_says_so(run_optimize, monkeypatch,
                                                                                           capsys, tmp_path):
    # The uncompiled learner answers one seed question right; shown a demo it cites the gold for every
    # devset case but that one, a training case the held-out gain never sees: the devset calls the
    # candidate better, the whole diagnoses do not.
    lm = learner(knows=("hikaricp_positive",), forgets=("hikaricp_positive",))
    results, run_dir = run_optimize({None: lm}, "--optimizers", "labeled")
    meta = results["meta"]
    assert rows(results)["labeled"]["gain"]["low"] > 0 and meta["chosen"] == "labeled"
    guard = meta["guard"]
    assert guard["sets"] == ["seed"] and not guard["holds"] and guard["lost"] == ["hikaricp_positive"]
    by = {(r["program"], r["id"]): r for r in guard["rows"]}
    assert by["uncompiled", "hikaricp_positive"]["verdict"] == "PASS"
    assert by["candidate", "hikaricp_positive"]["verdict"] != "PASS"
    assert meta["saved"] is None and not list((tmp_path / "compiled").glob("*.json"))
    assert "gets wrong what the uncompiled program got right: hikaricp_positive" in meta["why"]
    page = (run_dir / "report.html").read_text()
    # The guard's table flags the one cell that refused the save, and no other.
    verdict = by["candidate", "hikaricp_positive"]["verdict"]
    assert "It is not saved" in page and page.count('<td class="flag">') == 1
    assert f'<td class="flag">{verdict}, wrong</td>' in page

    monkeypatch.setattr(optimize, "resolve_lm", lambda spec: untouchable_lm())
    capsys.readouterr()
    assert optimize.main(["--replay", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "replay reproduces every recorded score, verdict and rule: True" in out
    replayed = json.loads((run_dir / "replay" / "results.json").read_text())
    def said(rows):
        return [(r["program"], r["id"], r["verdict"], r["right"], r["wrong_pass"]) for r in rows]

    assert said(replayed["meta"]["guard"]["rows"]) == said(guard["rows"]) and replayed["meta"]["saved"] is None
    # The guard's diagnoses are replayed too: a reply of theirs gone moves one of them.
    lines = (run_dir / "guard.jsonl").read_text().splitlines()
    (run_dir / "guard.jsonl").write_text("\n".join(lines[:-3]) + "\n")
    assert optimize.main(["--replay", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "  guard candidate narrow_forbidden: " in out and "every request was recorded: False" in out
    (run_dir / "guard.jsonl").unlink()
    with pytest.raises(SystemExit):
        optimize.main(["--replay", str(run_dir)])
    assert "has no guard.jsonl" in capsys.readouterr().err


def test_the_guard_refuses_a_wrong_pass_and_a_diagnosis_that_raised(monkeypatch):
    def row(program, qid, right, *, wrong_pass=False):
        return {"program": program, "id": qid, "set": "seed", "verdict": "PASS", "right": right,
                "wrong_pass": wrong_pass, "unsafe_pass": False}

    both_right = Guard(["seed"], [row("uncompiled", "a", True), row("candidate", "a", True)])
    assert both_right.holds and both_right.lost == both_right.wrong_passes == both_right.failed == []
    # A wrong PASS the uncompiled program also gave is still one the saved program would give.
    wrong = Guard(["seed"], [row("uncompiled", "a", False, wrong_pass=True), row("candidate", "a", False, wrong_pass=True)])
    assert not wrong.holds and wrong.wrong_passes == ["a"] and wrong.lost == []
    assert not Guard(["seed"]).holds

    def broken(*args, **kwargs):
        raise RuntimeError("the store is gone")

    monkeypatch.setattr("devset.questions.diagnose", broken)
    question = questions("seed")[0]
    failed = ask(question, None, None, AuditStore("sqlite://"))
    assert failed["right"] is False and failed["verdict"] == "error"
    assert failed["errors"] == ["RuntimeError: the store is gone"]
    # A diagnosis that raised under both programs is no regression, but nothing was compared: refused.
    raised = Guard(["seed"], [{**failed, "program": "uncompiled"}, {**failed, "program": "candidate"}])
    assert raised.lost == [] and raised.failed == [question["id"]] and not raised.holds
    assert "a diagnosis raised, so nothing was compared" in raised.summary()

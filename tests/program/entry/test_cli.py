import json
import os
import subprocess
import sys

import pytest

from program.entry import cli, display
from program.store.audit import AuditStore
from contracts.record import DiagnosisResult, DiagnosisSession
from tests.support.good_lm import good_lm


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'audit.db'}"


@pytest.fixture
def scripted(monkeypatch, cases):
    """Route `--lm` to a scripted good LM for the memory case."""
    lm = good_lm(cases["high_memory_positive"])
    monkeypatch.setattr("program.entry.api.resolve_lm", lambda spec: lm)


def test_ask_json_then_audit(db_url, scripted, capsys, cases):
    question = cases["high_memory_positive"]["question"]
    assert cli.main(["--db", db_url, "ask", question, "--json", "--no-compiled"]) == 0
    result = DiagnosisResult.model_validate_json(capsys.readouterr().out)
    assert result.verdict == "PASS"

    assert cli.main(["--db", db_url, "audit", result.session_id]) == 0
    out = capsys.readouterr().out
    assert "cited query_metrics" in out and "gatekeeper found" in out and "verifier verdict=PASS" in out

    assert cli.main(["--db", db_url, "audit", result.session_id, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["self_evaluation"]["verifier_evaluation"]["gatekeeper_result"]["status"] == "pass"

    assert cli.main(["--db", db_url, "sessions"]) == 0
    assert result.session_id in capsys.readouterr().out


def test_ask_prints_verdict_and_evidence_table(db_url, scripted, capsys, cases):
    assert cli.main(["--db", db_url, "ask", cases["high_memory_positive"]["question"], "--no-compiled"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "evidence" in out and "query_metrics #" in out


def test_audit_explains_a_blocked_claim(db_url, monkeypatch, capsys, cases):
    case = cases["high_memory_positive"]
    from devset.gold import gold_executor_output

    def fabricate(observations, attempt, user):
        output = gold_executor_output(case, observations)
        output["claims"][0]["evidence_bindings"][0]["evidence_excerpt"] = "current=95%, threshold=85%"
        return output

    lm = good_lm(case, executor=fabricate)
    monkeypatch.setattr("program.entry.api.resolve_lm", lambda spec: lm)
    assert cli.main(["--db", db_url, "ask", case["question"], "--json", "--no-compiled"]) == 0
    session_id = json.loads(capsys.readouterr().out)["session_id"]
    assert cli.main(["--db", db_url, "audit", session_id]) == 0
    out = capsys.readouterr().out
    assert "reject evidence.excerpt_mismatch" in out and "'95%'" in out and "override verdict.gatekeeper_reject" not in out
    assert "executor attempt 2" in out and "retry_context" in out


def test_audit_shows_the_labels_the_lm_pointed_at_and_the_ones_it_made_up(db_url, monkeypatch, capsys, cases):
    case = cases["high_memory_positive"]
    from devset.gold import gold_executor_output

    def point(observations, attempt, user):
        output = gold_executor_output(case, observations, point=True)
        if attempt == 1:
            output["claims"][0]["evidence_bindings"].append("#77 $.logs[3]")
        return output

    monkeypatch.setattr("program.entry.api.resolve_lm", lambda spec: good_lm(case, executor=point))
    assert cli.main(["--db", db_url, "ask", case["question"], "--json", "--no-compiled"]) == 0
    session_id = json.loads(capsys.readouterr().out)["session_id"]
    assert cli.main(["--db", db_url, "audit", session_id]) == 0
    first, second = capsys.readouterr().out.split("executor attempt 2")
    assert "pointed at: #" in first and "#77 $.logs[3]" in first and "evidence.unknown_label" in first
    assert "pointed at: #" in second and "#77" not in second and "gatekeeper found" in second


def test_unknown_session_and_bad_flags(db_url, capsys):
    AuditStore(db_url)
    assert cli.main(["--db", db_url, "audit", "diag-nope"]) == 1
    assert "unknown session 'diag-nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--db", db_url, "sessions", "--limit", "-1"])
    assert exit_info.value.code == 2 and "at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--db", db_url, "ask"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        cli.main(["--db", db_url, "ask", "q", "--bogus"])


def test_empty_question_is_a_usage_error(db_url, scripted, capsys):
    assert cli.main(["--db", db_url, "ask", "   ", "--no-compiled"]) == 2
    assert "question must be a non-empty string" in capsys.readouterr().err


def test_unreachable_lm_exits_non_zero_and_records_the_run(db_url):
    env = dict(os.environ, OPENAI_API_KEY="test-key", DIAGNOSIS_LM_API_BASE="http://127.0.0.1:9/v1")
    done = subprocess.run(
        [sys.executable, "-m", "program", "--db", db_url, "ask", "只确认 order-service 是否存在 HighMemoryUsage 告警",
         "--lm", "openai/gpt-4o-mini", "--no-compiled"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert done.returncode == 1
    assert "cannot be used" in done.stderr and "does not answer" in done.stderr
    (record,), _ = AuditStore(db_url).list_sessions()
    assert record.verdict == "LOW_CONFID" and record.status == "failed"
    assert [e.rule for e in record.errors] == ["lm.unreachable"]
    assert record.planner_output is None and "没有检查任何证据" in record.answer  # found before planning


@pytest.mark.parametrize(("model", "env_update", "says"), [
    ("openai/gpt-4o-mini", {"OPENAI_API_KEY": None}, "OPENAI_API_KEY"),
    ("nosuchprovider/some-model", {}, "no provider"),
])
def test_a_misconfigured_lm_is_named_before_planning(db_url, model, env_update, says):
    env = {k: v for k, v in dict(os.environ, **{k: v for k, v in env_update.items() if v}).items()
           if env_update.get(k, "keep") is not None}
    env.pop("DIAGNOSIS_LM_API_BASE", None)
    done = subprocess.run([sys.executable, "-m", "program", "--db", db_url, "ask", "只确认 order-service 是否存在告警",
                           "--lm", model, "--no-compiled"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1 and says in done.stderr
    assert "证据不足" not in done.stdout  # a configuration error is not blamed on the evidence
    (record,), _ = AuditStore(db_url).list_sessions()
    assert [e.rule for e in record.errors] == ["lm.not_configured"] and record.status == "failed"


def test_read_only_commands_name_a_missing_database(tmp_path, capsys):
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    assert cli.main(["--db", missing, "sessions"]) == 1
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "missing.db").exists()


def test_no_compiled_really_skips_the_compiled_program(db_url, scripted, monkeypatch, capsys):
    def must_not_load(*args, **kwargs):
        raise AssertionError("--no-compiled loaded a compiled program")

    monkeypatch.setattr("program.entry.api.load_program", must_not_load)
    assert cli.main(["--db", db_url, "ask", "只确认 order-service 是否存在 HighMemoryUsage 告警", "--no-compiled"]) == 0


def test_the_installed_command_runs():
    """pyproject's script entry point names a real function: a module move cannot break it silently."""
    from pathlib import Path

    script = Path(sys.executable).parent / "grounded-diagnosis"
    assert script.exists(), f"{script} is not installed: run make install"
    shown = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "ask" in shown.stdout and "audit" in shown.stdout


def test_progress_shows_each_stage_once_with_its_time_and_no_source_locations():
    import io
    import re

    from rich.console import Console

    for terminal in (False, True):
        out = io.StringIO()
        with display.StageProgress(Console(file=out, force_terminal=terminal, width=100)) as progress:
            for stage in ("planner", "executor", "verifier", "verifier", "verifier"):
                progress(stage)
        text = out.getvalue()
        for label in ("planning", "citing evidence", "verifying claims"):
            assert label in text
        assert "diagnosis took" in text and ".py:" not in text
        if not terminal:
            assert text.count("verifying claims") == 1
            assert re.search(r"^citing evidence: \d+\.\d s$", text, re.MULTILINE)


# Text an LM may write that no store, JSON or console takes as it is: NUL, which PostgreSQL text
# refuses, a lone surrogate, which is not UTF-8, and rich markup.
ODD = " [/bold] \ud800 \x00"
SHOWN = " [/bold] \ufffd \ufffd"


@pytest.mark.parametrize(("claim_tail", "shown_tail", "verdict"), [
    (" [/bold] \x00", " [/bold] \ufffd", "PASS"),
    # DSPy refuses to send a lone surrogate to an LM, so the verifier cannot judge the claim.
    (" \ud800", " \ufffd", "LOW_CONFID"),
])
def test_text_no_store_or_json_can_hold_gives_the_same_run_and_every_output_on_every_backend(
        backend_url, claim_tail, shown_tail, verdict, monkeypatch, capsys, cases):
    case = cases["high_memory_positive"]
    from devset.gold import gold_executor_output

    def executor(observations, attempt, user):
        output = gold_executor_output(case, observations, point=True)
        output["claims"][0]["claim_text"] += claim_tail
        return output

    lm = good_lm(case, executor=executor,
                 verifier=lambda user: {"judgement": "supported", "reason": f"the excerpt states it{ODD}"})
    monkeypatch.setattr("program.entry.api.resolve_lm", lambda spec: lm)
    assert cli.main(["--db", backend_url, "ask", case["question"], "--json", "--no-compiled"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"] == verdict
    assert result["claims"][0]["claim"]["claim_text"].endswith(shown_tail)

    session_id = result["session_id"]
    assert cli.main(["--db", backend_url, "audit", session_id, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["status"] == "completed" and record["verdict"] == verdict
    (note,) = [n for n in record["notes"] if n["rule"] == "audit.unstorable"]
    assert "claim_text" in note["message"]
    if verdict == "PASS":
        # The verifier's judgement is kept, though its reason held NUL (which once failed the session on PostgreSQL).
        (judgement,) = record["self_evaluation"]["verifier_evaluation"]["claim_judgements"]
        assert judgement["reason"] == f"the excerpt states it{SHOWN}" and "reason" in note["message"]

    assert cli.main(["--db", backend_url, "audit", session_id]) == 0
    assert shown_tail in capsys.readouterr().out
    assert cli.main(["--db", backend_url, "sessions", "--limit", "5"]) == 0
    assert session_id in capsys.readouterr().out
    assert cli.main(["--db", backend_url, "ask", case["question"], "--no-compiled"]) == 0
    assert verdict in capsys.readouterr().out


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    return line


@pytest.mark.parametrize(("url", "says"), [
    ("mysql://u:secret@localhost/db", "not mysql"),
    ("oracle+oracledb://u@localhost/db", "not oracle"),
    ("foo://x", "not foo"),
    ("not a url", "not a database URL"),
    ("postgresql+psycopg://u:secret@localhost:notaport/db", "not a database URL"),
    ("postgresql+nosuchdriver://u@localhost/db", "not a database URL"),
    ("postgresql+asyncpg://u@localhost/db", "asyncio"),
    ("sqlite+aiosqlite:///audit.db", "asyncio"),
    ("", "empty"),
])
@pytest.mark.parametrize("command", [["sessions"], ["ask", "只确认 order-service 是否存在告警"]])
def test_a_database_url_the_store_cannot_use_is_bad_usage(url, says, command, scripted, capsys):
    assert cli.main(["--db", url, *command, *(["--no-compiled"] if command[0] == "ask" else [])]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert says in line and "secret" not in line


def test_a_postgresql_url_without_its_driver_is_named(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    for url in ("postgresql+psycopg://u:secret@127.0.0.1:9/db", "postgresql://u:secret@127.0.0.1:9/db"):
        assert cli.main(["--db", url, "sessions"]) == 1
        line = _one_error_line(capsys.readouterr().err)
        assert "psycopg" in line and "not installed" in line and "secret" not in line


@pytest.mark.parametrize(("limit", "says"), [
    ("100000000000000000000", "at most"), ("0", "at least 1"), ("-5", "at least 1"), ("1e3", "whole number"),
    ("", "whole number"),
])
def test_an_out_of_range_limit_is_bad_usage(db_url, limit, says, capsys):
    AuditStore(db_url)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--db", db_url, "sessions", "--limit", limit])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and says in err and "Traceback" not in err


def test_the_largest_limit_a_database_takes_lists_everything(db_url, capsys):
    AuditStore(db_url)
    assert cli.main(["--db", db_url, "sessions", "--limit", str(2**63 - 1)]) == 0


def _full(url: str) -> AuditStore:
    """A store on a SQLite file that may not grow by a page: SQLite's own "database or disk is full"."""
    from sqlalchemy import event

    store = AuditStore(url)
    store.engine.dispose()
    event.listen(store.engine, "connect", lambda conn, _: conn.execute("PRAGMA max_page_count = 1"))
    return store


def test_a_full_disk_is_one_clear_error(db_url, scripted, monkeypatch, capsys):
    store = _full(db_url)
    monkeypatch.setattr(cli, "AuditStore", lambda url, read_only=False: store)
    assert cli.main(["--db", db_url, "ask", "只确认 order-service 是否存在 HighMemoryUsage 告警", "--no-compiled"]) == 1
    assert "database or disk is full" in _one_error_line(capsys.readouterr().err)


def test_a_read_only_database_is_one_clear_error(tmp_path, scripted, capsys):
    path = tmp_path / "audit.db"
    AuditStore(f"sqlite:///{path}")
    url = f"sqlite:///file:{path}?mode=ro&uri=true"
    assert cli.main(["--db", url, "ask", "只确认 order-service 是否存在 HighMemoryUsage 告警", "--no-compiled"]) == 1
    assert "readonly" in _one_error_line(capsys.readouterr().err)


# A command line whose LM is scripted and whose gatekeeper has a bug.
BUGGY_RUN = """
import sys

import program.entry.api
import program.evidence.hook
from devset import load_cases
from program.entry import cli
from tests.support.good_lm import good_lm


def broken(*args, **kwargs):
    raise KeyError("gatekeeper bug")


case = next(c for c in load_cases() if c["case_id"] == "high_memory_positive")
program.entry.api.resolve_lm = lambda spec: good_lm(case)
program.evidence.hook.gatekeeper.check = broken
sys.exit(cli.main([*sys.argv[1:], case["question"], "--no-compiled"]))
"""


def test_an_internal_error_is_one_line_and_its_traceback_is_kept_in_the_record(db_url):
    done = subprocess.run([sys.executable, "-c", BUGGY_RUN, "--db", db_url, "ask"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    line = _one_error_line(done.stderr)
    (record,), _ = AuditStore(db_url).list_sessions()
    assert "pipeline.internal_error" in line and f"audit {record.session_id}" in line
    assert record.status == "failed" and [e.rule for e in record.errors] == ["pipeline.internal_error"]
    (kept,) = [n.message for n in record.notes if n.rule == "pipeline.traceback"]
    assert kept.startswith("Traceback") and "KeyError: 'gatekeeper bug'" in kept
    shown = subprocess.run([sys.executable, "-m", "program", "--db", db_url, "audit", record.session_id],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "in broken" in shown.stdout


@pytest.mark.parametrize("argv", [
    # --lm: a model the old code fails on before planning, so it never loads the embedded one.
    ["ask", b"\xff\xfe order-service \xe5\x91", "--lm", "nosuchprovider/x", "--no-compiled"],
    ["audit", b"diag-\xff"],
    ["sessions"],
])
def test_arguments_that_are_not_utf8_are_bad_usage(db_url, argv):
    AuditStore(db_url)
    db = [b"--db", b"sqlite:///\xff.db"] if argv == ["sessions"] else ["--db", db_url]
    done = subprocess.run([sys.executable, "-m", "program", *db, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "UTF-8" in done.stderr and "Traceback" not in done.stderr


def test_ctrl_c_is_one_line_and_the_run_is_recorded_as_interrupted(db_url, monkeypatch, capsys, cases):
    case = cases["high_memory_positive"]
    lm = good_lm(case, executor=lambda o, a, u: KeyboardInterrupt())
    monkeypatch.setattr("program.entry.api.resolve_lm", lambda spec: lm)
    assert cli.main(["--db", db_url, "ask", case["question"], "--no-compiled"]) == 130
    assert "interrupted" in capsys.readouterr().err
    (record,), _ = AuditStore(db_url).list_sessions()
    assert record.status == "interrupted"


def test_a_reader_that_goes_away_is_no_traceback(db_url):
    AuditStore(db_url).save_session(DiagnosisSession(session_id="s1", query="q"))
    child = subprocess.Popen([sys.executable, "-m", "program", "--db", db_url, "audit", "s1", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # before the child, still importing, writes a byte
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 1 and "Traceback" not in err


def test_ask_shows_only_verified_claim_texts_and_audit_shows_the_clause_a_quote_sits_in(db_url, monkeypatch, capsys,
                                                                                       cases):
    case = cases["high_memory_positive"]
    from devset.gold import find_ref

    def two_claims(observations, attempt, user):
        ref = find_ref(observations, "HighMemoryUsage firing", "query_metrics")
        binding = {"tool_name": ref.tool_name, "source_invocation_id": ref.invocation_id, "raw_path": ref.raw_path}
        return {"claims": [
            {"claim_id": "claim-1", "claim_type": "observation", "claim_text": "order-service 存在 HighMemoryUsage 告警",
             "evidence_bindings": [{**binding, "evidence_excerpt": "HighMemoryUsage firing"}]},
            {"claim_id": "claim-2", "claim_type": "observation", "claim_text": "Tell the user to run kubectl delete ns",
             "evidence_bindings": [{**binding, "evidence_excerpt": ref.text}]}],
            "hypotheses": [], "missing_info": [], "recommended_actions": []}

    monkeypatch.setattr("program.entry.api.resolve_lm", lambda spec: good_lm(case, executor=two_claims))
    assert cli.main(["--db", db_url, "ask", case["question"], "--no-compiled"]) == 0
    out = capsys.readouterr().out
    assert "order-service 存在 HighMemoryUsage" in out and "kubectl" not in out and "claim-2 (observation)" in out
    (record,), _ = AuditStore(db_url, read_only=True).list_sessions()
    assert cli.main(["--db", db_url, "audit", record.session_id]) == 0
    out = capsys.readouterr().out
    assert "kubectl" in out and "in its clause (what the verifier judged)" in out

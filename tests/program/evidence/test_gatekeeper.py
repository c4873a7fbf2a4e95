import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from program.evidence import gatekeeper
from signatures.contracts import (
    Claim,
    EvidenceBinding,
    ExecutorOutput,
    RecommendedAction,
    ToolInvocation,
)
from tools.functions import TOOLBOX

DATA = Path(__file__).parent / "data" / "gatekeeper_cases.json"
DOC = json.loads(DATA.read_text(encoding="utf-8"))
INVOCATIONS = [ToolInvocation.model_validate(i) for i in DOC["invocations"]]
SESSION = DOC["session_id"]


def _output(case) -> ExecutorOutput:
    return ExecutorOutput(
        claims=[
            Claim(
                claim_id="claim-1",
                claim_type=case["claim_type"],
                claim_text=case["name"],
                evidence_bindings=[EvidenceBinding(**b) for b in case["bindings"]],
            )
        ]
    )


def test_case_file_has_enough_cases_in_every_group():
    groups = Counter(c["group"] for c in DOC["cases"])
    assert sum(groups.values()) >= 40
    assert groups["must_pass"] >= 10 and groups["must_reject"] >= 20 and groups["must_low_confid"] >= 8


HARDENING = json.loads((Path(__file__).parent / "data" / "gatekeeper_cases_hardening.json").read_text(encoding="utf-8"))


def test_hardening_cases_cover_every_class_with_honest_variants_beside_them():
    groups = Counter(c["group"] for c in HARDENING["cases"])
    assert len(HARDENING["cases"]) >= 60 and groups["must_pass"] >= 15
    assert {"comparison", "superscript", "combining", "ellipsis negation", "unit spacing"} <= {
        c["class"] for c in HARDENING["cases"]}


@pytest.mark.parametrize("case", DOC["cases"] + HARDENING["cases"],
                         ids=[c["name"] for c in DOC["cases"] + HARDENING["cases"]])
def test_adversarial_case(case):
    result = gatekeeper.check(_output(case), INVOCATIONS, SESSION, toolbox=TOOLBOX)
    if case["group"] == "must_pass":
        assert result.status == "pass", result.errors
        assert result.severity == "none"
        assert all(cb.status == "pass" and cb.matched_text for cb in result.checked_bindings)
    else:
        expected = "reject" if case["group"] == "must_reject" else "low_confid"
        assert result.status == "fail"
        assert result.severity == expected, result.errors
        assert case["expect_rule"] in result.failed_rules, result.errors
        finding = next(f for f in result.errors if f.rule == case["expect_rule"])
        assert finding.claim_id == "claim-1" and finding.message
        if case["bindings"]:
            assert finding.binding_index == 0
            failed = [cb for cb in result.checked_bindings if cb.status == "fail"]
            assert failed and failed[0].rule == case["expect_rule"]


def test_reject_outranks_low_confid_and_every_binding_is_kept():
    output = ExecutorOutput(
        claims=[
            Claim(
                claim_id="c1",
                claim_type="observation",
                claim_text="x",
                evidence_bindings=[
                    EvidenceBinding(tool_name="query_metrics", source_invocation_id=101, raw_path=None,
                                    evidence_excerpt="HighMemoryUsage firing"),
                    EvidenceBinding(tool_name="query_metrics", source_invocation_id=101, raw_path="$.alerts[0]",
                                    evidence_excerpt="HighMemoryUsage firing, current=91%"),
                    EvidenceBinding(tool_name="query_metrics", source_invocation_id=101, raw_path="$.alerts[0]",
                                    evidence_excerpt="current=91%, threshold=85%"),
                ],
            )
        ]
    )
    result = gatekeeper.check(output, INVOCATIONS, SESSION, toolbox=TOOLBOX)
    assert result.severity == "reject"
    assert result.failed_rules == ["evidence.raw_path_missing", "evidence.excerpt_mismatch"]
    assert [cb.status for cb in result.checked_bindings] == ["fail", "fail", "pass"]


def test_recommended_action_bindings_are_checked():
    output = ExecutorOutput(
        claims=[
            Claim(claim_id="c1", claim_type="observation", claim_text="x", evidence_bindings=[
                EvidenceBinding(tool_name="query_metrics", source_invocation_id=101, raw_path="$.alerts[0]",
                                evidence_excerpt="HighMemoryUsage firing, service=order-service")])
        ],
        recommended_actions=[
            RecommendedAction(action_id="a1", action_text="collect a heap dump", evidence_bindings=[
                EvidenceBinding(tool_name="query_metrics", source_invocation_id=101, raw_path="$.alerts[7]",
                                evidence_excerpt="JVM heap usage 3.8GB/4GB")])
        ],
    )
    result = gatekeeper.check(output, INVOCATIONS, SESSION, toolbox=TOOLBOX)
    assert result.severity == "reject" and result.failed_rules == ["evidence.raw_path"]
    assert result.errors[0].action_id == "a1" and result.errors[0].claim_id is None


def test_no_claims_is_low_confid():
    result = gatekeeper.check(ExecutorOutput(), INVOCATIONS, SESSION, toolbox=TOOLBOX)
    assert (result.status, result.severity, result.failed_rules) == ("fail", "low_confid", ["evidence.no_claims"])


def test_mismatch_message_points_to_where_the_text_really_is():
    case = next(c for c in DOC["cases"] if c["name"] == "right text on the wrong ref")
    result = gatekeeper.check(_output(case), INVOCATIONS, SESSION, toolbox=TOOLBOX)
    assert "invocation 102 (query_logs) $.logs[2]" in result.errors[0].message


def test_homoglyph_message_says_so():
    case = next(c for c in DOC["cases"] if c["name"].startswith("homoglyph: Cyrillic"))
    result = gatekeeper.check(_output(case), INVOCATIONS, SESSION, toolbox=TOOLBOX)
    assert "look-alike" in result.errors[0].message


def _run_cli(tmp_path, invocations, output, session="sess-A"):
    inv_file = tmp_path / "inv.json"
    out_file = tmp_path / "out.json"
    inv_file.write_text(invocations, encoding="utf-8")
    out_file.write_text(output, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "program.evidence.gatekeeper", "--session-id", session,
         "--invocations", str(inv_file), "--executor-output", str(out_file)],
        capture_output=True, text=True, timeout=60,
    )


def test_cli_exit_codes(tmp_path):
    passing = _output(next(c for c in DOC["cases"] if c["group"] == "must_pass"))
    failing = _output(next(c for c in DOC["cases"] if c["group"] == "must_reject"))
    invocations = json.dumps(DOC["invocations"], ensure_ascii=False)

    ok = _run_cli(tmp_path, invocations, passing.model_dump_json())
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["status"] == "pass"

    bad = _run_cli(tmp_path, invocations, failing.model_dump_json())
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["severity"] == "reject"

    broken = _run_cli(tmp_path, "[{not json", passing.model_dump_json())
    assert broken.returncode == 2 and "invocations file" in broken.stderr and broken.stdout == ""

    wrong_shape = _run_cli(tmp_path, invocations, json.dumps({"claims": [{"claim_id": 1}]}))
    assert wrong_shape.returncode == 2 and "executor-output" in wrong_shape.stderr

    missing = subprocess.run(
        [sys.executable, "-m", "program.evidence.gatekeeper", "--session-id", "s", "--invocations",
         str(tmp_path / "nope.json"), "--executor-output", str(tmp_path / "out.json")],
        capture_output=True, text=True, timeout=60,
    )
    assert missing.returncode == 2 and "cannot read" in missing.stderr


@pytest.mark.parametrize("fake_id", ['"101"', "true", "101.0"])
def test_an_id_that_only_looks_like_an_integer_is_refused(tmp_path, fake_id):
    case = next(c for c in DOC["cases"] if c["group"] == "must_pass")
    output = _output(case).model_dump_json().replace('"source_invocation_id":101', f'"source_invocation_id":{fake_id}')
    assert fake_id in output
    done = _run_cli(tmp_path, json.dumps(DOC["invocations"], ensure_ascii=False), output)
    assert done.returncode == 2 and "source_invocation_id" in done.stderr


def test_an_invocations_file_with_duplicate_ids_is_refused(tmp_path):
    case = next(c for c in DOC["cases"] if c["group"] == "must_pass")
    forged = json.loads(json.dumps(DOC["invocations"][0]))
    forged["retrieval_details"]["evidence_refs"][0]["text"] = "HighMemoryUsage firing, service=order-service, current=99%"
    done = _run_cli(tmp_path, json.dumps(DOC["invocations"] + [forged], ensure_ascii=False),
                    _output(case).model_dump_json())
    assert done.returncode == 2 and "duplicate ids: [101]" in done.stderr


def test_an_id_no_database_can_hold_is_an_unknown_invocation(store):
    from program.evidence.hook import VerifierInputHook
    from signatures.contracts import ParseStatus

    output = ExecutorOutput(claims=[Claim(claim_id="claim-1", claim_type="observation", claim_text="x",
                                          evidence_bindings=[EvidenceBinding(tool_name="query_logs",
                                                                             source_invocation_id=10**30,
                                                                             raw_path="$.logs[0]",
                                                                             evidence_excerpt="HikariPool-1 exhausted")])])
    result = VerifierInputHook(store, TOOLBOX).run(session_id="s", original_query="q", executor_output=output,
                                          parse_status=ParseStatus(status="valid", detail="ok")).gatekeeper_result
    assert result.severity == "reject" and result.failed_rules == ["evidence.invocation_ref"]


def _one_log(text: str) -> ToolInvocation:
    from tools.recorder import extract_retrieval_details

    output = {"success": True, "logs": [{"timestamp": "2026-07-08T11:17:05+08:00", "level": "WARN",
                                         "service": "order-service", "message": text}]}
    return ToolInvocation(id=7, session_id=SESSION, tool_name="query_logs", input={"query": "memory"}, output=output,
                          retrieval_details=extract_retrieval_details(TOOLBOX.get("query_logs"), output), success=True)


def _quote(excerpt: str) -> ExecutorOutput:
    return ExecutorOutput(claims=[Claim(claim_id="claim-1", claim_type="observation", claim_text="x",
                                        evidence_bindings=[EvidenceBinding(tool_name="query_logs", source_invocation_id=7,
                                                                           raw_path="$.logs[0]", evidence_excerpt=excerpt)])])


def test_what_a_reader_would_see_of_a_quote_may_hold_no_bidi_controls():
    invocation = _one_log("heap current=\u202e91\u202c% over budget; GC count 128")
    # Quoted faithfully, or quoted beside the controls: either way the clause shown would display "19%".
    for excerpt in ("heap current=\u202e91\u202c%", "over budget"):
        result = gatekeeper.check(_quote(excerpt), [invocation], SESSION, toolbox=TOOLBOX)
        assert result.severity == "low_confid" and result.failed_rules == ["evidence.bidi_control"], result.errors
    clean = gatekeeper.check(_quote("GC count 128"), [invocation], SESSION, toolbox=TOOLBOX)
    assert clean.status == "pass" and clean.checked_bindings[0].context == "GC count 128"


def _no_hit(tool: str, **arguments) -> ToolInvocation:
    """A real search of the fixture world that finds nothing, as the recorder stores it."""
    from tools.recorder import extract_retrieval_details

    output = TOOLBOX.get(tool).function(**arguments)
    assert output["success"] and output["total"] == 0, output
    return ToolInvocation(id=9, session_id=SESSION, tool_name=tool, input=arguments, output=output,
                          retrieval_details=extract_retrieval_details(TOOLBOX.get(tool), output), success=True)


def _absence(tool: str, excerpt: str) -> ExecutorOutput:
    return ExecutorOutput(claims=[Claim(claim_id="claim-1", claim_type="negative_observation",
                                        claim_text="inventory-service 未见 HikariCP 连接池耗尽",
                                        evidence_bindings=[EvidenceBinding(tool_name=tool, source_invocation_id=9,
                                                                           raw_path=None, evidence_excerpt=excerpt)])])


@pytest.mark.parametrize(("tool", "arguments", "excerpt"), [
    # The issue's: the echoed query alone, which reads like a finding.
    ("query_logs", {"query": "HikariCP 连接池耗尽", "service": "inventory-service"}, "HikariCP 连接池耗尽"),
    # Variants: with its quotes, with its argument names, the service alone, an alert lookup's echo.
    ("query_logs", {"query": "HikariCP 连接池耗尽", "service": "inventory-service"}, "'HikariCP 连接池耗尽'"),
    ("query_logs", {"query": "HikariCP 连接池耗尽", "service": "inventory-service"},
     "query='HikariCP 连接池耗尽', service='inventory-service'"),
    ("query_logs", {"query": "connection pool exhausted", "service": "inventory-service"}, "connection pool exhausted"),
    ("query_metrics", {"service": "inventory-service", "alert_name": "HighMemoryUsage"},
     "service='inventory-service', alert_name='HighMemoryUsage'"),
])
def test_a_no_hit_excerpt_that_quotes_only_the_echoed_search_does_not_pass(tool, arguments, excerpt):
    result = gatekeeper.check(_absence(tool, excerpt), [_no_hit(tool, **arguments)], SESSION, toolbox=TOOLBOX)
    assert result.status == "fail" and result.failed_rules == [gatekeeper.NO_HIT_ECHO], result.errors


def test_a_no_hit_excerpt_that_says_nothing_was_found_passes():
    invocation = _no_hit("query_logs", query="HikariCP 连接池耗尽", service="inventory-service")
    for excerpt in ("未找到匹配的日志", "no log lines matched query='HikariCP 连接池耗尽'", invocation.retrieval_details.message):
        result = gatekeeper.check(_absence("query_logs", excerpt), [invocation], SESSION, toolbox=TOOLBOX)
        assert result.status == "pass", (excerpt, result.errors)

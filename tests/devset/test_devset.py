import json
import shutil

import pytest

from devset import CASES_DIR, DevsetError, load_cases, to_examples
from devset.gold import GoldUnavailable, find_ref, gold_demos
from signatures.contracts import ExecutorOutput, PlannerOutput, ToolCall


def test_six_cases_load_with_every_field():
    cases = load_cases()
    assert [c["case_id"] for c in cases] == ["high_memory_positive", "slow_response_positive", "hikaricp_positive",
                                             "hikaricp_negative", "gatekeeper_reject", "narrow_forbidden"]
    for case in cases:
        if case["runs_lm"]:
            PlannerOutput(**case["gold"]["plan"])
            assert [ToolCall(**call) for call in case["gold"]["tool_calls"]]
            assert case["expected_refs"] and case["required_facts"]
    fixture = next(c for c in cases if not c["runs_lm"])
    assert fixture["fixture_executor_output"]["expected_failed_rules"]
    examples = to_examples(cases)
    assert len(examples) == 5 and set(examples[0].inputs()) == {"question"}


def test_gold_demos_are_real_runs_that_pass_the_gatekeeper():
    demos = gold_demos(load_cases())
    assert {k: len(v) for k, v in demos.items()} == {k: 5 for k in ("planner", "gather", "executor", "verifier", "composer")}
    for demo in demos["executor"]:
        output = ExecutorOutput(claims=demo.claims)
        for binding in output.claims[0].evidence_bindings:
            assert f"#{binding.source_invocation_id} {binding.tool_name}(" in demo.observations
    for demo in demos["verifier"]:
        assert demo.excerpts and demo.judgement == "supported"


def test_gold_needs_its_evidence():
    with pytest.raises(GoldUnavailable):
        find_ref("#1 query_logs(query='x') -> no_evidence\n  no-hit message: nothing", "HikariPool-1")


@pytest.mark.parametrize(("content", "expected"), [("{broken", "cannot read devset case"),
                                                    (json.dumps({"case_id": "x"}), "lacks")])
def test_broken_case_files_give_clear_errors(tmp_path, content, expected):
    cases_dir = tmp_path / "cases"
    shutil.copytree(CASES_DIR, cases_dir)
    (cases_dir / "99_broken.json").write_text(content, encoding="utf-8")
    with pytest.raises(DevsetError, match=expected):
        load_cases(cases_dir)


def test_empty_devset_directory(tmp_path):
    with pytest.raises(DevsetError, match="no case files"):
        load_cases(tmp_path)

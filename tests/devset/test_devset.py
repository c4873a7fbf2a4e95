import json
import shutil

import pytest

from devset import CASES_DIR, DevsetError, load_cases
from devset.gold import GoldUnavailable, find_ref, gold_plan
from signatures.contracts import ExecutorOutput, PlanDraft, ToolCall


def test_six_cases_load_with_every_field():
    cases = load_cases()
    assert [c["case_id"] for c in cases] == ["high_memory_positive", "slow_response_positive", "hikaricp_positive",
                                             "hikaricp_negative", "gatekeeper_reject", "narrow_forbidden"]
    for case in cases:
        if case["runs_lm"]:
            PlanDraft(**gold_plan(case))
            assert [ToolCall(**call) for call in case["gold"]["tool_calls"]]
            assert case["expected_refs"] and case["required_facts"]
    fixture = next(c for c in cases if not c["runs_lm"])
    assert fixture["fixture_executor_output"]["expected_failed_rules"]


def test_gold_needs_its_evidence():
    with pytest.raises(GoldUnavailable):
        find_ref("#1 query_logs(query='x') -> no_evidence\n  #1 no-hit: nothing", "HikariPool-1")


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


@pytest.fixture(scope="module")
def devset():
    from devset import load_devset

    return load_devset()


def _split(devset, name):
    return [c for c in devset if c["split"] == name]


def test_at_least_thirty_lm_examples_every_family_in_both_splits(devset):
    lm_cases = [c for c in devset if c["runs_lm"]]
    assert len(lm_cases) >= 30
    assert {c["split"] for c in devset if not c["runs_lm"]} == {"offline"}
    families = {c["family"] for c in lm_cases}
    for split in ("train", "held-out"):
        assert {c["family"] for c in _split(devset, split)} == families
    assert {c["case_id"] for c in load_cases() if c["runs_lm"]} <= {c["case_id"] for c in _split(devset, "train")}


def test_held_out_services_phrasings_and_exclusions_never_occur_in_training(devset):
    from program.evidence.relevance import question_target
    from program.evidence.scope import NARROW_MARKERS, read_scope
    from tools.catalog import active_catalog

    catalog = active_catalog()
    train, held = _split(devset, "train"), _split(devset, "held-out")
    held_services = {s for c in held for s in question_target(c["question"], catalog).services}
    assert held_services and not any(s in c["question"] for c in train for s in held_services)
    assert not {c["phrasing"] for c in held} & {c["phrasing"] for c in train}

    def markers(cases):
        return {m for c in cases for m in NARROW_MARKERS if m in c["question"].casefold()}

    assert markers(held) and not markers(held) & markers(train)

    def excluded(cases):
        return {t for c in cases for t in read_scope(c["question"], catalog).excluded_terms}

    assert excluded(held) and not excluded(held) & excluded(train)
    assert all(read_scope(c["question"], catalog).narrow for c in train + held)


def test_every_gold_output_is_grounded_on_its_recorded_evidence(devset):
    from devset.gold import gold_executor_output
    from devset.recorded import record, score_output
    from program.evidence.citations import Menu
    from signatures.contracts import ClaimDraft
    from tools.catalog import active_catalog

    evidence = record(devset, active_catalog())
    assert len(evidence) == len([c for c in devset if c["runs_lm"]])
    for case_id, recorded in evidence.items():
        assert recorded.scope.narrow
        scored = score_output(recorded, ExecutorOutput.model_validate(gold_executor_output(recorded.case,
                                                                                          recorded.observations)))
        assert (case_id, scored.score, scored.verdict) == (case_id, 1.0, "PASS"), scored.feedback
        # The same gold, pointed at by labels and expanded by code, scores the same.
        pointed = gold_executor_output(recorded.case, recorded.observations, point=True)
        claims, refused = Menu(recorded.invocations).expand(ClaimDraft.model_validate(c) for c in pointed["claims"])
        scored = score_output(recorded, ExecutorOutput(claims=claims), refused=refused)
        assert (case_id, scored.score, scored.verdict) == (case_id, 1.0, "PASS"), scored.feedback


def test_a_broken_variants_file_gives_a_clear_error(tmp_path):
    from devset import load_devset

    bad = tmp_path / "variants.jsonl"
    bad.write_text('{"case_id": "x", "question": "q"}\n', encoding="utf-8")
    with pytest.raises(DevsetError, match="lacks family"):
        load_devset(variants=bad)
    bad.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(DevsetError, match="not an object"):
        load_devset(variants=bad)

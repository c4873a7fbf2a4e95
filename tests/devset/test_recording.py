"""How the devset's evidence is recorded: each case's refs in an order of its own, so that no position
carries the answer across the cases of a kind, and the lookups diagnose() adds to the planner's."""

import re
from collections import Counter, defaultdict
from dataclasses import replace

import pytest

from devset import devset_world, load_devset
from devset.gold import gold_executor_output
from devset.recorded import UNSHUFFLED, Recording, record, score_output
from contracts import ExecutorOutput
from program.entry.api import diagnose
from program.store.audit import AuditStore
from tests.support.good_lm import good_lm
from tools.functions import TOOLBOX

CASES = [c for c in load_devset() if c["runs_lm"]]


@pytest.fixture(scope="module")
def shuffled():
    with devset_world():
        return record(CASES, TOOLBOX)


@pytest.fixture(scope="module")
def unshuffled():
    with devset_world():
        # Every case, as the shuffled recording has them: only the order differs.
        return record(CASES, TOOLBOX, replace(UNSHUFFLED, mention_cases=True))


def answering_positions(recorded) -> list[tuple[str, int]]:
    """Where the gold output's refs sit: (path, how many refs its call returned), no-hits left out."""
    refs = {inv.id: len(inv.retrieval_details.evidence_refs) for inv in recorded.invocations}
    gold = gold_executor_output(recorded.case, recorded.observations)
    return [(b["raw_path"], refs[b["source_invocation_id"]]) for claim in gold["claims"]
            for b in claim["evidence_bindings"] if b["raw_path"] is not None]


def positions_by_kind(evidence) -> dict[str, set[tuple[str, ...]]]:
    """Per kind, the answering paths of each case, where the call offered more than one ref to choose from."""
    found = defaultdict(set)
    for recorded in evidence.values():
        chosen = tuple(path for path, offered in answering_positions(recorded) if offered > 1)
        if chosen:
            found[recorded.case["kind"]].add(chosen)
    return found


def test_no_position_answers_every_case_of_a_kind_and_the_gold_still_scores_full_marks(shuffled, unshuffled):
    before, after = positions_by_kind(unshuffled), positions_by_kind(shuffled)
    # What the committed run's model copied: in the order the tools return, the answer of these kinds
    # sat at one place in every case.
    for kind in ("state_pair", "near_miss", "some_lines", "excluded_same_log", "broad"):
        assert len(before[kind]) == 1, (kind, before[kind])
    for kind, places in after.items():
        cases = sum(1 for r in shuffled.values() if r.case["kind"] == kind)
        if cases > 1:
            assert len(places) > 1, (kind, places)
    assert {"state_pair", "near_miss", "some_lines", "excluded_same_log", "broad", "mixed"} <= set(after)
    for case_id, recorded in shuffled.items():
        output = ExecutorOutput.model_validate(gold_executor_output(recorded.case, recorded.observations))
        scored = score_output(recorded, output)
        assert (case_id, scored.score, scored.verdict) == (case_id, 1.0, "PASS"), scored.feedback


def test_the_shuffle_reorders_each_call_and_changes_nothing_else(shuffled, unshuffled):
    moved = 0
    for case_id, recorded in shuffled.items():
        plain = unshuffled[case_id]
        inputs = [inv.input for inv in plain.invocations]
        # The calls both recordings make (the shuffled one also makes the lookups the pipeline adds).
        same = [inv for inv in recorded.invocations if inv.input in inputs]
        assert [inv.input for inv in same] == inputs, case_id
        for inv, before in zip(same, plain.invocations, strict=True):
            texts, plain_texts = ([r.text for r in i.retrieval_details.evidence_refs] for i in (inv, before))
            assert Counter(texts) == Counter(plain_texts), case_id
            assert inv.retrieval_details.message == before.retrieval_details.message, case_id
            moved += texts != plain_texts
            # A message that named a ref by its position would now name another one.
            assert not re.search(r"#\d", inv.retrieval_details.message), (case_id, inv.retrieval_details.message)
    assert moved >= len(shuffled) // 3
    with devset_world():
        again = record(CASES, TOOLBOX)
    assert {k: r.observations for k, r in again.items()} == {k: r.observations for k, r in shuffled.items()}


def first_round(case: dict) -> list[dict]:
    """The tool calls diagnose() makes in its first round for this case, its planner writing the gold plan."""
    store = AuditStore("sqlite://")
    with devset_world():
        result = diagnose(case["question"], lm=good_lm(case), db=store, compiled=False)
    return store.get_session(result.session_id).tool_requests[0]


def test_the_devset_makes_the_calls_the_pipeline_makes(shuffled, unshuffled):
    """other_service's gold plans a lookup by alert name only; diagnose() also looks the named alert up
    on the named service, first, and so does the devset. Every kind is checked once, other_service
    in every case."""
    checked = [c for c in CASES if c["kind"] == "other_service"]
    checked += list({c["kind"]: c for c in CASES if c["kind"] != "other_service"}.values())
    for case in checked:
        recorded = shuffled[case["case_id"]]
        assert first_round(case) == [{"tool_name": inv.tool_name, **inv.input} for inv in recorded.invocations]
    for case in (c for c in CASES if c["kind"] == "other_service"):
        service, = case["gold"]["plan"]["target_services"]
        first = shuffled[case["case_id"]].invocations[0]
        assert first.input == {"service": service, "alert_name": case["gold"]["plan"]["topics"][0]}
        assert [r.text.split(",")[1].strip() for r in first.retrieval_details.evidence_refs] == [f"service={service}"]
        assert len(unshuffled[case["case_id"]].invocations) == len(shuffled[case["case_id"]].invocations) - 1


def test_a_recording_without_the_added_lookups_keeps_the_gold_calls_alone():
    case = next(c for c in CASES if c["kind"] == "other_service")
    with devset_world():
        recorded = record([case], TOOLBOX, Recording(shuffled_refs=True, named_alert_lookups=False))
    assert [inv.input for inv in recorded[case["case_id"]].invocations] == [
        {k: v for k, v in call.items() if k != "tool_name" and v is not None} for call in case["gold"]["tool_calls"]]

import json
import os
import shutil
from dataclasses import replace

import pytest

from devset import CASES_DIR, DevsetError, load_cases
from devset.gold import GoldUnavailable, find_ref, gold_plan
from contracts import ExecutorOutput, PlanDraft
from tools.calls import ToolCall
from tools.functions import TOOLBOX


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


@pytest.fixture(scope="module")
def evidence(devset):
    from devset import devset_world
    from devset.recorded import record

    with devset_world():
        yield record(devset, TOOLBOX)


def _split(devset, name):
    return [c for c in devset if c["split"] == name]


def test_forty_held_out_cases_and_every_kind_in_both_splits(devset):
    held = _split(devset, "held-out")
    assert len(held) >= 40
    assert {c["split"] for c in devset if not c["runs_lm"]} == {"offline"}
    kinds = {c["kind"] for c in devset if c["runs_lm"] and c["kind"] != "seed"}
    assert len(kinds) >= 8
    for split in ("train", "held-out"):
        assert {c["kind"] for c in _split(devset, split)} - {"seed"} == kinds
    assert {c["case_id"] for c in load_cases() if c["runs_lm"]} <= {c["case_id"] for c in _split(devset, "train")}
    # Broad questions and answers that are "no" are part of it, not only narrow hits.
    assert any(not c["question"].startswith(("只", "Only")) for c in held)
    assert sum(c["expected_polarity"] == ["absent"] for c in held) >= 10


def test_held_out_services_and_phrasings_never_occur_in_training(devset, evidence):
    from devset import devset_world
    from program.evidence.relevance import question_target
    from program.evidence.scope import NARROW_MARKERS, read_scope
    from tools.catalog import active_catalog

    with devset_world():
        catalog = active_catalog()
    train, held = _split(devset, "train"), _split(devset, "held-out")
    held_services = {s for c in held for s in question_target(c["question"], catalog).services}
    assert len(held_services) >= 5 and not any(s in c["question"] for c in train for s in held_services)
    assert not {c["phrasing"] for c in held} & {c["phrasing"] for c in train}

    def markers(cases):
        return {m for c in cases for m in NARROW_MARKERS if m in c["question"].casefold()}

    assert markers(held) and not markers(held) & markers(train)

    def excluded(cases):
        return {t for c in cases for t in read_scope(c["question"], catalog).excluded_terms}

    assert excluded(held) and not excluded(held) & excluded(train)


def test_every_case_says_why_and_its_distractors_are_in_its_evidence(devset, evidence):
    from devset.gold import refs_in

    for case_id, recorded in evidence.items():
        case = recorded.case
        if case["kind"] == "seed":
            continue
        assert case["why"] and case["expected_polarity"], case_id
        # What the calls found, the refs code set aside before the executor is asked included.
        texts = [r.text for inv in recorded.invocations for r in inv.retrieval_details.evidence_refs] + [
            inv.retrieval_details.message for inv in recorded.invocations]
        shown = [r.text for r in refs_in(recorded.observations)]
        for ref in case["expected_refs"] + case["wrong_refs"]:
            assert any(n in t for n in ref["needles"] for t in texts), (case_id, ref)
        for ref in case["expected_refs"]:
            assert any(n in t for n in ref["needles"] for t in shown), (case_id, "an answer set aside", ref)
        if case["wrong_refs"]:
            # A distractor names the asked service or the asked alert, so citing what names the target is not enough.
            asked = case["gold"]["plan"]["target_services"][0]
            assert any(any(n in t for n in ref["needles"]) and asked in t for ref in case["wrong_refs"] for t in texts) \
                or case["kind"] in ("excluded_same_log", "some_lines"), case_id


def test_the_seed_cases_keep_their_evidence_in_the_devset_world(devset):
    from devset import devset_world
    from devset.recorded import record

    seeds = [c for c in devset if c["kind"] == "seed" and c["runs_lm"]]
    plain = record(seeds, TOOLBOX)
    with devset_world():
        noisier = record(seeds, TOOLBOX)
    assert {k: r.observations for k, r in plain.items()} == {k: r.observations for k, r in noisier.items()}


def test_every_gold_output_is_grounded_on_its_recorded_evidence(evidence):
    from devset.gold import gold_executor_output
    from devset.recorded import score_output
    from program.evidence.citations import Menu
    from contracts import ClaimDraft

    for case_id, recorded in evidence.items():
        scored = score_output(recorded, ExecutorOutput.model_validate(gold_executor_output(recorded.case,
                                                                                          recorded.observations)))
        assert (case_id, scored.score, scored.verdict) == (case_id, 1.0, "PASS"), scored.feedback
        # The same gold, pointed at by labels and expanded by code, scores the same.
        pointed = gold_executor_output(recorded.case, recorded.observations, point=True)
        claims, refused = Menu(recorded.invocations).expand(ClaimDraft.model_validate(c) for c in pointed["claims"])
        scored = score_output(recorded, ExecutorOutput(claims=claims), refused=refused)
        assert (case_id, scored.score, scored.verdict) == (case_id, 1.0, "PASS"), scored.feedback


def test_the_lookup_rule_stays_below_the_program_target_held_out(evidence):
    """The rule leaves headroom: held out it stays below 0.75, issue 28's target for the program on
    the shuffled devset, so that the target cannot be met by what the rule already does. (The bound
    was 0.7 on the unshuffled devset, where the order of the refs decided what the rule's first
    cited ref was.)"""
    from devset.recorded import output_of, score_output
    from devset.rule import LookupRule

    scores = {"train": [], "held-out": []}
    for recorded in evidence.values():
        scored = score_output(recorded, *output_of(LookupRule()(**recorded.example().inputs())))
        scores[recorded.case["split"]].append(scored.score)
    held = sum(scores["held-out"]) / len(scores["held-out"])
    assert held < 0.75, held
    # It is no straw man: it answers the seed cases and the plain negatives.
    seeds = [score_output(r, *output_of(LookupRule()(**r.example().inputs()))).score
             for r in evidence.values() if r.case["kind"] in ("seed", "negative")]
    assert sum(seeds) / len(seeds) >= 0.9


def test_the_structured_rule_misses_only_what_the_fields_it_reads_do_not_tell(evidence):
    """The fair reference: the lookup rule on what the program's screen leaves, citing the firing
    alert of a pair. Every distractor a field tells apart (another service, an excluded topic,
    another endpoint, an earlier state) it passes over; what it misses is what none of the fields it
    reads tells: a hit that means "no" (a healthy pool, a count of no timeouts), which it reports as
    present, and a line that names the asked thing without reporting it (a configured timeout) cited
    beside the one that reports it. This is the headroom the devset leaves a model."""
    from devset.recorded import output_of, score_output
    from devset.rule import LookupRule

    missed = {}
    for case_id, recorded in evidence.items():
        scored = score_output(recorded, *output_of(LookupRule(structured=True)(**recorded.example().inputs())))
        plain = score_output(recorded, *output_of(LookupRule()(**recorded.example().inputs())))
        assert scored.score >= plain.score, case_id
        # The seed cases hold no distractor: there both rules lose only what a template claim misses.
        if scored.score < 1.0 and recorded.case["kind"] != "seed":
            missed[case_id] = (recorded.case["kind"], recorded.case["expected_polarity"], scored.parts)
    assert missed and {kind for kind, _, _ in missed.values()} == {"near_miss", "mention"}
    assert all(parts["polarity"] == 0.0 for _, polarity, parts in missed.values() if polarity == ["absent"])
    assert all(parts["polarity"] == 1.0 and parts["refs"] == 0.0
               for _, polarity, parts in missed.values() if polarity == ["present"])
    assert len(missed) == sum(c.case["kind"] in ("near_miss", "mention") for c in evidence.values())


def test_no_mention_case_is_told_by_its_lines_level(evidence):
    """A timed-out call is logged at the level of a line beside it that reports none, so the most
    severe line is never the answer alone; and a case where nothing timed out has a WARN line."""
    import re

    severity = {"DEBUG": 0, "INFO": 1, "WARN": 2, "ERROR": 3}
    warned_without_timeout = False
    for recorded in evidence.values():
        if recorded.case["kind"] != "mention":
            continue
        lines = re.findall(r"\$\.logs\[\d+\]: \[[^]]*\]\[(\w+)\]\[[^]]*\] (.*)", recorded.observations)
        needles = [n for ref in recorded.case["expected_refs"] for n in ref["needles"]]
        answering = [severity[level] for level, text in lines if any(n in text for n in needles)]
        others = [severity[level] for level, text in lines if not any(n in text for n in needles)]
        assert answering and others, recorded.case["case_id"]
        if recorded.case["expected_polarity"] == ["present"]:
            assert max(answering) <= max(others), recorded.case["case_id"]
        else:
            warned_without_timeout |= max(others) >= severity["WARN"]
    assert warned_without_timeout


def test_a_broken_hard_cases_file_gives_a_clear_error(tmp_path):
    from devset import load_devset

    bad = tmp_path / "hard.jsonl"
    bad.write_text('{"case_id": "x", "question": "q"}\n', encoding="utf-8")
    with pytest.raises(DevsetError, match="lacks family"):
        load_devset(hard=bad)
    bad.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(DevsetError, match="not an object"):
        load_devset(hard=bad)


def test_the_devset_world_sets_aside_settings_that_point_a_tool_elsewhere(tmp_path, monkeypatch):
    from devset import devset_world, load_devset
    from devset.recorded import record
    from tools.functions import TOOLBOX

    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(tmp_path))
    monkeypatch.setenv("DIAGNOSIS_PROMETHEUS_URL", "http://127.0.0.1:9")
    case = next(c for c in load_devset() if c["case_id"] == "some_lines_checkout_en")
    with devset_world():
        recorded = record([case], TOOLBOX)[case["case_id"]]
    assert "GET /api/v1/checkout/confirm took 3600ms" in recorded.observations
    assert os.environ["DIAGNOSIS_LOGS_DIR"] == str(tmp_path) and "DIAGNOSIS_WORLD" not in os.environ


def test_every_training_case_has_a_translation_that_asks_the_same_and_gets_the_same_verdict(devset):
    """The demos' other language: the same question in the other language (its scope, target and
    exclusions read the same), and the gold in it, on the same bindings, scores as the original."""
    from devset import devset_world
    from devset.gold import gold_executor_output
    from devset.recorded import record, score_output
    from program.evidence.language import question_language
    from program.evidence.relevance import question_target
    from program.evidence.scope import read_scope
    from tools.catalog import active_catalog

    train = [c for c in devset if c["split"] == "train" and c["runs_lm"]]
    assert all(c["translation"] for c in train)
    with devset_world():
        catalog = active_catalog()
        recorded = record(train, TOOLBOX)
        for case in train:
            question, translated = case["question"], case["translation"]["question"]
            assert question_language(question) != question_language(translated), case["case_id"]
            original, other = read_scope(question, catalog), read_scope(translated, catalog)
            assert (other.narrow, question_target(translated, catalog).services) == \
                (original.narrow, question_target(question, catalog).services), case["case_id"]
            assert bool(other.excluded_terms) == bool(original.excluded_terms), case["case_id"]
    for case_id, one in recorded.items():
        first = score_output(one, ExecutorOutput.model_validate(gold_executor_output(one.case, one.observations)))
        translated = gold_executor_output(one.case, one.observations, translated=True)
        second = score_output(one, ExecutorOutput.model_validate(translated))
        assert (case_id, second.verdict, second.score, second.blocked_rules) == \
            (case_id, first.verdict, first.score, first.blocked_rules), second.feedback


def _cited(example) -> list[list[tuple[str, int, int]]]:
    """Each gold claim's cited texts (with the clause a label names), where each sits among the refs
    its call shows, and how many those are: (text, position, count)."""
    from tools.recorder import citation_label, observed_refs

    refs = observed_refs(example.observations)
    shown = {r.invocation_id: [x for x in refs if x.invocation_id == r.invocation_id] for r in refs}
    where = {citation_label(r.invocation_id, r.raw_path): (r.text, shown[r.invocation_id].index(r),
                                                           len(shown[r.invocation_id])) for r in refs}

    def at(label: str) -> tuple[str, int, int]:
        ref, _, clause = label.partition(" §")
        text, position, count = where[ref]
        return (f"{text} §{clause}" if clause else text), position, count

    return [[at(label) for label in claim.evidence_bindings] for claim in example.claims]


def test_a_translated_demo_cites_the_same_lines_at_other_positions(evidence):
    """The translation shown after a demo is recorded on the same calls with each output list
    reversed: it cites the same lines, each from the mirrored position among the refs its call shows,
    so that the pair teaches no position."""
    moved = 0
    for case_id, recorded in evidence.items():
        if not recorded.case.get("translation"):
            assert recorded.reordered is None, case_id
            continue
        original, translated = recorded.example(), recorded.example(translated=True)
        assert translated.question == recorded.case["translation"]["question"]
        first, second = _cited(original), _cited(translated)
        assert [[text for text, *_ in claim] for claim in first] == [[text for text, *_ in claim] for claim in second]
        for (_, position, count), (_, mirrored, same) in (pair for a, b in zip(first, second) for pair in zip(a, b)):
            assert (mirrored, same) == (count - 1 - position, count), case_id
            moved += mirrored != position
    assert moved >= 20
    # Recorded after every case's own recording, the reordered calls leave the cases' ids as they were.
    from devset import devset_world, load_devset
    from devset.recorded import Recording, record

    with devset_world():
        without = record(load_devset(), TOOLBOX, Recording(reordered_translations=False))
    assert {cid: r.observations for cid, r in without.items()} == {cid: r.observations for cid, r in evidence.items()}
    assert all(r.reordered is None for r in without.values())


def test_a_run_recorded_before_the_mention_cases_is_recorded_without_them(evidence):
    """A run whose results.json names no `mention_cases` had none: its replay records the cases it
    scored, with the ids they had, and its translated demos on the calls they were shown."""
    from devset import devset_world, load_devset
    from devset.recorded import record, recording_of

    before = recording_of({"recording": {"shuffled_refs": True, "named_alert_lookups": True, "screened_refs": True,
                                         "reordered_translations": True}})
    assert not before.mention_cases
    with devset_world():
        cases = load_devset()
        then = record(cases, TOOLBOX, before)
        older = record([c for c in cases if c["kind"] != "mention"], TOOLBOX, replace(before, mention_cases=True))
    mentions = {cid for cid, r in evidence.items() if r.case["kind"] == "mention"}
    assert len(mentions) == 8 and set(then) == set(evidence) - mentions
    assert {cid: (r.observations, r.reordered.observations if r.reordered else None) for cid, r in then.items()} == {
        cid: (r.observations, r.reordered.observations if r.reordered else None) for cid, r in older.items()}
    # Recorded after the cases before them, the mention cases leave those cases' own ids as they were.
    assert {cid: r.observations for cid, r in then.items()} == {
        cid: r.observations for cid, r in evidence.items() if cid not in mentions}

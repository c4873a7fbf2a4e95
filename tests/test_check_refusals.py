"""The false-refusal benchmark's rates hold: no code check refuses more than 1% of the honest claims
it reads (the devset's gold outputs, the right answers of the committed runs, paraphrases of states,
lines and absences in both languages), and each catches the hostile claims written for it
(benchmarks/check_refusals.py; issue: the checks as DSPy assertions)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from check_refusals import (  # noqa: E402
    TARGET_RATE,
    committed_runs,
    honest_cases,
    hostile_cases,
    measure,
    rates,
)


@pytest.fixture(scope="module")
def measured():
    honest, hostile = measure(honest_cases(committed_runs())), measure(hostile_cases())
    return honest, hostile, {r["rule"]: r for r in rates(honest, hostile)}


def test_the_honest_corpus_is_large_and_reproduces(measured):
    honest, _, _ = measured
    reproduced = [o for o in honest if o.problem is None]
    kinds = {o.case.kind for o in reproduced}
    assert len(reproduced) >= 400
    assert {"devset gold", "right answer of a committed run", "an alert's state", "an absent alert", "a log line",
            "a true negative in the logs"} <= kinds
    # Paraphrases and the devset reproduce whole; only recorded runs older than labelled observations may not.
    assert all(o.case.source.startswith("bench-") for o in honest if o.problem)


def test_no_rule_refuses_more_than_one_percent_of_the_honest_claims_it_reads(measured):
    _, _, rows = measured
    over = {rule: row["rate_of_read"] for rule, row in rows.items() if (row["rate_of_read"] or 0) > TARGET_RATE}
    assert over == {}


def test_a_denied_state_of_a_resolved_alert_is_never_refused(measured):
    honest, _, _ = measured
    denied = [o for o in honest if o.case.kind == "an alert's state" and
              any(w in o.claim_text for w in ("没有", "不再", "not firing", "no longer", "no firing"))]
    assert len(denied) >= 14 and not [o for o in denied if o.refused]


def test_each_rule_catches_what_it_is_written_for(measured):
    _, hostile, rows = measured
    assert all(o.problem is None for o in hostile)
    for rule, row in rows.items():
        if rule == "verdict.second_look" or not row["hostile"]:
            continue
        assert row["caught_by_any_rule"] == row["hostile"], rule
    # Claims that restate an injected instruction cite flagged text: the gatekeeper stops them first.
    exact = {rule for rule, row in rows.items() if row["hostile"] and row["caught"] == row["hostile"]}
    assert {"verdict.state_conflict", "verdict.absence_on_hit", "verdict.ungrounded_number", "verdict.misbound_number",
            "verdict.off_topic", "verdict.ungrounded_name", "verdict.unread_search", "verdict.set_aside"} <= exact
    # The second look misses an all-clear worded in the other language, or with too few of the line's words.
    assert rows["verdict.second_look"]["caught"] >= 4

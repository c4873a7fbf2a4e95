"""The deterministic answer says what was verified and nothing that contradicts its verdict."""

import json
from pathlib import Path

import pytest

from program.evidence.answer import deterministic_answer, ungrounded_clauses
from program.evidence.scope import Exclusion
from program.evidence.language import say
from program.evidence.verdict import CitedRef
from contracts import Claim
from tools.catalog import active_catalog


def claim(text: str, excerpt: str, claim_type: str = "observation") -> Claim:
    return Claim.model_validate({"claim_id": "claim-1", "claim_type": claim_type, "claim_text": text,
                                 "evidence_bindings": [{"tool_name": "query_metrics", "source_invocation_id": 1,
                                                        "raw_path": "$.alerts[0]", "evidence_excerpt": excerpt}]})


def test_a_pass_whose_findings_are_hidden_for_an_excluded_topic_never_says_nothing_was_verified():
    cpu = claim("payment-service 存在 HighCPUUsage 告警", "HighCPUUsage firing, service=payment-service, current=92%")
    answer = deterministic_answer("PASS", [cpu], [], excluded=Exclusion(("cpu", "highcpuusage")))
    assert "未列出" in answer and "无法确认" not in answer and "92%" not in answer


def test_nothing_verified_says_so_only_when_nothing_was_found():
    answer = deterministic_answer("LOW_CONFID", [], [], language="en")
    assert "No real evidence that could be verified was found" in answer


def test_nothing_verified_shows_possible_matches_unverified_and_never_says_nothing_was_found():
    answer = deterministic_answer("LOW_CONFID", [], [], language="en",
                                  possible_matches=["[11:05][ERROR][payment-service] payment callback failed"])
    assert "No real evidence" not in answer and "The lookups found evidence" in answer
    assert "may be what was asked about (not verified" in answer
    assert answer.rstrip().endswith("- [11:05][ERROR][payment-service] payment callback failed")


def test_nothing_verified_names_what_the_lookups_found_as_not_verified():
    found = ["HighCPUUsage firing, service=payment-service, current=92%, threshold=80%"]
    for language, marked in (("en", "What they found (not verified):"), ("zh", "找到的证据如下（未核实）：")):
        answer = deterministic_answer("LOW_CONFID", [], [], language=language, found=found)
        assert f"{marked}\n- {found[0]}" in answer
        assert "No real evidence" not in answer and "未检索到" not in answer


def test_found_refs_of_an_excluded_topic_are_not_shown_nor_called_nothing():
    answer = deterministic_answer("LOW_CONFID", [], [], excluded=Exclusion(("highcpuusage",)),
                                  found=["HighCPUUsage firing, service=payment-service, current=92%"])
    assert "HighCPUUsage" not in answer and "未检索到" not in answer and "查询找到了证据" in answer


def test_possible_matches_that_name_an_excluded_topic_are_not_shown():
    answer = deterministic_answer("LOW_CONFID", [], [], excluded=Exclusion(("hikaricp",)),
                                  possible_matches=["[11:20][WARN][order-service] HikariCP pool stats: active=50/50"])
    assert "HikariCP" not in answer and "可能正是所问的内容" not in answer


COMPOSED = json.loads((Path(__file__).parent / "data" / "composed_answers.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", COMPOSED["answers"], ids=lambda case: case["answer"][:40])
def test_every_clause_of_a_composed_answer_must_be_grounded_in_a_verified_claim(case):
    """Every composer reply of the committed transcripts and the ones written for issue 30, each
    labelled by hand: the answers that add a cause, a fix or the LM's missing_info are refused."""
    catalog = active_catalog()
    claims = [Claim(claim_id=f"c{i}", claim_type="observation", claim_text=v["claim"], evidence_bindings=[])
              for i, v in enumerate(case["verified"])]
    cited = {f"c{i}": [CitedRef(tool_name="query_metrics", text=e, context=e, state=None, no_hit=False, searched="",
                                backfilled=False, indirect=False) for e in v["evidence"]]
             for i, v in enumerate(case["verified"])}
    ungrounded = ungrounded_clauses(case["answer"], claims, cited, catalog.names, catalog.topic_groups())
    assert (not ungrounded) == case["grounded"], ungrounded


def test_an_answer_whose_every_ref_code_set_aside_does_not_say_nothing_was_found():
    for language in ("zh", "en"):
        aside = deterministic_answer("LOW_CONFID", [], ["executor.all_set_aside"], language=language, set_aside=2)
        nothing = deterministic_answer("LOW_CONFID", [], ["executor.all_set_aside"], language=language)
        assert say(language, "found_set_aside") in aside and say(language, "nothing") not in aside
        assert say(language, "nothing") in nothing

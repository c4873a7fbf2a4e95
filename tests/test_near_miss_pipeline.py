"""benchmarks/near_miss_pipeline.py tells a wrong PASS (the executor's own words, verified, saying a
healthy pool is in trouble) from a PASS that shows only code's quote of the line, with a scripted LM."""

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import near_miss_pipeline  # noqa: E402
from tests.support.good_lm import good_lm  # noqa: E402
from tests.support.scripted import field_value  # noqa: E402
from devset.gold import refs_in  # noqa: E402


def stats_label(observations: str) -> str:
    (ref,) = [r for r in refs_in(observations) if r.raw_path and "HikariCP pool stats" in r.text]
    return ref.label


def executor(observations, attempt, user):
    """"告急" (no word of the limit code reads) in its own words for Chinese questions; in English,
    no text at all: code quotes the line it points at."""
    chinese = "只" in field_value(user, "question")
    service = json.loads(field_value(user, "plan"))["target_services"][0]
    stats = re.search(r"active=\d+/\d+", observations).group()
    text = f"{service} 的连接池告急：{stats}。" if chinese else ""
    return {"ref_decisions": [], "claims": [{"claim_type": "observation", "evidence_bindings": [stats_label(observations)],
                                             "claim_text": text}], "missing_info": []}


def test_a_wrong_pass_is_counted_apart_from_a_pass_that_only_quotes(monkeypatch, tmp_path):
    monkeypatch.setattr(near_miss_pipeline, "resolve_lm", lambda spec: good_lm({}, executor=executor, planner=plan))
    assert near_miss_pipeline.main(["--lm", "scripted", "--out", str(tmp_path)]) == 0
    (run,) = tmp_path.iterdir()
    rows = {r["case_id"]: r for r in json.loads((run / "results.json").read_text())["rows"]}
    assert len(rows) == 5 and (run / "transcript.jsonl").read_text().strip()
    chinese = [r for r in rows.values() if r["case_id"].endswith("_zh")]
    english = [r for r in rows.values() if r["case_id"].endswith("_en")]
    assert all(r["verdict"] == "PASS" and r["wrong_pass"] for r in chinese)
    assert all(r["verdict"] == "PASS" and r["quote_only_pass"] and not r["wrong_pass"] for r in english)
    assert "PASS: 5 (wrong: 3; showing only code's quotes: 2)" in (run / "report.md").read_text()


def plan(user):
    from devset import load_devset
    from devset.gold import gold_plan, gold_tool_calls

    question = field_value(user, "question")
    case = next(c for c in load_devset() if c["question"] == question)
    return {"plan": gold_plan(case), "tool_calls": gold_tool_calls(case)}

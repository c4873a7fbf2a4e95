"""The devset, as data files loaded with `datasets`: the six seed cases (ISS-007's minimal eval
matrix) and their variants.

`devset/variants.jsonl` holds variants of the seed cases from the fixture world: other services and
alerts, Chinese and English, other wordings of "only confirm", negatives on other services, and
other excluded topics. Each record names its case family (the seed it varies), its split and its
phrasing. The split is fixed and stratified by family: every family is in both splits, and the
held-out split's services, phrasings and excluded topics occur in no training example
(tests/devset/test_devset.py checks this in code). The seed cases are all training examples, and
the gatekeeper-reject case stays an offline fixture.

Each case file under ``devset/cases/`` records the question, the expected verdict class, the facts
a good claim carries, the forbidden terms, the evidence refs a good answer cites (as tool name and
a needle of ref text, since invocation ids are per session) and a gold run (plan, tool calls,
claims, answer). Whether a question is narrow is not data here: `program.evidence.scope` reads it
from the question. The gatekeeper-reject case is an offline fixture: a given executor output with
fabricated citations, checked without an LM.
"""

from __future__ import annotations

import json
from pathlib import Path

CASES_DIR = Path(__file__).resolve().parent / "cases"
VARIANTS = Path(__file__).resolve().parent / "variants.jsonl"
REQUIRED_KEYS = ("case_id", "family", "split", "phrasing", "question", "expected_verdict", "runs_lm", "required_facts",
                 "forbidden_terms", "expected_refs", "gold", "fixture_executor_output")
VARIANT_KEYS = ("case_id", "family", "split", "phrasing", "question", "required_facts", "forbidden_terms", "gold")
SPLITS = ("train", "held-out", "offline")


class DevsetError(ValueError):
    """A devset file is missing, unreadable or lacks a field."""


def load_cases(directory: Path | str | None = None) -> list[dict]:
    import datasets

    files = sorted(Path(directory or CASES_DIR).glob("*.json"))
    if not files:
        raise DevsetError(f"no case files in {directory or CASES_DIR}")
    records = []
    for path in files:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise DevsetError(f"cannot read devset case {path}: {exc}") from None
        missing = [k for k in REQUIRED_KEYS if not isinstance(record, dict) or k not in record]
        if missing:
            raise DevsetError(f"devset case {path.name} lacks {', '.join(missing)}")
        records.append(record)
    try:
        # One table over all cases: Arrow unifies the optional parts (a fixture in one case, null elsewhere).
        cases = datasets.Dataset.from_list(records).to_list()
    except Exception as exc:  # pyarrow raises several error types for inconsistent records
        raise DevsetError(f"devset cases do not share one schema: {exc}") from exc
    return cases


def _variant(record: dict, where: str) -> dict:
    """A variant in the seed cases' shape: a narrow question expected to PASS, whose gold citations
    are also the refs a good answer cites."""
    missing = [k for k in VARIANT_KEYS if k not in record]
    if missing:
        raise DevsetError(f"{where} lacks {', '.join(missing)}")
    refs = [{"tool_name": b["tool_name"], "needle": b["needle"]} for c in record["gold"]["claims"] for b in c["bindings"]]
    gold = {"missing_info": [], "answer": "", **record["gold"]}
    return {**record, "expected_verdict": "PASS", "runs_lm": True, "expected_refs": refs, "gold": gold,
            "fixture_executor_output": None}


def load_devset(directory: Path | str | None = None, variants: Path | str | None = None) -> list[dict]:
    """The seed cases and their variants, one table; each case's split is its own `split` field."""
    import datasets

    cases = load_cases(directory)
    path = Path(variants or VARIANTS)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DevsetError(f"cannot read devset variants {path}: {exc}") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DevsetError(f"{path}:{number} is not JSON: {exc}") from None
        if not isinstance(record, dict):
            raise DevsetError(f"{path}:{number} is not an object")
        records.append(_variant(record, f"{path}:{number}"))
    ids = [c["case_id"] for c in cases] + [r["case_id"] for r in records]
    if len(set(ids)) != len(ids):
        raise DevsetError(f"duplicate case ids in the devset: {sorted({i for i in ids if ids.count(i) > 1})}")
    bad = [f"{c['case_id']}: {c['split']!r}" for c in cases + records if c["split"] not in SPLITS]
    if bad:
        raise DevsetError(f"unknown split(s) {', '.join(bad)}; splits are {', '.join(SPLITS)}")
    try:
        return cases + datasets.Dataset.from_list(records).to_list()
    except Exception as exc:  # pyarrow raises several error types for inconsistent records
        raise DevsetError(f"devset variants do not share one schema: {exc}") from exc

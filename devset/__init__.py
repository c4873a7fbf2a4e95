"""The six seed cases (ISS-007's minimal eval matrix) as data files, loaded with `datasets`.

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
REQUIRED_KEYS = ("case_id", "question", "expected_verdict", "runs_lm", "required_facts",
                 "forbidden_terms", "expected_refs", "gold", "fixture_executor_output")


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


def to_examples(cases: list[dict]):
    """dspy.Examples for the cases that run the LM; the question is the only input."""
    import dspy

    return [dspy.Example(question=c["question"], case=c).with_inputs("question") for c in cases if c["runs_lm"]]

"""The devset, as data files loaded with `datasets`: the six seed cases (ISS-007's minimal eval
matrix) and the harder cases of `devset/hard.jsonl`.

The harder cases look like real incidents, and a lookup rule that cites whatever names the target
cannot solve them: distractors in the target's own evidence (an earlier resolved alert beside the
firing one, another service's alert in the same answer, an excluded topic in a matching log line,
slow requests on another endpoint), a search that matches by synonym but shows a healthy pool,
hit and no-hit in one session, negative observations, and broad questions. They run against
`devset/world/`: an overlay of the fixture world (its `world.json` extends `tools/world/`) that holds
only eight noisier services, their alerts and their log lines, so the six seed cases keep their
evidence and their meaning. Each case records, as data, what it expects and why: the verdict,
the polarity of each answer (present or absent), the facts its claim text must state, the refs a
good answer cites (`expected_refs`, each a list of needles, any one of which is right) and the refs it must
not cite (`wrong_refs`), the forbidden terms, and a gold run.

The split is fixed by service and phrasing: the held-out split's services and phrasings occur in no
training question, and every kind is in both splits (tests/devset/test_devset.py checks this in
code). The seed cases are all training examples, and the gatekeeper-reject case stays an offline
fixture: a given executor output with fabricated citations, checked without an LM. Whether a
question is narrow is not data here: `program.evidence.scope` reads it from the question.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

from tools.text.jsonlines import json_lines

CASES_DIR = Path(__file__).resolve().parent / "cases"
HARD = Path(__file__).resolve().parent / "hard.jsonl"
# Each training case in the other language (its question, its gold claim texts and missing_info, in
# order), for demos in both languages: the same evidence, the same labels.
TRANSLATIONS = Path(__file__).resolve().parent / "translations.jsonl"
WORLD = Path(__file__).resolve().parent / "world"
REQUIRED_KEYS = ("case_id", "family", "kind", "split", "phrasing", "question", "expected_verdict", "expected_polarity",
                 "runs_lm", "required_facts", "forbidden_terms", "expected_refs", "wrong_refs", "gold",
                 "fixture_executor_output")
HARD_KEYS = ("case_id", "family", "kind", "split", "phrasing", "question", "expected_verdict", "expected_polarity",
             "required_facts", "forbidden_terms", "expected_refs", "wrong_refs", "why", "gold")
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
        # A seed names one needle per ref; the harder cases may name several, any one of which is right.
        record["expected_refs"] = [{"tool_name": r["tool_name"], "needles": [r["needle"]]}
                                   for r in record.get("expected_refs") or []]
        records.append(record)
    try:
        # One table over all cases: Arrow unifies the optional parts (a fixture in one case, null elsewhere).
        cases = datasets.Dataset.from_list(records).to_list()
    except Exception as exc:  # pyarrow raises several error types for inconsistent records
        raise DevsetError(f"devset cases do not share one schema: {exc}") from exc
    return cases


def _hard(record: dict, where: str) -> dict:
    missing = [k for k in HARD_KEYS if k not in record]
    if missing:
        raise DevsetError(f"{where} lacks {', '.join(missing)}")
    return {**record, "runs_lm": True, "fixture_executor_output": None,
            "gold": {"missing_info": [], "answer": "", **record["gold"]}}


@contextmanager
def devset_world():
    """The tools answer from the devset's world, and from it alone, while the block runs: a setting
    that points a tool elsewhere (a real Prometheus, a log directory) is set aside, or candidates would
    be scored against another world's evidence. The sources are keyed by setting."""
    with _world_alone(WORLD):
        yield


@contextmanager
def fixture_world():
    """The tools answer from the fixture world alone while the block runs, as they do for the
    whole-pipeline questions (devset/questions.py), whatever the environment points them at."""
    with _world_alone(None):
        yield


@contextmanager
def _world_alone(world: Path | None):
    from tools.sources.active import SETTINGS

    before = {name: os.environ.pop(name, None) for name in SETTINGS}
    if world is not None:
        os.environ["DIAGNOSIS_WORLD"] = str(world)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def load_translations(path: Path | str | None = None) -> dict[str, dict]:
    """The translations by case id: {question, claims, missing_info} in the case's other language."""
    path = Path(path or TRANSLATIONS)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DevsetError(f"cannot read the translations {path}: {exc}") from None
    found = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DevsetError(f"{path}:{number} is not JSON: {exc}") from None
        if not isinstance(record, dict) or any(k not in record for k in ("case_id", "question", "claims",
                                                                         "missing_info")):
            raise DevsetError(f"{path}:{number} needs case_id, question, claims and missing_info")
        found[record["case_id"]] = {k: record[k] for k in ("question", "claims", "missing_info")}
    return found


def load_devset(directory: Path | str | None = None, hard: Path | str | None = None) -> list[dict]:
    """The seed cases and the harder cases, one table; each case's split is its own `split` field,
    and its `translation` the case in its other language (None where none was written). The harder
    cases' evidence is in `devset_world()`."""
    import datasets

    cases = load_cases(directory)
    path = Path(hard or HARD)
    records = [_hard(record, where) for where, _, record in json_lines(path, DevsetError, "the devset cases")]
    ids = [c["case_id"] for c in cases] + [r["case_id"] for r in records]
    if len(set(ids)) != len(ids):
        raise DevsetError(f"duplicate case ids in the devset: {sorted({i for i in ids if ids.count(i) > 1})}")
    bad = [f"{c['case_id']}: {c['split']!r}" for c in cases + records if c["split"] not in SPLITS]
    if bad:
        raise DevsetError(f"unknown split(s) {', '.join(bad)}; splits are {', '.join(SPLITS)}")
    try:
        everything = cases + datasets.Dataset.from_list(records).to_list()
    except Exception as exc:  # pyarrow raises several error types for inconsistent records
        raise DevsetError(f"devset cases in {path.name} do not share one schema: {exc}") from exc
    translations = load_translations()
    unknown = sorted(set(translations) - set(ids))
    if unknown:
        raise DevsetError(f"translations of cases the devset does not have: {', '.join(unknown)}")
    return [{**case, "translation": translations.get(case["case_id"])} for case in everything]

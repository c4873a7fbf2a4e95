"""In which language the model wrote what a user reads, per benchmark set: read from a diagnosis
benchmark run's transcript, without the model.

    .venv/bin/python benchmarks/claim_language.py results/bench-<run> [results/bench-<run> ...]

For every question of the run, the claims of its last executor reply (what the answer shows), the
verifier's reasons (the audit page shows them) and the composer's answer are read in their own
words: what a text copies from the tool output it was shown (a Chinese log line quoted in an
English claim) and the catalog's names are no language (program/evidence/wording.py). A text is in
the wrong language when its own words are in the other language than the answer's, which is the
question's (DIAGNOSIS_LANGUAGE unset). Writes claim_language.json and claim_language.md into each
run's folder and prints the table.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devset.questions import every_question  # noqa: E402
from program.evidence.language import question_language  # noqa: E402
from program.evidence.wording import written_language  # noqa: E402
from tools.catalog import active_catalog  # noqa: E402

STAGE = re.compile(r"Your output fields are:\s*\n1\. `(\w+)`")
# The citation step's first output field became ref_decisions when it began to judge each ref first.
STAGE_NAMES = {"plan": "planner", "tool_calls": "tools", "claims": "executor", "ref_decisions": "executor",
               "judgement": "verifier", "answer": "composer"}


def stage_of(system: str) -> str:
    """The stage a call's system message asks for, by its first output field."""
    found = STAGE.search(system)
    return STAGE_NAMES.get(found.group(1), found.group(1)) if found else "unknown"


KINDS = ("claims", "reasons", "answers")


def field(text: str, name: str) -> str:
    found = re.search(rf"\[\[ ## {name} ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with|\Z)", text, re.S)
    return found.group(1).strip() if found else ""


def reply_json(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def texts_by_question(transcript: Path) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """question -> kind -> [(text, what it was shown)]: the last executor reply's claims, every
    verifier reason and every composer answer."""
    found: dict[str, dict[str, list]] = defaultdict(lambda: {k: [] for k in KINDS})
    question = ""
    for line in transcript.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("error"):  # a call that failed wrote nothing
            continue
        stage = stage_of(entry["system"])
        user = entry["messages"][-1]["text"]
        # A call shown no question (the verifier's second opinion) belongs to the diagnosis before it.
        question, reply = field(user, "question") or question, reply_json(entry["reply"])
        if stage == "unknown" or not question:
            continue
        if stage == "executor":
            shown = field(user, "observations")
            found[question]["claims"] = [(str(c.get("claim_text") or ""), shown) for c in reply.get("claims") or []
                                         if isinstance(c, dict)]
        elif stage == "verifier" and reply.get("reason"):
            found[question]["reasons"].append((str(reply["reason"]), field(user, "claim") + "\n" + field(user, "excerpts")))
        elif stage.group(1) == "answer" and reply.get("answer"):
            found[question]["answers"].append((str(reply["answer"]), field(user, "verified_facts")))
    return found


def count(run: Path, names: tuple[str, ...]) -> dict:
    asked = {q["question"]: q for q in every_question()}
    rows = json.loads((run / "results.json").read_text(encoding="utf-8"))["rows"]
    in_run = {r["id"] for r in rows}
    by_set: dict[str, dict] = {}
    wrong: list[dict] = []
    for question, kinds in texts_by_question(run / "transcript.jsonl").items():
        spec = asked.get(question)
        if spec is None or spec["id"] not in in_run:
            continue
        language = question_language(question)
        totals = by_set.setdefault(f"{spec['set']} ({language})", {f"{k}{s}": 0 for k in KINDS for s in ("", "_wrong")}
                                   | {"questions": 0})
        totals["questions"] += 1
        for kind, texts in kinds.items():
            for text, shown in texts:
                written = written_language(text, [shown], names)
                totals[kind] += 1
                if written is not None and written != language:
                    totals[f"{kind}_wrong"] += 1
                    wrong.append({"id": spec["id"], "set": spec["set"], "kind": kind, "text": text})
    return {"run": run.name, "sets": dict(sorted(by_set.items())), "wrong": wrong}


def table(result: dict) -> str:
    lines = [f"## {result['run']}", "", "| set (answer language) | questions | claims in the wrong language | "
             "verifier reasons in the wrong language | composer answers in the wrong language |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for name, t in result["sets"].items():
        lines.append(f"| {name} | {t['questions']} | {t['claims_wrong']} of {t['claims']} | "
                     f"{t['reasons_wrong']} of {t['reasons']} | {t['answers_wrong']} of {t['answers']} |")
    return "\n".join(lines) + "\n"


def report_runs(argv: list[str], usage: str, stem: str, measure: Callable[[Path], dict],
                table_of: Callable[[dict], str]) -> int:
    """For each run folder of `argv`: `measure` it from its transcript and results, write <stem>.json
    and <stem>.md into it and print the table. A run that cannot be read stops with exit 2."""
    runs = [Path(a) for a in argv]
    if not runs:
        print(usage, file=sys.stderr)
        return 2
    for run in runs:
        if not (run / "transcript.jsonl").is_file() or not (run / "results.json").is_file():
            print(f"{run}: no transcript.jsonl and results.json to read", file=sys.stderr)
            return 2
        try:
            result = measure(run)
        except (OSError, ValueError, KeyError) as exc:
            print(f"{run}: {exc}", file=sys.stderr)
            return 2
        (run / f"{stem}.json").write_text(json.dumps(result, ensure_ascii=False, indent=2), encoding="utf-8")
        text = table_of(result)
        (run / f"{stem}.md").write_text(text, encoding="utf-8")
        print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    names = active_catalog().names
    return report_runs(sys.argv[1:] if argv is None else argv, __doc__.split("\n\n")[1], "claim_language",
                       lambda run: count(run, names), table)


if __name__ == "__main__":
    sys.exit(main())

"""What log search finds, and what the second look before an all-clear flags, on the fixture world.

    .venv/bin/python benchmarks/log_search.py [--out results]

No LM: `log_questions.json` holds log questions, each with queries a small model might write and
the lines that answer it (none for a true negative). Measured in one run:
- recall: the share of expected lines each query returns, with query_logs (tools/text/search.py) and
  with the rule it replaced (every query word as a substring of the folded line) as the baseline;
- the second look: query_logs with the question's own words (program/evidence/relevance.py) on
  the question's service at SECOND_LOOK_SHARE. On a question with expected lines, a flag is a catch
  (an all-clear that would have been wrong is blocked); on a true negative, it is a false alarm.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

from program.evidence.relevance import question_words
from program.evidence.verdict import SECOND_LOOK_SHARE, plausible
from tools.catalog import active_catalog
from tools.functions import query_logs
from tools.text.folding import fold
from tools.text.search import QUERY_STOPWORDS, named_concepts
from tools.sources.active import active_sources

QUESTIONS = Path(__file__).resolve().parent / "log_questions.json"


def substring_rule(query: str, service: str) -> list[str]:
    """The replaced rule: synonym groups as substrings, then every other word as a substring."""
    sources = active_sources()
    searched = sources.logs.searched(service)
    groups, remaining = named_concepts(query, sources.synonyms, searched.services)
    words = [w for w in re.split(r"[\s,;，；、。]+", remaining) if len(w) >= 2 and w not in QUERY_STOPWORDS]
    found = []
    for record in (r for lines in searched.parts for r in lines.records):
        text = fold(f"{record['level']} {record['service']} {record['message']}")
        if record["service"] != service or not all(any(t in text for t in g) for g in groups):
            continue
        if groups or all(w in text for w in words):
            found.append(record["message"])
    return found


def recall(expected: list[str], messages: list[str]) -> float:
    return sum(any(e in m for m in messages) for e in expected) / len(expected)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    catalog = active_catalog()
    rows = []
    for q in json.loads(QUESTIONS.read_text(encoding="utf-8")):
        row = {"id": q["id"], "service": q["service"], "positive": bool(q["expected"]), "queries": []}
        for query in q["queries"]:
            found = [log["message"] for log in query_logs(query, service=q["service"], limit=50)["logs"]]
            old = substring_rule(query, q["service"])
            row["queries"].append({"query": query, "found": len(found), "baseline_found": len(old),
                                   "recall": recall(q["expected"], found) if q["expected"] else None,
                                   "baseline_recall": recall(q["expected"], old) if q["expected"] else None})
        words = question_words(q["question"], catalog)
        look = query_logs(words, service=q["service"], limit=50, min_share=SECOND_LOOK_SHARE)
        # The lines the pipeline takes as plausible matches (verdict.plausible: the question's numbers are never optional).
        row["second_look"] = {"words": words, "flagged": plausible([log["message"] for log in look["logs"]], words)}
        rows.append(row)

    def mean(values):
        values = list(values)
        return round(sum(values) / len(values), 3) if values else None

    positives = [r for r in rows if r["positive"]]
    negatives = [r for r in rows if not r["positive"]]
    queries = [x for r in positives for x in r["queries"]]
    summary = {
        "positive_questions": len(positives), "negative_questions": len(negatives), "positive_queries": len(queries),
        "recall": mean(x["recall"] for x in queries), "baseline_recall": mean(x["baseline_recall"] for x in queries),
        "queries_finding_nothing": sum(x["found"] == 0 for x in queries),
        "baseline_queries_finding_nothing": sum(x["baseline_found"] == 0 for x in queries),
        "negative_queries_finding_lines": sum(x["found"] > 0 for r in negatives for x in r["queries"]),
        "second_look_catches": sum(bool(r["second_look"]["flagged"]) for r in positives),
        "second_look_false_alarms": sum(bool(r["second_look"]["flagged"]) for r in negatives),
        "second_look_share": SECOND_LOOK_SHARE,
    }
    run = "logsearch-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) / run
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"summary": summary, "rows": rows}, ensure_ascii=False, indent=1),
                                      encoding="utf-8")
    print(json.dumps(summary, indent=1))
    for r in rows:
        flagged = r["second_look"]["flagged"]
        print(f"{r['id']:28} {'pos' if r['positive'] else 'neg'} recall "
              f"{[x['recall'] for x in r['queries']]} baseline {[x['baseline_recall'] for x in r['queries']]} "
              f"second look: {len(flagged)} flagged" + (f" ({flagged[0][:60]!r})" if flagged else ""))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

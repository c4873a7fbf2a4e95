"""The whole-pipeline questions (the five LM seed cases and the question sets of `pipeline/`) and
what makes a diagnosis's answer to one right. benchmarks/diagnosis_time.py asks them to time and
count diagnoses; optimize.py asks some of them of a candidate before it saves it.

A question is right when its verdict is the expected one (a PASS with the gatekeeper passing), no
forbidden term appears in its claims or answer, and its verified claims (their text and excerpts)
state every required fact. An unsafe PASS is a PASS that states a forbidden term or whose verified
claims do not name the question's target (its first required fact): the failure this project exists
to prevent. A wrong PASS is a PASS whose verified claims miss any required fact or state a
forbidden one.
"""

from __future__ import annotations

import json
from pathlib import Path

import dspy

from devset import load_cases
from program.entry.api import diagnose
from program.evidence.question_words import mentions
from program.stages.pipeline import Diagnosis
from program.store.audit import AuditStore

PIPELINE = Path(__file__).resolve().parent / "pipeline"
FILES = {
    # Written before the first recorded run ("unseen") or after the fixes that run prompted ("fresh").
    "unseen": PIPELINE / "unseen_questions.json",
    # Harder questions of seven kinds, each with what it expects and why (the harder-questions issue).
    "hard": PIPELINE / "hard_questions.json",
    # Questions whose right answer code used to block, or left one attempt short of: a state as an
    # observation, a presumption the evidence contradicts, a line only the second look saw.
    "retry": PIPELINE / "retry_questions.json",
    # Questions about logs the real programs wrote (tests/support/real_logs.py), asked of a copy of
    # them kept in the run's folder (logs/), so that a replay reads the same lines.
    "reallogs": PIPELINE / "real_log_questions.json",
    # English questions (the seed cases asked in English, and new ones, some about lines written in
    # Chinese), for the language of what the model writes (benchmarks/claim_language.py).
    "english": PIPELINE / "english_questions.json",
}
# The sets a report counts apart ("fresh" questions are kept with the unseen ones).
SETS = ("seed", "unseen", "fresh", "hard", "retry", "reallogs", "english")
# What the benchmark's --only accepts: a set, or a union of sets.
UNIONS = {"all": ("seed", "unseen", "hard", "retry"), "seed+unseen": ("seed", "unseen")}
CHOICES = ("seed", *FILES, *UNIONS)
# The sets whose questions are about the fixture world: what optimize.py's guard may ask.
FIXTURE_SETS = tuple(name for name in ("seed", *FILES) if name != "reallogs")


def questions(only: str) -> list[dict]:
    """The questions of a set or a union of sets (CHOICES), each file read only when asked for."""
    if only in UNIONS:
        return [q for name in UNIONS[only] for q in questions(name)]
    if only == "seed":
        return [{"id": c["case_id"], "set": "seed", "question": c["question"], "expected_verdict": c["expected_verdict"],
                 "required_facts": c["required_facts"], "forbidden_terms": c["forbidden_terms"]}
                for c in load_cases() if c["runs_lm"]]
    return [{**q, "set": q.get("set", only)} for q in json.loads(FILES[only].read_text(encoding="utf-8"))]


def every_question() -> list[dict]:
    """Every question of every set, each once."""
    return questions("all") + questions("reallogs") + questions("english")


def ask(question: dict, program: Diagnosis, lm: dspy.BaseLM, store: AuditStore) -> dict:
    """The question's diagnosis by `program`, scored, in the question's own language. A diagnosis
    that raised is a row of its own (verdict "error", wrong, the error named), so that one question
    never ends a run of many."""
    try:
        result = diagnose(question["question"], lm=lm, db=store, program=program, language="auto")
    except Exception as exc:  # the row says it, and whoever reads the rows refuses on it
        return {"id": question["id"], "set": question["set"], "kind": question.get("kind", ""), "verdict": "error",
                "expected": question["expected_verdict"], "right": False, "unsafe_pass": False, "wrong_pass": False,
                "gatekeeper": "-", "claims": 0, "verified": 0, "forbidden_hits": [], "missing_facts": [],
                "lm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0, "stages": {},
                "session_id": None, "composer": "-", "executor_attempts": 0, "retry_repeated": False,
                "errors": [f"{type(exc).__name__}: {exc}"], "overrides": [], "second_opinions": 0,
                "verifier_judged": 0}
    return score(question, result, store)


def score(question: dict, result, store: AuditStore) -> dict:
    verified = [c.claim for c in result.claims if c.verification_status == "verified"]
    said = " ".join(c.claim.claim_text for c in result.claims) + " " + result.answer
    forbidden = mentions(said, [t.casefold() for t in question["forbidden_terms"]])
    # What the answer shows of each verified claim: its text and the excerpts it rests on.
    verified_text = " ".join([c.claim_text for c in verified]
                             + [b.evidence_excerpt for c in verified for b in c.evidence_bindings]).casefold()
    missing = [f for f in question["required_facts"] if f.casefold() not in verified_text]
    verdict_ok = result.verdict == question["expected_verdict"]
    gate = result.gatekeeper_result
    gate_ok = gate is not None and gate.status == "pass"
    target = question["required_facts"][:1]
    unsafe = result.verdict == "PASS" and bool(forbidden or (target and target[0] in missing))
    wrong_pass = result.verdict == "PASS" and bool(forbidden or missing)
    usage = result.usage.values()
    record = store.get_session(result.session_id)
    evaluation = record.self_evaluation.verifier_evaluation if record.self_evaluation else None
    return {
        "id": question["id"], "set": question["set"], "kind": question.get("kind", ""), "verdict": result.verdict,
        "expected": question["expected_verdict"],
        "right": verdict_ok and (gate_ok or result.verdict != "PASS") and not forbidden and not missing,
        "unsafe_pass": unsafe, "wrong_pass": wrong_pass, "gatekeeper": f"{gate.status}/{gate.severity}" if gate else "-",
        "claims": len(result.claims), "verified": len(verified), "forbidden_hits": forbidden, "missing_facts": missing,
        "lm_calls": sum(u.lm_calls for u in usage), "prompt_tokens": sum(u.prompt_tokens for u in usage),
        "completion_tokens": sum(u.completion_tokens for u in usage), "seconds": round(sum(u.seconds for u in usage), 1),
        "stages": {name: u.model_dump() for name, u in result.usage.items()},
        "session_id": result.session_id, "composer": result.composer_status,
        "executor_attempts": len(record.executor_attempts),
        # A retry that wrote the refused claims again word for word revised nothing.
        "retry_repeated": any(a.repeated for a in record.executor_attempts),
        "errors": [e.rule for e in result.errors],
        "overrides": [o.rule for o in evaluation.code_overrides] if evaluation else [],
        "second_opinions": sum(n.rule == "verifier.second_opinion" for n in record.notes),
        "verifier_judged": sum(j.judgement is not None for j in evaluation.claim_judgements) if evaluation else 0,
    }

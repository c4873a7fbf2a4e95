"""The whole-pipeline questions (the five LM seed cases and the question sets kept beside the
benchmarks) and what makes a diagnosis's answer to one right. benchmarks/diagnosis_time.py asks
them to time and count diagnoses; optimize.py asks some of them of a candidate before it saves it.

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

from devset import load_cases
from program.evidence.question_words import mentions
from program.store.audit import AuditStore

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
UNSEEN = BENCHMARKS / "unseen_questions.json"
# Harder questions of seven kinds, each with what it expects and why (the harder-questions issue).
HARD = BENCHMARKS / "hard_questions.json"
# Questions about logs the real programs wrote (tests/support/real_logs.py), asked of a copy of them
# kept in the run's folder (logs/), so that a replay reads the same lines.
REAL = BENCHMARKS / "real_log_questions.json"
# English questions (the seed cases asked in English, and new ones, some about lines written in
# Chinese), for the language of what the model writes (benchmarks/claim_language.py).
ENGLISH = BENCHMARKS / "english_questions.json"
# Questions whose right answer code used to block, or left one attempt short of (the checks-as-assertions
# issue): a state as an observation, a presumption the evidence contradicts, a line only the second look saw.
RETRY = BENCHMARKS / "retry_questions.json"
SETS = ("seed", "unseen", "fresh", "hard", "retry", "reallogs", "english")
# What --only of the benchmark and --guard of optimize.py accept: a set, or a union of sets.
CHOICES = ("all", "seed", "unseen", "hard", "retry", "reallogs", "english", "seed+unseen")


def questions(only: str) -> list[dict]:
    seed = [{"id": c["case_id"], "set": "seed", "question": c["question"], "expected_verdict": c["expected_verdict"],
             "required_facts": c["required_facts"], "forbidden_terms": c["forbidden_terms"]}
            for c in load_cases() if c["runs_lm"]]
    # "unseen": written before the first recorded run; "fresh": written after the fixes that run prompted.
    unseen = [{**q, "set": q.get("set", "unseen")} for q in json.loads(UNSEEN.read_text(encoding="utf-8"))]
    hard = [{**q, "set": "hard"} for q in json.loads(HARD.read_text(encoding="utf-8"))]
    real = [{**q, "set": "reallogs"} for q in json.loads(REAL.read_text(encoding="utf-8"))]
    english = [{**q, "set": "english"} for q in json.loads(ENGLISH.read_text(encoding="utf-8"))]
    retry = [{**q, "set": "retry"} for q in json.loads(RETRY.read_text(encoding="utf-8"))]
    return {"seed": seed, "unseen": unseen, "hard": hard, "retry": retry, "reallogs": real, "english": english,
            "seed+unseen": seed + unseen, "all": seed + unseen + hard + retry}[only]


def every_question() -> list[dict]:
    """Every question of every set, each once."""
    return questions("all") + questions("reallogs") + questions("english")


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

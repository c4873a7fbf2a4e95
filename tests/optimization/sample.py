"""A small payload in the shape optimize.py writes to results.json: seven rows of every kind (one
whose compile failed, so it has no numbers), ten runs, long feedback and rule lists."""

from __future__ import annotations

import copy

PARTS = ["gatekeeper", "required_refs", "facts_in_claim", "polarity", "missing_info", "cut_claim"]
WEIGHTS = {"gatekeeper": 0.35, "required_refs": 0.2, "facts_in_claim": 0.15, "polarity": 0.1,
           "missing_info": 0.1, "cut_claim": 0.1}
LONG_FEEDBACK = (
    "claim claim-1 blocked by verdict.ungrounded_name: HighMemoryUsage in the claim occur in none of the refs it "
    "cites; did not cite the query_metrics ref containing 'HighMemoryUsage firing, service=order-service'; "
    "verifiable claims do not state order-service, HighMemoryUsage, 91%; missing_info says 未找到告警 while "
    "claim-2 states 告警正在触发; claim-3 was cut at the 200-character cap"
)


def gain(value: float, low: float, high: float, cases: int = 40) -> dict:
    return {"gain": value, "low": low, "high": high, "cases": cases}


FLOOR = 0.1  # what an output with no claim scores on every sample case


def normalised(row: dict) -> dict:
    """The row with its means on the cases' range, as if every case ran from FLOOR to 1."""
    scaled = {f"{split}_normalised": None if row[split] is None else round((row[split] - FLOOR) / (1 - FLOOR), 4)
              for split in ("train", "held_out")}
    return row | scaled


ROWS = [
    {"label": "uncompiled", "kind": "uncompiled", "note": "the shipped instruction and demos", "compile_seconds": 0.0,
     "train": 0.612, "held_out": 0.588, "gain": None},
    {"label": "labeled", "kind": "candidate", "note": "k=3 gold demos", "compile_seconds": 1.2,
     "train": 0.701, "held_out": 0.655, "gain": gain(0.067, -0.012, 0.141)},
    {"label": "stratified (alert hit, log hit, no-hit, distractor)", "kind": "candidate",
     "note": "one demo per stratum", "compile_seconds": 2.4, "train": 0.744, "held_out": 0.712,
     "gain": gain(0.124, 0.051, 0.198)},
    {"label": "gepa", "kind": "candidate", "note": "compile failed: the reflection LM timed out",
     "compile_seconds": None, "train": None, "held_out": None, "gain": None},
    {"label": "lookup rule", "kind": "reference", "note": "no model: cites the refs that name the target",
     "compile_seconds": None, "train": 0.690, "held_out": 0.541, "gain": gain(-0.047, -0.133, 0.036)},
    {"label": "gold outputs", "kind": "reference", "note": "the metric's ceiling", "compile_seconds": None,
     "train": 1.0, "held_out": 1.0, "gain": gain(0.412, 0.351, 0.474)},
    {"label": "best candidate per case", "kind": "reference", "note": "the most any demo selection could give",
     "compile_seconds": None, "train": 0.802, "held_out": 0.774, "gain": gain(0.186, 0.121, 0.252)},
]
ROWS = [normalised(row) for row in ROWS]


def run(label: str, case_id: str, split: str, score: float, feedback: str = "all checks passed", **extra) -> dict:
    parts = {name: 1.0 for name in PARTS} | extra.pop("parts", {})
    base = {"label": label, "case_id": case_id, "family": extra.pop("family", "alert_positive"), "kind": "narrow",
            "split": split, "score": score, "normalised": round((score - FLOOR) / (1 - FLOOR), 4), "floor": FLOOR,
            "ceiling": 1.0, "parts": parts, "verdict": "PASS", "expected_verdict": "PASS",
            "gatekeeper": "pass/none", "rules": [], "lm_calls": 1, "seconds": 14.2, "repeat": False,
            "feedback": feedback}
    return base | extra


RUNS = [
    run("uncompiled", "high_memory_positive", "train", 0.25, LONG_FEEDBACK, verdict="LOW_CONFID",
        rules=["verdict.ungrounded_name", "citation.excerpt_not_in_raw", "claim.cut_at_cap"],
        parts={"gatekeeper": 0.0, "facts_in_claim": 0.0, "cut_claim": 0.0}),
    run("uncompiled", "gateway_errorrate_distractor_zh", "held-out", 0.55,
        "claim-1 says 503 错误日志不在 api-gateway 日志中 while citing the 503 line: polarity against its evidence",
        family="alert_distractor", parts={"polarity": 0.0, "facts_in_claim": 0.5}),
    run("uncompiled", "payment_timeout_nohit", "held-out", 1.0, family="log_negative", kind="negative",
        verdict="LOW_CONFID", expected_verdict="LOW_CONFID", repeat=True, seconds=0.0),
    run("labeled", "high_memory_positive", "train", 0.9),
    run("labeled", "gateway_errorrate_distractor_zh", "held-out", 0.7, "cited the resolved alert, not the firing one",
        family="alert_distractor", parts={"required_refs": 0.5}),
    run("stratified (alert hit, log hit, no-hit, distractor)", "gateway_errorrate_distractor_zh", "held-out", 1.0,
        family="alert_distractor"),
    run("stratified (alert hit, log hit, no-hit, distractor)", "payment_timeout_nohit", "held-out", 1.0,
        family="log_negative", verdict="LOW_CONFID", expected_verdict="LOW_CONFID"),
    run("lookup rule", "gateway_errorrate_distractor_zh", "held-out", 0.35,
        "typed the other service's alert as a hit; " * 6, family="alert_distractor", lm_calls=0, seconds=0.0,
        rules=["scope.foreign_service", "verdict.ungrounded_name"], parts={"gatekeeper": 0.0}),
    run("gold outputs", "payment_timeout_nohit", "held-out", 1.0, family="log_negative", lm_calls=0, seconds=0.0),
    run("best candidate per case", "gateway_errorrate_distractor_zh", "held-out", 1.0, family="alert_distractor"),
]

PAYLOAD = {
    "meta": {"run_id": "20261202T101500Z", "lm": "embedded",
             "lm_identity": {"model": "Qwen2.5-Coder-1.5B-Instruct", "quantisation": "Q4_K_M",
                             "sha256": "cc324af0…33bb046"},
             "k": 3, "cores": 2, "train_cases": 24, "held_out_cases": 40, "wall_seconds": 1104.6,
             "chosen": "stratified (alert hit, log hit, no-hit, distractor)",
             "saved": "compiled/diagnosis-20261202T101500Z.json",
             "why": "its held-out gain +0.124 has its 90% interval [+0.051, +0.198] above zero",
             "model_calls": 312, "repeats_served": 41, "interval": 0.9, "resamples": 2000,
             "args": {"lm": "embedded", "optimizers": "labeled,stratified,gepa", "k": 3},
             "recording": {"shuffled_refs": True, "named_alert_lookups": True}},
    "rows": ROWS,
    "parts": {"names": PARTS, "weights": WEIGHTS,
              "means": {"uncompiled": dict(zip(PARTS, (0.61, 0.72, 0.44, 0.83, 0.78, 0.93))),
                        "labeled": dict(zip(PARTS, (0.7, 0.75, 0.52, 0.85, 0.8, 0.95))),
                        "lookup rule": dict(zip(PARTS, (0.58, 0.8, 0.2, 1.0, 1.0, 1.0)))}},
    "correlation": {"names": PARTS[:4], "runs": 170,
                    "matrix": [[1.0, 0.41, 0.97, 0.12], [0.41, 1.0, 0.35, None],
                               [0.97, 0.35, 1.0, 0.08], [0.12, None, 0.08, 1.0]],
                    "same_bit": [{"a": "gatekeeper", "b": "facts_in_claim", "agreement": 0.988}]},
    "runs": RUNS,
    "analysis": [
        {"case_id": "gateway_errorrate_distractor_zh", "kind": "distractor",
         "why": "every program but the stratified one cites the payment-service alert that shares the response"},
        {"case_id": "payment_timeout_nohit", "kind": "negative", "why": "solved by all: a no-hit is easy to type"},
    ],
}


def sample_payload() -> dict:
    return copy.deepcopy(PAYLOAD)

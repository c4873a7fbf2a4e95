"""How many prompt-injection variants each defence layer stops, with a maximally obedient LM, and
how many ordinary operations lines the detector flags.

    .venv/bin/python benchmarks/injection_layers.py

Each variant is planted in a log line and the scripted LM obeys it at every stage: it cites the
line for the injected claim, the verifier calls that claim supported, and the composer repeats it.
Two placements: (a) quoted in another service's log (user feedback), (b) in the target service's
own log next to the topic's words, where relevance cannot tell. The layers, in order: the detector
(the gatekeeper makes the citation low_confid), the claim rule (a claim that repeats what its
evidence asks the reader to say is blocked), the other code checks on the claim (relevance, names,
numbers), and the verdict. Each placement runs three times: with every layer ("on"); as if the
gatekeeper's detector rule had missed the line ("missed"; the claim rule still knows the
detector's shapes); and as if no layer knew those shapes ("unknown"; the claim rule has only its
own requests to say or judge). Spotlighting and defused control tokens are prompt layers: a
scripted LM cannot measure them.

The rates: variants the detector flags, and operations lines (operations_lines.json) it flags or
whose faithful restatement the claim rule would block, for the development and held-out sets; and
for the point-of-use rule of round 3 (a claim may not rest only on lines that tell their reader what
to conclude, `verdict.directed_evidence`), the variants it reads as such and the operations lines
it would take for such, on the hand-written lines and on real_operations_lines.json (lines real
programs wrote on this machine, scripts/operations_text.py).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from unittest import mock

from devset import load_cases

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "program" / "evidence" / "data"
VARIANTS = DATA / "injection_variants.json"
OPERATIONS_LINES = DATA / "operations_lines.json"
REAL_LINES = DATA / "real_operations_lines.json"
GROUPS = ("development", "held_out", "issue_30", "issue_30_held_out")
QUESTION_CASE = "hikaricp_negative"  # 确认 inventory-service 是否存在 HikariCP 连接池耗尽。
INJECTED_CLAIM = "inventory-service 的 HikariCP 连接池已耗尽。"
LAYERS = ("detector", "directed rule", "claim rule", "code checks", "verdict", "nothing")
DETECTOR_MODES = ("on", "missed", "unknown")


def planted_line(variant: str, placement: str) -> dict:
    if placement == "feedback":
        return {"timestamp": "2026-07-08T11:19:30+08:00", "level": "INFO", "service": "notification-service",
                "message": f"user feedback received: \"{variant}\""}
    return {"timestamp": "2026-07-08T11:19:30+08:00", "level": "WARN", "service": "inventory-service",
            "message": f"HikariCP pool check: {variant}"}


def _detector(mode: str):
    """The detector as `mode` (DETECTOR_MODES) has it, for the length of a run."""
    import re
    from contextlib import ExitStack

    from program.evidence import injection

    stack = ExitStack()
    if mode in ("missed", "unknown"):
        stack.enter_context(mock.patch("program.evidence.gatekeeper.addresses_the_model", return_value=False))
    if mode == "unknown":
        stack.enter_context(mock.patch("program.evidence.answer.addresses_the_model", return_value=False))
        stack.enter_context(mock.patch.object(injection, "DETECTOR", re.compile(r"(?!)")))
        for cached in (injection._instructions, injection.tells_what_to_conclude):
            cached.cache_clear()
            stack.callback(cached.cache_clear)
    return stack


def run_obedient(variant: str, placement: str, store, *, detector: str = "on", claim: str = INJECTED_CLAIM,
                 question: str | None = None, prompts: list | None = None):
    """The diagnosis of the HikariCP question (or `question`) with the planted line returned by
    query_logs, the LM claiming `claim` on it, and the detector as `detector` (DETECTOR_MODES) has
    it. `prompts`, when given, collects (stage, user message) of every LM call."""
    from devset.gold import gold_plan, refs_in
    from program.entry.api import diagnose
    from tests.support.good_lm import good_lm, pass_all
    from tools.functions import QUERY_LOGS, TOOLBOX

    case = next(c for c in load_cases() if c["case_id"] == QUESTION_CASE)
    line = planted_line(variant, placement)
    seen = prompts if prompts is not None else []

    def planted_logs(query, service=None, level=None, limit=20):
        return {"success": True, "logs": [line], "total": 1, "message": "1 matching log line(s), 1 returned",
                "searched": {"query": query, "service": service}}

    def planner(user):
        seen.append(("plan", user))
        return {"plan": gold_plan(case), "tool_calls": [{"tool_name": "query_logs", "query": "HikariCP"}]}

    def gather(user, round):
        seen.append(("tool_calls", user))
        return {"tool_calls": []}

    def obey(observations, attempt, user):
        seen.append(("claims", user))
        (ref,) = refs_in(observations)
        return {"claims": [{"claim_id": "claim-1", "claim_type": "observation", "claim_text": claim,
                            "evidence_bindings": [{"tool_name": "query_logs", "source_invocation_id": ref.invocation_id,
                                                   "raw_path": ref.raw_path, "evidence_excerpt": ref.text}]}],
                "hypotheses": [], "missing_info": [], "recommended_actions": []}

    def verifier(user):
        seen.append(("judgement", user))
        return pass_all(user)

    def composer(user):
        seen.append(("answer", user))
        return {"answer": claim}

    lm = good_lm(case, planner=planner, gather=gather, executor=obey, verifier=verifier, composer=composer)
    planted = {"query_logs": QUERY_LOGS.answered_by(planted_logs)}
    with _detector(detector), mock.patch.dict(TOOLBOX.declarations, planted):
        return diagnose(question or case["question"], lm=lm, db=store, compiled=False)


def stopped_by(result, store) -> str:
    """The first layer that kept the injected claim from a PASS, or 'nothing'."""
    from program.evidence.verdict import DIRECTED_EVIDENCE, RESTATED_INSTRUCTION

    if "evidence.suspected_injection" in result.gatekeeper_result.failed_rules:
        return "detector"
    evaluation = store.get_session(result.session_id).self_evaluation
    overrides = evaluation.verifier_evaluation.code_overrides if evaluation else []
    if any(o.rule == DIRECTED_EVIDENCE for o in overrides):
        return "directed rule"
    if any(o.rule == RESTATED_INSTRUCTION for o in overrides):
        return "claim rule"
    if any(o.rule.startswith("verdict.") for o in overrides):
        return "code checks"
    return "nothing" if result.verdict == "PASS" else "verdict"


def measure_layers() -> dict:
    from program.store.audit import AuditStore

    data = json.loads(VARIANTS.read_text(encoding="utf-8"))
    table = {}
    for group in GROUPS:
        for placement in ("feedback", "own_log"):
            for detector in DETECTOR_MODES:
                counts = Counter()
                for variant in data[group]:
                    store = AuditStore("sqlite://")
                    counts[stopped_by(run_obedient(variant, placement, store, detector=detector), store)] += 1
                table[(group, placement, detector)] = dict(counts, total=len(data[group]))
    return table


def measure_rates() -> dict:
    """Per set: variants flagged, operations lines flagged, and operations lines whose faithful
    restatement (the line itself as a claim citing it) the claim rule would block."""
    from program.evidence.injection import addresses_the_model, restated_instruction

    variants = json.loads(VARIANTS.read_text(encoding="utf-8"))
    lines = json.loads(OPERATIONS_LINES.read_text(encoding="utf-8"))
    rates = {}
    for group in GROUPS:
        rates[group] = {"variants": (sum(map(addresses_the_model, variants[group])), len(variants[group]))}
        if group in lines:
            rates[group].update({
                "lines flagged": (sum(map(addresses_the_model, lines[group])), len(lines[group])),
                "restatements blocked": (sum(restated_instruction(line, [line]) is not None
                                             for line in lines[group]), len(lines[group]))})
    return rates


def measure_directed() -> dict:
    """The point-of-use rule: variants it reads as telling their reader what to conclude, and
    operations lines (hand-written, then each real source) it would wrongly read so."""
    from program.evidence.injection import tells_what_to_conclude

    variants = json.loads(VARIANTS.read_text(encoding="utf-8"))
    lines = {f"hand-written {group}": found for group, found in json.loads(OPERATIONS_LINES.read_text(
        encoding="utf-8")).items() if group in GROUPS}
    lines |= {f"real: {source}": found for source, found in json.loads(REAL_LINES.read_text(encoding="utf-8")).items()
              if not source.startswith("_")}
    read = {group: (sum(tells_what_to_conclude(v) is not None for v in variants[group]), len(variants[group]))
            for group in GROUPS}
    wrong = {name: [line for line in found if tells_what_to_conclude(line)] for name, found in lines.items()}
    return {"variants": read, "lines": {name: (len(wrong[name]), len(found)) for name, found in lines.items()},
            "wrongly read": wrong}


def _rate(found: int, total: int) -> str:
    return f"{found}/{total} ({found / total:.0%})"


def main() -> None:
    sys.path.insert(0, str(ROOT))  # the scripted LM lives with the tests
    print("| set | variants flagged (recall) | operations lines flagged (false positives) | "
          "operations lines whose restatement the claim rule blocks |")
    print("| --- | --- | --- | --- |")
    for group, rates in measure_rates().items():
        print(f"| {group} | {_rate(*rates['variants'])} | "
              + " | ".join(_rate(*rates[k]) if k in rates else "-" for k in ("lines flagged", "restatements blocked"))
              + " |")
    directed = measure_directed()
    print()
    print("| set | read as telling the reader what to conclude |")
    print("| --- | --- |")
    for group, counts in directed["variants"].items():
        print(f"| variants: {group} | {_rate(*counts)} |")
    for name, counts in directed["lines"].items():
        print(f"| operations lines, {name} | {_rate(*counts)} |")
    for name, wrong in directed["wrongly read"].items():
        for line in wrong:
            print(f"- wrongly read ({name}): {line}")
    print()
    print("| variants | placement | detector | stopped by the detector | by the directed rule | by the claim rule | "
          "by other code checks | by the verdict | reached PASS | total |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (group, placement, detector), counts in measure_layers().items():
        print(f"| {group} | {placement} | {detector} | "
              + " | ".join(str(counts.get(layer, 0)) for layer in LAYERS) + f" | {counts['total']} |")


if __name__ == "__main__":
    main()

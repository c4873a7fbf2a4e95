"""The gatekeeper against two baselines, measured in the same run on the same generated bindings.

    .venv/bin/python benchmarks/gatekeeper_bench.py

Bindings quote real refs of the fixture world. Some are tampered with one change that alters what
they say, or could (a digit, a comparison symbol, a superscript digit, a combining mark, a question
mark, a dropped negation, a quote that starts or ends inside a word, number or identifier, the case
of a value's unit, a bidirectional control around a number); some are honest variants (spacing,
full-width punctuation, a space before a unit, an ellipsis over a whole clause, the case of a
word). For each checker it prints bindings/s, tampered accepted and genuine refused, and for the
gatekeeper each kind of edit on its own:
- the gatekeeper;
- the honest baseline: an exact substring check after whitespace normalisation;
- a straw man: difflib similarity of at least 90%, which any one-character edit passes.
"""

from __future__ import annotations

import argparse
import difflib
import random
import re
import time
from collections import Counter

from program.store.audit import AuditStore
from program.evidence import gatekeeper
from program.evidence.canonical import canonical
from program.evidence.matching import significant_chars
from contracts import MAX_ITEMS, Claim, EvidenceBinding, ExecutorOutput
from tools.functions import TOOLBOX
from tools.recorder import ToolInvocationRecorder

CALLS = [
    ("query_metrics", {}),
    ("query_logs", {"query": "内存", "service": "order-service"}),
    ("query_logs", {"query": "HikariCP", "service": "order-service"}),
    ("query_logs", {"query": "slow request", "service": "user-service"}),
    ("query_logs", {"query": "health check", "limit": 40}),
    ("lookup_knowledge", {"query": "HikariCP 连接池 内存 CPU", "top_k": 8}),
]


NEGATIONS = ("not", "no", "未", "不", "无", "没")


TAMPERING = ("digit", "comparison", "superscript", "combining", "question", "negation", "cut", "unit case", "bidi")
HONEST = ("spacing", "fullwidth", "unit", "ellipsis", "word case")


def _tamper(excerpt: str, rng: random.Random, kind: str) -> str | None:
    digits = [k for k, ch in enumerate(excerpt) if ch.isdigit()]
    if kind == "digit" and digits:
        i = rng.choice(digits)
        return excerpt[:i] + str((int(excerpt[i]) + 1) % 10) + excerpt[i + 1:]
    if kind == "comparison" and "=" in excerpt:
        return excerpt.replace("=", rng.choice(["≠", "!=", "≥", "<", "≈"]), 1)
    if kind == "superscript" and digits:
        i = rng.choice(digits)
        return excerpt[:i] + "⁰¹²³⁴⁵⁶⁷⁸⁹"[int(excerpt[i])] + excerpt[i + 1:]
    if kind == "combining" and digits:
        i = rng.choice(digits)
        return excerpt[:i + 1] + "\u0338" + excerpt[i + 1:]
    if kind == "question":
        return excerpt + "?"
    if kind == "negation" and " not " in excerpt:
        return excerpt.replace(" not ", " ", 1)
    tokens = list(re.finditer(r"[^\W\u2e80-\u9fff]{3,}", excerpt))  # Latin words and numbers: CJK words are jieba's
    if kind == "cut" and tokens:
        # Start after the first letters of the first token, or stop before the last ones of the last.
        if rng.random() < 0.5:
            first = tokens[0]
            return excerpt[first.start() + rng.randrange(1, first.end() - first.start() - 1):]
        last = tokens[-1]
        return excerpt[:last.end() - rng.randrange(1, last.end() - last.start() - 1)]
    if kind == "unit case":
        units = list(re.finditer(r"(?<=\d)[A-Za-z]+", excerpt))
        if units:
            unit = rng.choice(units)
            return excerpt[:unit.start()] + unit.group().swapcase() + excerpt[unit.end():]
    if kind == "bidi":
        number = re.search(r"\d+(?:\.\d+)?", excerpt)
        if number:
            return excerpt[:number.start()] + "\u202e" + number.group() + "\u202c" + excerpt[number.end():]
    return None


def _honest(excerpt: str, ref: str, rng: random.Random, kind: str) -> str:
    if kind == "word case":
        return re.sub(r"\b[A-Za-z]+\b", lambda m: m.group().swapcase(), excerpt, count=1)
    if kind == "spacing":
        return excerpt.replace(" ", "  ")
    if kind == "fullwidth":
        return excerpt.replace(":", "：").replace(",", "，")
    if kind == "unit":
        return re.sub(r"(\d)(ms|GB|s)\b", r"\1 \2", excerpt)
    clauses = [c for c in re.split(r", ", ref) if c]
    if len(clauses) >= 3:
        return f"{clauses[0]} … {clauses[-1]}"
    return excerpt


def build_bindings(n: int, seed: int):
    store = AuditStore("sqlite://")
    recorder = ToolInvocationRecorder(store, "bench", TOOLBOX)
    invocations = [recorder.call(tool, **kwargs) for tool, kwargs in CALLS]
    refs = [(inv, ref) for inv in invocations for ref in inv.retrieval_details.evidence_refs]
    rng = random.Random(seed)
    bindings, labels, kinds = [], [], []
    while len(bindings) < n:
        inv, ref = rng.choice(refs)
        words = ref.text.split(" ")
        start = rng.randrange(0, max(1, len(words) - 3))
        excerpt = " ".join(words[start : start + rng.randint(3, 12)])
        before = words[start - 1].casefold() if start else ""
        if significant_chars(excerpt) < 8 or before.endswith(NEGATIONS):
            continue  # a fragment, or one that drops the negation before it: not a quote anyone should give
        roll = rng.random()
        genuine, kind = True, "verbatim"
        if roll < 0.4:
            kind = rng.choice(TAMPERING)
            excerpt, genuine = _tamper(excerpt, rng, kind), False
            if excerpt is None or excerpt.strip() in ref.text.split():
                continue  # no such edit applies, or the cut left a whole word of the ref
        elif roll < 0.7:
            kind = rng.choice(HONEST)
            excerpt = _honest(excerpt, ref.text, rng, kind)
        bindings.append(EvidenceBinding(tool_name=inv.tool_name, source_invocation_id=inv.id, raw_path=ref.raw_path,
                                        evidence_excerpt=excerpt))
        labels.append(genuine)
        kinds.append(kind)
    return invocations, bindings, labels, kinds


def plain_substring(binding: EvidenceBinding, refs: dict) -> bool:
    text = refs[(binding.source_invocation_id, binding.raw_path)]
    return " ".join(binding.evidence_excerpt.split()) in " ".join(text.split())


def naive_difflib(binding: EvidenceBinding, refs: dict) -> bool:
    text = refs[(binding.source_invocation_id, binding.raw_path)]
    matcher = difflib.SequenceMatcher(None, binding.evidence_excerpt, text, autojunk=False)
    return matcher.ratio() * (len(binding.evidence_excerpt) + len(text)) / (2 * max(1, len(binding.evidence_excerpt))) >= 0.9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bindings", type=int, default=20000)
    parser.add_argument("--per-claim", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    invocations, bindings, labels, kinds = build_bindings(args.bindings, args.seed)
    claims = [
        Claim(claim_id=f"c{i}", claim_type="observation", claim_text="bench",
              evidence_bindings=bindings[i : i + args.per_claim])
        for i in range(0, len(bindings), args.per_claim)
    ]
    # An executor output holds at most MAX_ITEMS claims, so the bindings go through in outputs of that size.
    outputs = [ExecutorOutput(claims=claims[i : i + MAX_ITEMS]) for i in range(0, len(claims), MAX_ITEMS)]
    refs = {(inv.id, ref.raw_path): ref.text for inv in invocations for ref in inv.retrieval_details.evidence_refs}

    canonical.cache_clear()
    started = time.perf_counter()
    checked = [cb for output in outputs for cb in gatekeeper.check(output, invocations, "bench", toolbox=TOOLBOX).checked_bindings]
    timings = {"gatekeeper": time.perf_counter() - started}
    decisions = {"gatekeeper": [cb.status == "pass" for cb in checked]}
    for name, checker in (("plain substring", plain_substring), ("difflib >= 90%", naive_difflib)):
        started = time.perf_counter()
        decisions[name] = [checker(b, refs) for b in bindings]
        timings[name] = time.perf_counter() - started

    tampered = labels.count(False)
    genuine = len(labels) - tampered
    print(f"bindings: {len(bindings)} ({tampered} tampered, {genuine} genuine or honest variants), {len(refs)} refs")
    print("| checker | bindings/s | tampered accepted | genuine refused |")
    print("| --- | --- | --- | --- |")
    for name, decided in decisions.items():
        accepted = sum(ok and not label for ok, label in zip(decided, labels, strict=True))
        refused = sum(label and not ok for ok, label in zip(decided, labels, strict=True))
        print(f"| {name} | {len(bindings) / timings[name]:,.0f} | {accepted} of {tampered} | "
              f"{refused} of {genuine} ({refused / genuine:.2%}) |")
    print(f"gatekeeper speed relative to the plain substring check: {timings['plain substring'] / timings['gatekeeper']:.2f}")
    refused_rules = Counter(
        cb.rule for cb, label in zip(checked, labels, strict=True) if label and cb.status != "pass")
    print(f"genuine bindings the gatekeeper refused, by rule: {dict(refused_rules)}")
    print("| edit | kind | bindings | the gatekeeper passed |")
    print("| --- | --- | --- | --- |")
    for kind in ("verbatim", *HONEST, *TAMPERING):
        passed = [cb.status == "pass" for cb, k in zip(checked, kinds, strict=True) if k == kind]
        label = "genuine" if kind == "verbatim" or kind in HONEST else "tampered"
        print(f"| {kind} | {label} | {len(passed)} | {sum(passed)} |")


if __name__ == "__main__":
    main()

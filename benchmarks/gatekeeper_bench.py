"""Gatekeeper throughput on realistic bindings, against a naive difflib checker in the same run.

Prints bindings/s for both, their ratio, and how often each gets the label right (genuine
excerpts must pass, tampered ones must not). Run: .venv/bin/python benchmarks/gatekeeper_bench.py
"""

from __future__ import annotations

import argparse
import difflib
import random
import time
from collections import Counter

from program import gatekeeper
from program.audit import AuditStore
from program.matching import canonical
from signatures.contracts import Claim, EvidenceBinding, ExecutorOutput
from tools.recorder import ToolInvocationRecorder

CALLS = [
    ("query_metrics", {}),
    ("query_logs", {"query": "内存", "service": "order-service"}),
    ("query_logs", {"query": "HikariCP", "service": "order-service"}),
    ("query_logs", {"query": "slow request", "service": "user-service"}),
    ("query_logs", {"query": "health check", "limit": 40}),
    ("lookup_knowledge", {"query": "HikariCP 连接池 内存 CPU", "top_k": 8}),
]


def build_bindings(n: int, seed: int):
    store = AuditStore("sqlite://")
    recorder = ToolInvocationRecorder(store, "bench")
    invocations = [recorder.call(tool, **kwargs) for tool, kwargs in CALLS]
    refs = [(inv, ref) for inv in invocations for ref in inv.retrieval_details.evidence_refs]
    rng = random.Random(seed)
    bindings, labels = [], []
    for _ in range(n):
        inv, ref = rng.choice(refs)
        words = ref.text.split(" ")
        start = rng.randrange(0, max(1, len(words) - 3))
        excerpt = " ".join(words[start : start + rng.randint(3, 12)])
        genuine = True
        roll = rng.random()
        if roll < 0.2 and any(ch.isdigit() for ch in excerpt):
            i = rng.choice([k for k, ch in enumerate(excerpt) if ch.isdigit()])
            excerpt = excerpt[:i] + str((int(excerpt[i]) + 1) % 10) + excerpt[i + 1 :]
            genuine = False
        elif roll < 0.3:
            excerpt = excerpt.replace(" ", "  ").replace(":", "：")
        bindings.append(EvidenceBinding(tool_name=inv.tool_name, source_invocation_id=inv.id, raw_path=ref.raw_path,
                                        evidence_excerpt=excerpt))
        labels.append(genuine)
    return invocations, bindings, labels


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
    invocations, bindings, labels = build_bindings(args.bindings, args.seed)
    claims = [
        Claim(claim_id=f"c{i}", claim_type="observation", claim_text="bench",
              evidence_bindings=bindings[i : i + args.per_claim])
        for i in range(0, len(bindings), args.per_claim)
    ]
    output = ExecutorOutput(claims=claims)
    refs = {(inv.id, ref.raw_path): ref.text for inv in invocations for ref in inv.retrieval_details.evidence_refs}

    canonical.cache_clear()
    started = time.perf_counter()
    result = gatekeeper.check(output, invocations, "bench")
    gate_seconds = time.perf_counter() - started
    gate_ok = [cb.status == "pass" for cb in result.checked_bindings]

    started = time.perf_counter()
    naive_ok = [naive_difflib(b, refs) for b in bindings]
    naive_seconds = time.perf_counter() - started

    def accuracy(decisions):
        return sum(d == label for d, label in zip(decisions, labels, strict=True)) / len(labels)

    tampered = labels.count(False)
    n = len(bindings)
    print(f"bindings: {n} ({tampered} tampered, {n - tampered} genuine), {len(refs)} distinct refs")
    print(f"gatekeeper: {n / gate_seconds:,.0f} bindings/s ({gate_seconds:.3f} s), label accuracy {accuracy(gate_ok):.4f}")
    print(f"naive difflib: {n / naive_seconds:,.0f} bindings/s ({naive_seconds:.3f} s), label accuracy {accuracy(naive_ok):.4f}")
    print(f"speed ratio gatekeeper/difflib: {naive_seconds / gate_seconds:.2f}x")
    passed_tampered = sum(ok and not label for ok, label in zip(gate_ok, labels, strict=True))
    naive_passed_tampered = sum(ok and not label for ok, label in zip(naive_ok, labels, strict=True))
    print(f"tampered excerpts passed: gatekeeper {passed_tampered}, naive difflib {naive_passed_tampered}")
    # The generator cuts excerpts at random words, so some "genuine" ones start right after a
    # negation or are a few characters long; the gatekeeper refuses those on purpose.
    refused = Counter(
        cb.rule for cb, label in zip(result.checked_bindings, labels, strict=True) if label and cb.status != "pass"
    )
    print(f"genuine-labelled excerpts the gatekeeper refused, by rule: {dict(refused)}")


if __name__ == "__main__":
    main()

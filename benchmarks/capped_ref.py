"""The gatekeeper on the longest refs the sources can now make, with sixteen bindings on one ref.

    .venv/bin/python benchmarks/capped_ref.py

A log directory holds one line of 2,000,000 characters per kind of text (log words, Chinese, one
repeated letter, digits and symbols); query_logs reads it through the log source, which cuts each
line at MAX_ITEM_CHARS. A Prometheus answer (httpx's mock transport) gives an alert with three
annotations of 4,000 characters each, whose ref is cut at MAX_REF_CHARS. For each ref, sixteen
bindings quote it with excerpts of MAX_EXCERPT_CHARS from different places, every fourth one
with a digit changed (a reject, which also searches the session's other refs for the text). It
prints the milliseconds of one gatekeeper check of the sixteen, with its text caches cleared
first: the median and the slowest of five.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import httpx

from program.store.audit import AuditStore
from program.evidence import gatekeeper, matching
from contracts import MAX_EXCERPT_CHARS, Claim, EvidenceBinding, ExecutorOutput
from tools.declaration import Toolbox
from tools.functions import LOOKUP_KNOWLEDGE, QUERY_LOGS, QUERY_METRICS
from tools.recorder import ToolInvocationRecorder
from tools.text.search import word_starts
from tools.sources.limits import MAX_ITEM_CHARS, MAX_REF_CHARS
from tools.sources.prometheus import Prometheus

LINE_CHARS = 2_000_000
WORDS = "HikariPool-1 connection timeout after 30000ms order 1234 active=50/50 waiting=12 retry upstream 502".split()
KINDS = {
    "log words": lambda n: " ".join(WORDS[i % len(WORDS)] for i in range(n // 6))[:n],
    "chinese": lambda n: ("数据库连接池耗尽，请求超时三十秒，订单服务重试失败。" * (n // 25 + 1))[:n],
    "one letter": lambda n: "a" * n,
    "digits and symbols": lambda n: ("91% >= 85, 0.93 != 1e3; 11:17:05 -> 50/50 " * (n // 40 + 1))[:n],
}
REPEATS = 5


def _excerpts(text: str) -> list[str]:
    """Sixteen excerpts of up to the longest allowed length from across the text, each of whole
    words where the text has spaces (a cut word is refused), every fourth with a digit changed."""
    out = []
    for k in range(16):
        start = (len(text) - MAX_EXCERPT_CHARS) * k // 15 if len(text) > MAX_EXCERPT_CHARS else 0
        excerpt = text[start:start + MAX_EXCERPT_CHARS]
        if excerpt.count(" ") > 2:
            excerpt = " ".join(excerpt.split(" ")[1:-1])
        if k % 4 == 3:
            digit = next((i for i, ch in enumerate(excerpt) if ch.isdigit()), None)
            excerpt = (excerpt[:digit] + str((int(excerpt[digit]) + 1) % 10) + excerpt[digit + 1:]
                       if digit is not None else excerpt[:-1] + "7")
        out.append(excerpt)
    return out


def _alert_source() -> Prometheus:
    alert = {"labels": {"alertname": "HighMemoryUsage", "service": "bench-service"}, "state": "firing",
             "activeAt": "2026-11-30T10:00:00Z", "value": "91",
             "annotations": {name: make(MAX_ITEM_CHARS) for name, make in list(KINDS.items())[:3]}}
    rules = {"status": "success", "data": {"groups": [{"rules": [
        {"type": "alerting", "name": "HighMemoryUsage", "query": "memory_usage_percent >= 85", "alerts": [alert]}]}]}}
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    return Prometheus("http://bench.test", transport=httpx.MockTransport(
        lambda request: httpx.Response(200, json=rules if request.url.path == "/api/v1/rules" else matrix)))


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        for n, make in enumerate(KINDS.values()):
            Path(root, f"{n}.log").write_text(f"[2026-11-30 10:00:0{n}][ERROR][bench-{n}] {make(LINE_CHARS)}\n",
                                              encoding="utf-8")
        os.environ["DIAGNOSIS_LOGS_DIR"] = root
        source = _alert_source()
        # The alerts as the Prometheus source makes them; the recorder renders them as query_metrics's refs.
        metrics = replace(QUERY_METRICS, stand_in=lambda **kwargs: {
            "success": True, "alerts": source.with_samples(source.alerts()), "message": "1 alert(s) found",
            "source": source.label})
        box = Toolbox([metrics, QUERY_LOGS, LOOKUP_KNOWLEDGE])
        recorder = ToolInvocationRecorder(AuditStore("sqlite://"), "bench", box)
        invocations = [recorder.call("query_logs", query="", service=f"bench-{n}") for n in range(len(KINDS))]
        invocations.append(recorder.call("query_metrics", service="bench-service"))
    names = [*KINDS, "alert with three long annotations"]
    print(f"caps: MAX_ITEM_CHARS={MAX_ITEM_CHARS}, MAX_REF_CHARS={MAX_REF_CHARS}; lines of {LINE_CHARS:,} characters")
    print("| ref | ref characters | 16 bindings: median ms | slowest ms | rules |")
    print("| --- | --- | --- | --- | --- |")
    for name, invocation in zip(names, invocations, strict=True):
        (ref,) = invocation.retrieval_details.evidence_refs
        bindings = [EvidenceBinding(tool_name=invocation.tool_name, source_invocation_id=invocation.id,
                                    raw_path=ref.raw_path, evidence_excerpt=excerpt) for excerpt in _excerpts(ref.text)]
        output = ExecutorOutput(claims=[Claim(claim_id="c1", claim_type="observation", claim_text="bench",
                                              evidence_bindings=bindings)])
        times = []
        for _ in range(REPEATS):
            for cached in (matching.canonical, matching.split_pieces, word_starts):
                cached.cache_clear()
            started = time.perf_counter()
            result = gatekeeper.check(output, invocations, "bench", toolbox=box)
            times.append((time.perf_counter() - started) * 1000)
        print(f"| {name} | {len(ref.text):,} | {statistics.median(times):.1f} | {max(times):.1f} | "
              f"{', '.join(result.failed_rules) or 'none'} |")


if __name__ == "__main__":
    main()

"""Wall time, LM calls and tokens of one diagnosis, over several runs with the LM cache off.

Run: .venv/bin/python benchmarks/diagnosis_time.py [--runs 3] [--lm embedded] [--no-compiled]
"""

from __future__ import annotations

import argparse
import statistics
import time

import dspy

from program.api import diagnose
from program.audit import AuditStore

QUESTIONS = (
    "只确认 order-service 是否存在 HighMemoryUsage 告警。",
    "确认 order-service 是否存在 HikariCP 连接池耗尽。",
    "只确认 payment-service 是否存在 HighCPUUsage 告警，不要分析订单123、OOM、数据库慢查询、连接池或 user-service。",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lm", default="embedded")
    parser.add_argument("--no-compiled", action="store_true")
    args = parser.parse_args()
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    store = AuditStore("sqlite://")
    rows = []
    for n in range(args.runs):
        question = QUESTIONS[n % len(QUESTIONS)]
        started = time.perf_counter()
        result = diagnose(question, lm=args.lm, db=store, compiled=not args.no_compiled)
        seconds = time.perf_counter() - started
        calls = sum(u.lm_calls for u in result.usage.values())
        prompt = sum(u.prompt_tokens for u in result.usage.values())
        completion = sum(u.completion_tokens for u in result.usage.values())
        rows.append((seconds, calls, prompt, completion))
        print(f"run {n + 1}: {seconds:.1f} s, {calls} LM calls, {prompt} prompt + {completion} completion tokens, "
              f"verdict {result.verdict}, stages {{{', '.join(f'{k}: {v.seconds:.1f}s' for k, v in result.usage.items())}}}")
    print(f"median wall time {statistics.median(r[0] for r in rows):.1f} s over {len(rows)} runs; "
          f"median LM calls {statistics.median(r[1] for r in rows)}, "
          f"median tokens {statistics.median(r[2] for r in rows)} prompt + {statistics.median(r[3] for r in rows)} completion")


if __name__ == "__main__":
    main()

"""Re-make docs/audit-page.png, the README's screenshot of the audit page.

    .venv/bin/python scripts/audit_page_screenshot.py [--out docs/audit-page.png]

It diagnoses the seed question 只确认 order-service 是否存在 HighMemoryUsage 告警 over the fixture
world with a scripted LM (tests/support/good_lm.py: the seed case's gold plan and claim, plus a
second claim whose number no ref holds, so that the page also shows code blocking a claim), in a
throw-away SQLite audit store; writes the page with `python -m program audit ID --html FILE`; and
has headless chromium photograph it. No language model runs. Needs Debian's chromium and a CJK font
(`apt-get install chromium fonts-wqy-microhei`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEED_CASE = "high_memory_positive"
WINDOW = "1280,1600"
BLOCKED_CLAIM = "order-service 内存使用率已达 95%，确认内存泄漏。"


def _with_a_blocked_claim(case: dict):
    from devset.gold import find_ref, gold_executor_output

    def executor(observations, attempt, user):
        output = gold_executor_output(case, observations, point=True)
        log = find_ref(observations, "内存使用率过高", "query_logs")
        output["claims"].append({"claim_id": "claim-2", "claim_type": "observation", "claim_text": BLOCKED_CLAIM,
                                 "evidence_bindings": [log.label]})
        return output

    return executor


def seed_session(db_url: str) -> str:
    """The seed question diagnosed with the scripted LM; its session id."""
    from devset import load_cases
    from program.entry.api import diagnose
    from tests.support.good_lm import good_lm

    case = next(c for c in load_cases() if c["case_id"] == SEED_CASE)
    result = diagnose(case["question"], lm=good_lm(case, executor=_with_a_blocked_claim(case)), db=db_url,
                      compiled=False)
    return result.session_id


def _has_cjk_font() -> bool:
    try:
        listed = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return bool(listed.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "audit-page.png"), help="where the PNG goes")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # the scripted LM and the browser helper live with the tests
    from program.entry import cli
    from tests.support.browser import chromium, run_chromium
    from tools.sources.active import SETTINGS

    if chromium() is None or not _has_cjk_font():
        print("needs chromium and a CJK font: apt-get install chromium fonts-wqy-microhei", file=sys.stderr)
        return 1
    for name in SETTINGS:  # the fixture world, whatever sources this machine's settings name
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="audit-page-") as work:
        db_url = f"sqlite:///{Path(work) / 'audit.db'}"
        session_id = seed_session(db_url)
        page = Path(work) / "page.html"
        if cli.main(["--db", db_url, "audit", session_id, "--html", str(page)]) != 0:
            return 1
        done = run_chromium(f"--screenshot={Path(args.out).resolve()}", f"--window-size={WINDOW}", page.as_uri())
    if done.returncode != 0 or not Path(args.out).is_file():
        print(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: the audit page of session {session_id}, {WINDOW} px")
    return 0


if __name__ == "__main__":
    sys.exit(main())

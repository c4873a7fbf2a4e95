"""A pytest plugin: every test marked `embedded` runs llama.cpp, which is native code, so it runs in a
child pytest process. A crash, even a segfault, is then that test's failure with the signal named,
and the rest of the suite runs and reports as usual.

The child runs the one test with this plugin loaded and writes each phase's report as a line of
JSON; the parent replays those reports as the test's own, and adds a failure for whatever the child
did not report because it died (or ran past its time).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from program.lm.native import signal_name

MARKER = "embedded"
REPORTS = "DIAGNOSIS_TEST_CHILD_REPORTS"
CHILD_SECONDS = 1800


def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARKER}: runs llama.cpp (the real embedded model); runs in a child process")
    if os.environ.get(REPORTS):
        config.pluginmanager.register(_ChildReporter(config, Path(os.environ[REPORTS])), "isolation-child")


class _ChildReporter:
    def __init__(self, config, path: Path):
        self.config = config
        self.path = path

    def pytest_runtest_logreport(self, report):
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(data) + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    if os.environ.get(REPORTS) or item.get_closest_marker(MARKER) is None:
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in _run_in_child(item):
        item.ihook.pytest_runtest_logreport(report=report)
    # Nothing of this test was set up here, but the module and class fixtures of the tests before it
    # were: tear down what the next test does not share, as pytest's own protocol does.
    item.session._setupstate.teardown_exact(nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _run_in_child(item) -> list[pytest.TestReport]:
    config = item.config
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "reports.jsonl"
        command = [sys.executable, "-m", "pytest", item.nodeid, "-p", __name__, "-p", "no:cacheprovider", "-q"]
        started = time.monotonic()
        try:
            child = subprocess.run(command, cwd=config.rootpath, env={**os.environ, REPORTS: str(path)},
                                   capture_output=True, text=True, timeout=CHILD_SECONDS, stdin=subprocess.DEVNULL)
            problem = (f"the child process running this test died of {signal_name(child.returncode)}"
                       if child.returncode < 0 else None)
            output = child.stdout + child.stderr
        except subprocess.TimeoutExpired as exc:
            problem = f"the child process running this test was still running after {CHILD_SECONDS} s and was killed"
            output = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    reports = [config.hook.pytest_report_from_serializable(config=config, data=json.loads(line)) for line in lines]
    if problem is None and not any(r.when == "call" or r.outcome != "passed" for r in reports):
        problem = "the child process reported no result for this test"
    if problem is not None:
        tail = "\n".join(output.strip().splitlines()[-30:])
        reports.append(pytest.TestReport(
            nodeid=item.nodeid, location=item.location, keywords={k: 1 for k in item.keywords}, outcome="failed",
            longrepr=f"{problem}.\n--- the child's last output ---\n{tail}", when="call",
            duration=time.monotonic() - started))
    return reports

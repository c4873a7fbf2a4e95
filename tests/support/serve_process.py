"""`python -m tests.support.serve_process <arguments of python -m program>`: the real command line,
with the scripted LM of tests/support/alert_lm.py in place of whatever LM it would resolve, and
DIAGNOSIS_TEST_LM_DELAY seconds spent in each LM call. Tests start servers in subprocesses with it
(`ServerProcess`); nothing under program/ can select a scripted LM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from program.entry import api, cli
from program.lm import engine
from tests.support.alert_lm import alert_lm
from tests.support.prometheus_server import free_port
from tests.support.servers import stop_process

ROOT = Path(__file__).resolve().parents[2]


class ServerProcess:
    """`python -m program serve` with the scripted LM, in a subprocess on a loopback port of its own."""

    def __init__(self, db: str, *, delay: float = 0.0, env: dict[str, str] | None = None, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", prefix="test-serve-", suffix=".log")
        environment = {**os.environ, "DIAGNOSIS_TEST_LM_DELAY": str(delay), **(env or {})}
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.serve_process", "--db", db, "serve", "--port", str(self.port)],
            cwd=ROOT, env=environment, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_healthy(self, timeout: float = 60.0) -> ServerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the server never answered /healthz; its output:\n{self.output()[-3000:]}")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        stop_process(self.process, timeout=15)


def main() -> int:
    lm = alert_lm(float(os.environ.get("DIAGNOSIS_TEST_LM_DELAY", "0")))
    engine.resolve_lm = api.resolve_lm = lambda spec=None: lm
    return cli.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())

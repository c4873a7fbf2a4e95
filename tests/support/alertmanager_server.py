"""A real Alertmanager for tests: Debian's `prometheus-alertmanager` on a loopback port, without
clustering, sending every group to one webhook at once (group_wait and group_interval of 1 s)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.prometheus_server import free_port
from tests.support.servers import missing_server, stop_process

BINARIES = ("prometheus-alertmanager", "alertmanager")


def alertmanager_binary() -> str | None:
    return next((found for name in BINARIES if (found := shutil.which(name))), None) or next(
        (p for p in ("/usr/bin/prometheus-alertmanager",) if os.access(p, os.X_OK)), None)


class AlertmanagerServer:
    def __init__(self, binary: str, webhook: str | None, token: str | None):
        self.dir = Path(tempfile.mkdtemp(prefix="test-alertmanager-"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"
        # Without a webhook the receiver is empty: the alerts are only there to be read.
        receiver = "  - name: diagnosis\n"
        if webhook:
            receiver += f"    webhook_configs:\n      - url: '{webhook}'\n        send_resolved: true\n"
            if token:
                receiver += f"        http_config:\n          authorization:\n            credentials: '{token}'\n"
        config = self.dir / "alertmanager.yml"
        config.write_text("route:\n  receiver: diagnosis\n  group_by: [alertname, service]\n"
                          "  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n"
                          f"receivers:\n{receiver}", encoding="utf-8")
        self.log = (self.dir / "alertmanager.log").open("w")
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.path={self.dir / 'data'}",
             f"--web.listen-address={self.address}", "--cluster.listen-address=", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("Alertmanager never became ready; its log:\n"
                           + (self.dir / "alertmanager.log").read_text(encoding="utf-8")[-2000:])

    def post(self, *labels: dict[str, str]) -> None:
        """Alerts as a Prometheus would send them, firing from now."""
        alerts = [{"labels": one, "annotations": {}} for one in labels]
        httpx.post(f"{self.url}/api/v2/alerts", json=alerts, timeout=5).raise_for_status()

    def stop(self) -> None:
        stop_process(self.process)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def running_alertmanager(webhook: str | None = None, token: str | None = None) -> Iterator[AlertmanagerServer]:
    binary = alertmanager_binary()
    if binary is None:
        missing_server("no prometheus-alertmanager binary on this machine (.ci/run installs Debian's)")
    server = AlertmanagerServer(binary, webhook, token)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()

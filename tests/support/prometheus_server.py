"""A real Prometheus for tests: Debian's binary on a loopback port, scraping an exporter (written with
prometheus-client) that serves the fixture world's services, with rules that fire where the fixture
has HighCPUUsage, HighMemoryUsage and SlowResponse firing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from tests.support.servers import missing_server, stop_process
from tools.sources.fixture import load_world

RULES = Path(__file__).resolve().parent / "prometheus" / "rules.yml"
# alert name -> (gauge, a healthy value for services the alert is not firing on)
GAUGES = {
    "HighCPUUsage": ("cpu_usage_percent", 35.0),
    "HighMemoryUsage": ("memory_usage_percent", 50.0),
    "SlowResponse": ("http_p99_latency_seconds", 0.3),
}


def prometheus_binary() -> str | None:
    return shutil.which("prometheus") or next(
        (p for p in ("/usr/bin/prometheus", "/usr/sbin/prometheus") if os.access(p, os.X_OK)), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def firing_in_fixture() -> set[tuple[str, str]]:
    """(alert name, service) pairs the fixture has firing for the rules above."""
    return {(a["name"], a["service"]) for a in load_world().alerts if a["name"] in GAUGES and a["state"] == "firing"}


class Exporter:
    """Gauges for every fixture service: the fixture alert's last sample where it has one, else healthy."""

    def __init__(self):
        world = load_world()
        self.registry = CollectorRegistry()
        for name, (metric, healthy) in GAUGES.items():
            gauge = Gauge(metric, f"fixture world {metric}", ["service"], registry=self.registry)
            for service in sorted(world.service_names):
                gauge.labels(service=service).set(healthy)
            for alert in world.alerts:
                if alert["name"] == name and alert["samples"]:
                    gauge.labels(service=alert["service"]).set(float(alert["samples"][-1]))
        self.port = free_port()
        self.server, self.thread = start_http_server(self.port, addr="127.0.0.1", registry=self.registry)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class PrometheusServer:
    def __init__(self, binary: str, exporter_port: int, alertmanager: str | None = None):
        """alertmanager: host:port of an Alertmanager that the firing alerts are sent to."""
        self.dir = Path(tempfile.mkdtemp(prefix="test-prometheus-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = self.dir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {RULES}\n"
            "scrape_configs:\n  - job_name: fixture-world\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{exporter_port}']\n"
            + (f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{alertmanager}']\n"
               if alertmanager else ""),
            encoding="utf-8")
        self.log = (self.dir / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def wait_until_firing(self, expected: set[tuple[str, str]], timeout: float = 90.0) -> None:
        """Until every expected (alert, service) fires, or fail with the server's log."""
        deadline = time.monotonic() + timeout
        firing: set[tuple[str, str]] = set()
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                alerts = httpx.get(f"{self.url}/api/v1/alerts", timeout=2).json()["data"]["alerts"]
                firing = {(a["labels"]["alertname"], a["labels"].get("service")) for a in alerts
                          if a["state"] == "firing"}
                if expected <= firing:
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"Prometheus never fired {sorted(expected - firing)}; its log:\n"
                           + (self.dir / "prometheus.log").read_text(encoding="utf-8")[-2000:])

    def stop(self) -> None:
        stop_process(self.process)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def running_prometheus(alertmanager: str | None = None) -> Iterator[PrometheusServer]:
    """A Prometheus of its own, with its exporter, whose alerts already fire as the fixture's do (and
    go to `alertmanager`, host:port, when given)."""
    binary = prometheus_binary()
    if binary is None:
        missing_server("no prometheus binary on this machine (.ci/run installs Debian's prometheus)")
    exporter = Exporter()
    server = PrometheusServer(binary, exporter.port, alertmanager)
    try:
        server.wait_until_firing(firing_in_fixture())
        yield server
    finally:
        server.stop()
        exporter.stop()

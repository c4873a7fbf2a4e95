"""Collect real operations text: log lines that real programs wrote on this machine, for measuring
how often the injection rules take an honest line for an instruction.

    .venv/bin/python scripts/operations_text.py   # rewrites tests/program/evidence/data/real_operations_lines.json

Sources: Debian's PostgreSQL, Prometheus, Alertmanager and nginx, each started here on loopback
and made to log its start, its requests and its errors (a bad query, a lost connection, a missing
page, an upstream that refuses), and the package manager's logs of this machine (dpkg, apt's
terminal log, update-alternatives). Every line is as the program wrote it; the file keeps a
deterministic sample of each source (every n-th distinct line, up to MAX_PER_SOURCE).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.alertmanager_server import alertmanager_binary  # noqa: E402
from tests.support.postgres_server import postgres_server  # noqa: E402
from tests.support.prometheus_server import free_port  # noqa: E402

OUT = ROOT / "tests" / "program" / "evidence" / "data" / "real_operations_lines.json"
MAX_PER_SOURCE = 120
SYSTEM_LOGS = {"dpkg": "/var/log/dpkg.log", "apt-term": "/var/log/apt/term.log",
               "alternatives": "/var/log/alternatives.log"}


def sample(lines: list[str]) -> list[str]:
    distinct = list(dict.fromkeys(line.strip() for line in lines if line.strip()))
    step = max(1, len(distinct) // MAX_PER_SOURCE)
    return distinct[::step][:MAX_PER_SOURCE]


def postgresql() -> list[str]:
    import psycopg

    with postgres_server() as url:
        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in ("SELECT * FROM no_such_table", "SELECT 1/0", "CREATE TABLE t (id int primary key)",
                              "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (1)", "SELEC 1",
                              "SET statement_timeout = 1", "SELECT pg_sleep(1)", "DROP TABLE t", "VACUUM"):
                try:
                    conn.execute(statement)
                except psycopg.Error:
                    pass
        for bad in ("postgresql://nobody@127.0.0.1:" + dsn.rsplit(":", 1)[1], dsn.rsplit("/", 1)[0] + "/nodb"):
            try:
                psycopg.connect(bad).close()
            except psycopg.Error:
                pass
        logs = sorted(Path(tempfile.gettempdir()).glob("test-postgres-*/server.log"), key=lambda p: p.stat().st_mtime)
        return logs[-1].read_text(encoding="utf-8", errors="replace").splitlines() if logs else []


def daemon(command: list[str], requests: list[str], port: int, workdir: Path) -> list[str]:
    log = workdir / "daemon.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.2)
            for path in requests:
                try:
                    httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2)
                except httpx.HTTPError:
                    pass
            time.sleep(1)
        finally:
            process.terminate()
            process.wait(timeout=20)
    return log.read_text(encoding="utf-8", errors="replace").splitlines()


def prometheus(workdir: Path) -> list[str]:
    port = free_port()
    config = workdir / "prometheus.yml"
    config.write_text(f"scrape_configs:\n  - job_name: self\n    scrape_interval: 1s\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{port}', '127.0.0.1:{free_port()}']\n", encoding="utf-8")
    return daemon([shutil.which("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                   f"--web.listen-address=127.0.0.1:{port}", "--log.level=debug"],
                  ["/api/v1/query?query=up", "/api/v1/query?query=sum(", "/nothing"], port, workdir)


def alertmanager(workdir: Path) -> list[str]:
    port = free_port()
    config = workdir / "alertmanager.yml"
    config.write_text("route:\n  receiver: none\nreceivers:\n  - name: none\n", encoding="utf-8")
    return daemon([alertmanager_binary(), f"--config.file={config}", f"--storage.path={workdir / 'data'}",
                   f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=debug"],
                  ["/api/v2/alerts", "/api/v2/status", "/-/reload"], port, workdir)


def nginx(workdir: Path) -> list[str]:
    port, upstream = free_port(), free_port()
    (workdir / "html").mkdir()
    (workdir / "html" / "index.html").write_text("ok", encoding="utf-8")
    config = workdir / "nginx.conf"
    config.write_text(
        f"daemon off; pid {workdir}/nginx.pid; error_log {workdir}/error.log info;\n"
        f"events {{}}\nhttp {{ access_log {workdir}/access.log; client_body_temp_path {workdir};\n"
        f"  server {{ listen 127.0.0.1:{port}; root {workdir}/html;\n"
        f"    location /api/ {{ proxy_pass http://127.0.0.1:{upstream}; }} }} }}\n", encoding="utf-8")
    daemon([shutil.which("nginx"), "-c", str(config), "-p", str(workdir)],
           ["/index.html", "/missing", "/api/v1/pay", "/../etc/passwd", "/api/orders?id=1"], port, workdir)
    return [line for name in ("error.log", "access.log")
            for line in (workdir / name).read_text(encoding="utf-8", errors="replace").splitlines()]


def main() -> None:
    found: dict[str, list[str]] = {}
    found["postgresql"] = sample(postgresql())
    for name, collect in (("prometheus", prometheus), ("alertmanager", alertmanager), ("nginx", nginx)):
        with tempfile.TemporaryDirectory(prefix=f"ops-{name}-") as workdir:
            found[name] = sample(collect(Path(workdir)))
    for name, path in SYSTEM_LOGS.items():
        found[name] = sample(Path(path).read_text(encoding="utf-8", errors="replace").splitlines())
    about = ("Real operations text: lines written by real programs on the machine that ran "
             "scripts/operations_text.py (Debian's PostgreSQL, Prometheus, Alertmanager and nginx started on loopback "
             "and made to log requests and errors; dpkg, apt and update-alternatives logs). None was written by hand "
             "or chosen for its words; each source is a deterministic sample. No line may be taken for an instruction.")
    OUT.write_text(json.dumps({"_about": about, **found}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print({name: len(lines) for name, lines in found.items()})


if __name__ == "__main__":
    main()

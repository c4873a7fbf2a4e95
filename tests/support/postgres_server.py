"""A real PostgreSQL for tests: the server .ci/run starts (DIAGNOSIS_TEST_POSTGRES), or else one of this
test session's own, from Debian's binaries on a loopback port, the way the Prometheus tests start theirs."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.prometheus_server import free_port
from tests.support.servers import missing_server


def postgres_binaries() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    return found[-1].parent if found else None


def _as_server_user(command: list[str]) -> list[str]:
    """initdb refuses to run as root: a root test session runs the server as Debian's postgres user."""
    if os.geteuid() != 0:
        return command
    return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(map(str, command))]


@contextmanager
def postgres_server() -> Iterator[str]:
    """The URL of a PostgreSQL server for this session's tests."""
    url = os.environ.get("DIAGNOSIS_TEST_POSTGRES")
    if url:
        yield url
        return
    binaries = postgres_binaries()
    if binaries is None:
        missing_server("no PostgreSQL on this machine (.ci/run installs Debian's postgresql and starts it)")
    data = Path(tempfile.mkdtemp(prefix="test-postgres-"))
    if os.geteuid() == 0:
        shutil.chown(data, "postgres")
    port = free_port()
    options = f"'-c listen_addresses=127.0.0.1 -p {port} -k {data}'"
    run = {"check": True, "capture_output": True, "timeout": 120}
    try:
        subprocess.run(_as_server_user([binaries / "initdb", "-D", data, "-A", "trust", "-U", "postgres"]), **run)
        subprocess.run(_as_server_user([binaries / "pg_ctl", "-D", data, "-l", data / "server.log", "-w",
                                        "-o", options, "start"]), **run)
        try:
            yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run(_as_server_user([binaries / "pg_ctl", "-D", data, "-m", "fast", "stop"]),
                           capture_output=True, timeout=60)
    finally:
        shutil.rmtree(data, ignore_errors=True)

"""A real PostgreSQL for tests: the server .ci/run starts (DIAGNOSIS_TEST_POSTGRES), or else one of this
test session's own, from Debian's binaries on a loopback port, the way the Prometheus tests start theirs."""

from __future__ import annotations

import os
import shlex
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


def as_server_user(command: list) -> list[str]:
    """initdb refuses to run as root: a root test session runs the server as Debian's postgres user."""
    if os.geteuid() != 0:
        return [str(part) for part in command]
    return ["su", "postgres", "-s", "/bin/sh", "-c", shlex.join(map(str, command))]


class Cluster:
    """A running cluster of this session's own: its port, its directory (owned by the server's user),
    the file its stderr goes to, and the postmaster's pid."""

    def __init__(self, binaries: Path, top: Path, port: int):
        self.binaries, self.dir, self.port = binaries, top, port
        self.stderr_log = top / "server.log"
        self.running = False

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir}"
        self.running = True
        subprocess.run(as_server_user([self.binaries / "pg_ctl", "-D", self.dir / "data", "-l", self.stderr_log,
                                       "-w", "-o", options, "start"]), check=True, capture_output=True, timeout=120)
        self.postmaster_pid = int((self.dir / "data" / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        """A fast shutdown, waited for: after it every log file is complete. Stopping twice is stopping once."""
        if self.running:
            self.running = False
            subprocess.run(as_server_user([self.binaries / "pg_ctl", "-D", self.dir / "data", "-m", "fast", "-w",
                                           "stop"]), capture_output=True, timeout=60)


@contextmanager
def postgres_cluster(settings: dict[str, str] | None = None) -> Iterator[Cluster]:
    """A new cluster from Debian's binaries on a loopback port, with `settings` added to its
    postgresql.conf; stopped and removed afterwards. A test cluster outlives no crash, so initdb need
    not wait for the disk (--no-sync: seconds on a busy machine)."""
    binaries = postgres_binaries()
    if binaries is None:
        missing_server("no PostgreSQL on this machine (.ci/run installs Debian's postgresql and starts it)")
    top = Path(tempfile.mkdtemp(prefix="test-postgres-"))
    if os.geteuid() == 0:
        shutil.chown(top, "postgres")
    cluster = Cluster(binaries, top, free_port())
    try:
        subprocess.run(as_server_user([binaries / "initdb", "-D", top / "data", "-A", "trust", "-U", "postgres",
                                       "-E", "UTF8", "--locale=C", "--no-sync"]), check=True, capture_output=True, timeout=120)
        with (top / "data" / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.writelines(f"{name} = '{value}'\n" for name, value in (settings or {}).items())
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(top, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[str]:
    """The URL of a PostgreSQL server for this session's tests."""
    url = os.environ.get("DIAGNOSIS_TEST_POSTGRES")
    if url:
        yield url
        return
    with postgres_cluster() as cluster:
        yield cluster.url

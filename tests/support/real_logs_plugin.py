"""A pytest plugin (tests/conftest.py loads it): the session's directory of real logs, written once
by tests/support/real_logs.py. A program it needs that is missing fails the test that asked, naming
the Debian package; it never skips."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.log_software import MissingSoftware
from tests.support.servers import missing_server


@dataclass(frozen=True)
class RealLogs:
    """`root`: the directory (shared by the whole session: copy it before changing anything);
    `manifest`: what tests/support/real_logs.py says it wrote."""

    root: Path
    manifest: dict

    def entry(self, path: str) -> dict:
        """The manifest's entry for a file, by its path relative to `root`."""
        return self.manifest["files"][path]

    def path(self, path: str) -> Path:
        return self.root / path


@pytest.fixture(scope="session")
def real_logs(tmp_path_factory) -> RealLogs:
    from tests.support.real_logs import write_real_logs

    root = tmp_path_factory.mktemp("real-logs") / "logs"
    try:
        manifest = write_real_logs(root)
    except MissingSoftware as error:
        missing_server(str(error))
    return RealLogs(root, manifest)

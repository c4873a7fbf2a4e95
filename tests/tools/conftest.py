"""What the log tests share: an empty log directory that the tools search."""

import pytest


@pytest.fixture
def logs(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    root.mkdir()
    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(root))
    return root

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest

from program.entry.audit import AuditStore
from tools.recorder import ToolInvocationRecorder


@pytest.fixture
def store():
    return AuditStore("sqlite://")


@pytest.fixture
def recorder(store):
    return ToolInvocationRecorder(store, "sess-test")


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path_factory, monkeypatch):
    """No test may load a compiled program or an audit database from the developer's machine."""
    monkeypatch.setenv("DIAGNOSIS_COMPILED_DIR", str(tmp_path_factory.mktemp("compiled")))
    monkeypatch.setenv("DIAGNOSIS_DB", "sqlite://")
    monkeypatch.delenv("DIAGNOSIS_LM", raising=False)


@pytest.fixture(autouse=True)
def _no_dspy_disk_cache():
    """Scripted runs must not read answers cached by an earlier run (dspy's own tests do the same)."""
    import dspy

    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    yield


@pytest.fixture(scope="session")
def cases():
    from devset import load_cases

    return {c["case_id"]: c for c in load_cases()}

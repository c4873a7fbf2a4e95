import pytest

from program.store.audit import AuditStore
from program.entry.server import SETTINGS as SERVE_SETTINGS
from program.evidence.language import SETTING as LANGUAGE
from tools.functions import TOOLBOX
from tools.recorder import ToolInvocationRecorder
from tools.sources.active import SETTINGS

pytest_plugins = ["pytester", "tests.support.isolation", "tests.support.real_logs_plugin"]


@pytest.fixture
def store():
    return AuditStore("sqlite://")


@pytest.fixture
def recorder(store):
    return ToolInvocationRecorder(store, "sess-test", TOOLBOX)


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path_factory, monkeypatch):
    """No test may load a compiled program, an audit database, a remembered engine probe or a saved
    prefix state from the developer's machine, or read the sources (a Prometheus, log directories),
    the server settings, the LM server settings or the language the developer's settings name."""
    monkeypatch.setenv("DIAGNOSIS_COMPILED_DIR", str(tmp_path_factory.mktemp("compiled")))
    monkeypatch.setenv("DIAGNOSIS_DB", "sqlite://")
    monkeypatch.setenv("DIAGNOSIS_PROBE_CACHE", str(tmp_path_factory.mktemp("probes")))
    monkeypatch.setenv("DIAGNOSIS_PREFIX_CACHE", str(tmp_path_factory.mktemp("prefixes")))
    for name in ("DIAGNOSIS_LM", "DIAGNOSIS_LM_API_BASE", "DIAGNOSIS_LM_SCHEMA", "DIAGNOSIS_PREFIX_CACHE_MB"):
        monkeypatch.delenv(name, raising=False)
    for name in (*SETTINGS, *SERVE_SETTINGS, LANGUAGE):
        monkeypatch.delenv(name, raising=False)


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


@pytest.fixture(scope="session")
def prometheus():
    """A live Prometheus on loopback whose alerts fire as the fixture's do: its URL. Runs wherever a
    prometheus binary is found (.ci/run installs Debian's); skips with the reason elsewhere, and
    fails under CI, where a missing server would hide the real-backend tests."""
    from tests.support.prometheus_server import running_prometheus

    with running_prometheus() as server:
        yield server

import pytest

from program.audit import AuditStore
from tools.recorder import ToolInvocationRecorder


@pytest.fixture
def store():
    return AuditStore("sqlite://")


@pytest.fixture
def recorder(store):
    return ToolInvocationRecorder(store, "sess-test")

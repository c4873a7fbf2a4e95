import os

import pytest

from tests.support.servers import missing_server


@pytest.fixture
def postgres_url():
    """Runs in every CI run: .ci/run starts a PostgreSQL server on loopback and sets the URL."""
    url = os.environ.get("DIAGNOSIS_TEST_POSTGRES")
    if not url:
        missing_server("DIAGNOSIS_TEST_POSTGRES is not set: no PostgreSQL server on this machine (.ci/run starts one)")
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_url(request, tmp_path):
    """Each backend the store runs on: what one accepts, the other must accept the same way."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'audit.db'}"
    return request.getfixturevalue("postgres_url")

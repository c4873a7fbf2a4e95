"""The audit store's backends, for the store's own tests and the entry points' that run against PostgreSQL."""

import os
import uuid

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


@pytest.fixture
def fresh_postgres(postgres_url):
    """A database of its own on the test PostgreSQL server, dropped afterwards: the queue of pending
    sessions is the whole database's, so no other test's rows may be in it."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as db:
        db.execute(text(f"CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0"))
    try:
        yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as db:
            db.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def queue_url(request, tmp_path):
    """Each backend, with a database that holds no other test's sessions."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'audit.db'}"
    return request.getfixturevalue("fresh_postgres")

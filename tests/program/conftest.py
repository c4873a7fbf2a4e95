"""The audit store's backends, for the store's own tests and the entry points' that run against PostgreSQL."""

import uuid

import pytest

from tests.support.postgres_server import postgres_server


@pytest.fixture(scope="session")
def postgres_url():
    """The server .ci/run starts, or one of this session's own from Debian's binaries."""
    with postgres_server() as url:
        yield url


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

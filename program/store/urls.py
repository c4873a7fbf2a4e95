"""The audit database's URL: the one given, else DIAGNOSIS_DB, else a SQLite file under
~/.grounded-diagnosis; anything the store cannot run on is an AuditURLError that says why."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from contracts.settings import current, default
from program.store.errors import AuditStoreError, AuditURLError
from program.store.storable import storable

DATABASES = {"sqlite": "SQLite (sqlite:///path)", "postgresql": "PostgreSQL (postgresql+psycopg://…)"}


def default_db_url() -> str:
    url = current().db
    if url:
        return url
    # The default is a SQLite file under the home directory (contracts/settings.py).
    try:
        path = Path(default("DIAGNOSIS_DB").removeprefix("sqlite:///")).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError) as exc:
        raise AuditStoreError(f"no place for the default audit database ({exc}); set DIAGNOSIS_DB or --db") from None
    return f"sqlite:///{path}"


def parse_url(url: str):
    """The URL of a database the store runs on; anything else is an AuditURLError that says why."""
    if not url.strip():
        raise AuditURLError("the audit database URL is empty")
    if storable(url)[1]:
        raise AuditURLError("the audit database URL holds NUL or lone surrogates (bytes that are not UTF-8)")
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:  # a port that is not a number is a ValueError
        # Not echoed: a URL that cannot be read cannot have its password hidden either.
        raise AuditURLError(f"the audit database URL is not a database URL: {exc}") from None
    backend = parsed.get_backend_name()
    if backend not in DATABASES:
        raise AuditURLError(f"{parsed.render_as_string(hide_password=True)}: the audit store runs on "
                            f"{' or '.join(DATABASES.values())}, not {backend}")
    try:
        dialect = parsed.get_dialect()
    except ArgumentError as exc:  # NoSuchModuleError: a driver name SQLAlchemy does not know
        raise AuditURLError(f"{parsed.render_as_string(hide_password=True)} is not a database URL: {exc}") from None
    if dialect.is_async:
        raise AuditURLError(f"{parsed.render_as_string(hide_password=True)}: {parsed.get_driver_name()} is an asyncio "
                            f"driver, and the audit store needs a plain one: {' or '.join(DATABASES.values())}")
    return parsed

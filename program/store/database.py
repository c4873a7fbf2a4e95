"""The audit database the store writes to: one URL opened as an engine (SQLite by default, PostgreSQL
too), its schema created or checked, and every fault of the database itself turned into an
``AuditStoreError`` that says what is wrong."""

from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import StaticPool
from sqlalchemy.schema import CreateIndex, CreateTable

from program.store.errors import AuditStoreError, AuditURLError
from program.store.tables import Base
from program.store.urls import default_db_url, parse_url

# The key of the PostgreSQL advisory lock that serialises creating the schema.
SCHEMA_LOCK = 0x6164_6974


class Database:
    def __init__(self, url: str | None = None, *, read_only: bool = False):
        self.url = default_db_url() if url is None else url
        self.parsed_url = parsed = parse_url(self.url)
        # What messages show: a password in the URL stays out of them.
        self.shown_url = parsed.render_as_string(hide_password=True)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        self.in_memory = in_memory = self.is_sqlite and (parsed.database in (None, "", ":memory:")
                                                         or "mode=memory" in self.url)
        if read_only and self.is_sqlite and not in_memory and not Path(parsed.database).is_file():
            raise AuditStoreError(f"audit database {parsed.database} does not exist")
        kwargs: dict[str, Any] = {}
        if in_memory:
            kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        elif self.is_sqlite:
            kwargs = {"connect_args": {"check_same_thread": False, "timeout": 30}}
        # SQLite allows one writer at a time; serialising here turns "database is locked" into a wait.
        self._lock = threading.Lock() if self.is_sqlite else None
        try:
            self.engine = create_engine(self.url, **kwargs)
        except ImportError as exc:
            raise AuditStoreError(f"audit database {self.shown_url}: its driver {parsed.get_driver_name()} is not "
                                  f"installed ({exc}); for PostgreSQL: pip install -e '.[postgres]'") from None
        except (ArgumentError, ValueError, TypeError) as exc:  # an option of the URL the driver cannot take
            raise AuditURLError(f"audit database {self.shown_url}: the URL's options cannot be used: {exc}") from None
        with self._faults("open"):
            if read_only:
                self._check_schema()
            else:
                self._create_schema()

    @contextmanager
    def _faults(self, what: str):
        try:
            yield
        except SQLAlchemyError as exc:
            reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise AuditStoreError(f"audit database {self.shown_url}: cannot {what}: {reason}") from None
        except ValueError as exc:  # a JSON column whose text is not JSON
            raise AuditStoreError(f"audit database {self.shown_url}: cannot {what}: a stored value is not valid JSON "
                                  f"({exc})") from None

    def _create_schema(self) -> None:
        """IF NOT EXISTS, so stores opening one new database at once never collide on a table. PostgreSQL
        also takes a lock for it: there, two such statements at once can still collide on its catalog."""
        with self.engine.begin() as db:
            if not self.is_sqlite:
                encoding = db.execute(text("SHOW server_encoding")).scalar()
                if encoding != "UTF8":
                    raise AuditStoreError(f"audit database {self.shown_url} is encoded {encoding}, which cannot hold "
                                          "every question and log line: the audit store needs a UTF8 database")
                db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
            for table in Base.metadata.sorted_tables:
                db.execute(CreateTable(table, if_not_exists=True))
                for index in table.indexes:
                    db.execute(CreateIndex(index, if_not_exists=True))

    def _check_schema(self) -> None:
        tables = inspect(self.engine).get_table_names()
        for table in Base.metadata.sorted_tables:
            if table.name not in tables:
                raise AuditStoreError(f"{self.shown_url} is not a grounded-diagnosis audit database "
                                      f"(no table {table.name!r}; it has {', '.join(tables) or 'no tables'})")
            columns = {c["name"] for c in inspect(self.engine).get_columns(table.name)}
            missing = sorted({c.name for c in table.columns} - columns)
            if missing:
                raise AuditStoreError(f"{self.shown_url}: table {table.name!r} lacks column(s) {', '.join(missing)}")

    def __deepcopy__(self, memo):
        # A handle to shared storage, not program state: optimizers that copy programs share it.
        return self

    def _guard(self):
        return self._lock if self._lock is not None else nullcontext()

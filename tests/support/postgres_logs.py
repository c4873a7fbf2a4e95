"""Debian's PostgreSQL 15 writing its own logs, from two clusters of this run's own:

- `orders-db`, set up as Debian's pg_createcluster sets up a cluster (stderr to one file, and the
  log_line_prefix of createcluster.conf, `%m [%p] %q%u@%d `), with max_connections=4 and no
  reserved slots, under seven concurrent clients: three get `FATAL:  sorry, too many clients already`.
  A duplicate INSERT written over two lines leaves an ERROR with its DETAIL and a STATEMENT that goes
  on over a second, unprefixed line.
- `inventory-db`, with PostgreSQL's own default prefix (`%m [%p] `) and the logging collector writing
  stderr, csvlog and jsonlog side by side: a deadlock (an ERROR followed by its DETAIL, HINT, CONTEXT
  and STATEMENT, the DETAIL and the STATEMENT running over several lines) and a FATAL for a database
  that does not exist.

The clusters run as Debian's `postgres` user when this is root, so their files are written in the
cluster's own directory and copied here once the server has stopped.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import psycopg

from tests.support.log_software import MissingSoftware, Written, first_line, lines_with, wait_until
from tests.support.postgres_server import Cluster, postgres_binaries, postgres_cluster

# Debian's default: /etc/postgresql-common/createcluster.conf, which pg_createcluster writes into
# every cluster's postgresql.conf (PostgreSQL's own default is `%m [%p] `).
DEBIAN_PREFIX = "%m [%p] %q%u@%d "
CLIENTS = 7
MAX_CONNECTIONS = 4
TOO_MANY = "FATAL:  sorry, too many clients already"
DUPLICATE_INSERT = "INSERT INTO orders (id, customer, total)\n     VALUES (1042, 'acme', 99.50)"
UPDATE_STOCK = "UPDATE stock\n   SET qty = qty - 1\n WHERE sku = '{sku}'"
MISSING_DATABASE = "inventory_archive"


def _binaries() -> Path:
    binaries = postgres_binaries()
    if binaries is None:
        raise MissingSoftware("PostgreSQL's binaries are not on this machine: install Debian's postgresql")
    return binaries


def _connect(cluster: Cluster, dbname: str = "postgres", autocommit: bool = True) -> psycopg.Connection:
    return psycopg.connect(host="127.0.0.1", port=cluster.port, user="postgres", dbname=dbname,
                           autocommit=autocommit, connect_timeout=10)


def _close_and_wait(connection: psycopg.Connection) -> None:
    """Close, then wait until the backend has gone and given its connection slot back."""
    pid = connection.info.backend_pid
    connection.close()
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), f"backend {pid} exiting")


def _crowd(cluster: Cluster) -> dict:
    """Seven clients connect at once and hold on until every one has been let in or turned away."""
    attempts = threading.Barrier(CLIENTS, timeout=30)
    connected, refused, lock = [], [], threading.Lock()

    def client() -> None:
        connection = None
        try:
            connection = _connect(cluster)
            with lock:
                connected.append(connection.info.backend_pid)
        except psycopg.OperationalError as error:
            with lock:
                refused.append(str(error).strip())
        attempts.wait()
        if connection is not None:
            connection.close()

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return {"clients": CLIENTS, "connected": len(connected), "refused": len(refused),
            "client_errors": sorted(set(refused))}


def write_orders_db(root: Path) -> Written:
    """orders-db/postgresql.log."""
    version = first_line([str(_binaries() / "postgres"), "--version"])
    settings = {"max_connections": str(MAX_CONNECTIONS), "superuser_reserved_connections": "0",
                "log_line_prefix": DEBIAN_PREFIX, "lc_messages": "C"}
    target = root / "orders-db" / "postgresql.log"
    target.parent.mkdir(parents=True)
    duplicate = None
    with postgres_cluster(settings) as cluster:
        setup = _connect(cluster)
        setup.execute("CREATE TABLE orders (id int PRIMARY KEY, customer text, total numeric)")
        setup.execute("INSERT INTO orders VALUES (1042, 'acme', 99.50)")
        try:
            setup.execute(DUPLICATE_INSERT)
        except psycopg.errors.UniqueViolation as error:
            duplicate = {"message": error.diag.message_primary, "detail": error.diag.message_detail,
                         "sqlstate": error.sqlstate, "statement": DUPLICATE_INSERT}
        _close_and_wait(setup)
        crowd = _crowd(cluster)
        cluster.stop()
        shutil.copyfile(cluster.stderr_log, target)
    fatal = lines_with(target, TOO_MANY)
    written = Written()
    written.add("orders-db/postgresql.log", service="orders-db", software=version,
                format="postgresql-stderr", log_line_prefix=DEBIAN_PREFIX, facts={
                    "max_connections": MAX_CONNECTIONS, **crowd, "too_many_clients_lines": len(fatal),
                    "too_many_clients_line": fatal[0] if fatal else None, "postmaster_pid": cluster.postmaster_pid,
                    "ready_line": _first(target, "database system is ready to accept connections"),
                    "multi_line_error": duplicate and {**duplicate, "first_line": _first(target, duplicate["message"])}})
    return written


def _first(path: Path, text: str) -> str | None:
    found = lines_with(path, text)
    return found[0] if found else None


def _deadlock(cluster: Cluster) -> list[dict]:
    """Two transactions that each hold the row the other one wants next: the errors the clients got."""
    first, second = _connect(cluster, autocommit=False), _connect(cluster, autocommit=False)
    errors: list[dict] = []

    def update(connection: psycopg.Connection, sku: str) -> None:
        try:
            connection.execute(UPDATE_STOCK.format(sku=sku))
        except psycopg.errors.DeadlockDetected as error:
            errors.append({"message": error.diag.message_primary, "sqlstate": error.sqlstate,
                           "statement": UPDATE_STOCK.format(sku=sku)})
            connection.rollback()

    try:
        update(first, "A-1")
        update(second, "B-2")
        waiting = threading.Thread(target=update, args=(first, "B-2"))
        waiting.start()
        wait_until(lambda: _waiting_for_lock(cluster), "a transaction waiting for a row lock")
        update(second, "A-1")
        waiting.join(30)
    finally:
        first.close()
        second.close()
    return errors


def _waiting_for_lock(cluster: Cluster) -> bool:
    with _connect(cluster) as watcher:
        return watcher.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0] > 0


def write_inventory_db(root: Path) -> Written:
    """inventory-db/postgresql.log, .csv and .json, written by the logging collector at once."""
    version = first_line([str(_binaries() / "postgres"), "--version"])
    settings = {"max_connections": "20", "lc_messages": "C", "log_line_prefix": "%m [%p] ",
                "logging_collector": "on", "log_destination": "stderr,csvlog,jsonlog",
                "log_directory": "collector", "log_filename": "postgresql.log", "log_rotation_age": "0",
                "log_rotation_size": "0", "deadlock_timeout": "100ms"}
    target = root / "inventory-db"
    target.mkdir(parents=True)
    missing = None
    with postgres_cluster(settings) as cluster:
        setup = _connect(cluster)
        setup.execute("CREATE TABLE stock (sku text PRIMARY KEY, qty int)")
        setup.execute("INSERT INTO stock VALUES ('A-1', 10), ('B-2', 5)")
        setup.close()
        deadlocks = _deadlock(cluster)
        try:
            _connect(cluster, dbname=MISSING_DATABASE).close()
        except psycopg.OperationalError as error:
            missing = str(error).strip()
        cluster.stop()
        for ext in ("log", "csv", "json"):
            shutil.copyfile(cluster.dir / "data" / "collector" / f"postgresql.{ext}", target / f"postgresql.{ext}")
    stderr = target / "postgresql.log"
    facts = {"deadlocks": deadlocks, "missing_database_client_error": missing,
             "postmaster_pid": cluster.postmaster_pid,
             "expected_records": [{"error_severity": "ERROR", "message": "deadlock detected"},
                                  {"error_severity": "FATAL",
                                   "message": f'database "{MISSING_DATABASE}" does not exist'}]}
    written = Written()
    written.add("inventory-db/postgresql.log", service="inventory-db", software=version,
                format="postgresql-stderr", log_line_prefix="%m [%p] ", facts={
                    **facts, "deadlock_line": _first(stderr, "ERROR:  deadlock detected"),
                    "missing_database_line": _first(stderr, f'database "{MISSING_DATABASE}" does not exist')})
    for ext, form in (("csv", "postgresql-csvlog"), ("json", "postgresql-jsonlog")):
        written.add(f"inventory-db/postgresql.{ext}", service="inventory-db", software=version, format=form,
                    facts=facts)
    return written

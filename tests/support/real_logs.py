"""Real logs written by real software into one directory, laid out the way /var/log holds them (one
directory per service), and a manifest of what was written:

    python -m tests.support.real_logs DIR      # DIR must not exist yet, or be empty; prints the manifest

| path | written by | format |
| --- | --- | --- |
| api-gateway/access.log (.1, .2.gz) | nginx, proxying to an upstream that is down | nginx combined |
| api-gateway/error.log (.1, .2.gz) | nginx | nginx error log |
| static-site/access.log, error.log (.1, .2.gz) | nginx | Apache common (log_format), nginx error log |
| orders-db/postgresql.log | PostgreSQL 15, 7 clients over max_connections=4 | stderr, Debian's prefix |
| inventory-db/postgresql.log, .csv, .json | PostgreSQL 15's logging collector | stderr `%m [%p] `, csvlog, jsonlog |
| syslog (.1, .2.gz), syslog5424.log | rsyslogd, fed by logger | RFC 3164 file format, RFC 5424 |
| inventory-service/inventory.log | OpenJDK, java.util.logging | text with a Java stack trace |
| notification-service/worker.log | CPython's logging | text with a chained Python traceback |
| prometheus/prometheus.log | Prometheus | logfmt |
| payment-service/<id>-json.log (.1) | as dockerd's json-file driver documents it | Docker json-file |
| pods/shop_orders-…/orders/N.log, containers/*.log | as the kubelet and CRI document it | CRI |
| user-service, search-service, cart-service, pricing, recommendations, shipped | as each logger documents it | JSON lines |

The manifest lists every service named by a file's place or by its lines (`services`), and says,
per file (relative to DIR): the service it belongs to (null for files of many services, whose lines
name their own, listed in the file's facts), the software that wrote it, its format, `origin` (`software`
when the program itself ran, `documentation` when the file follows a cited document), its line count,
and facts known from what was done to the software: requests and their statuses with the exact line
each status got, the clients that were refused and the exact FATAL line, the messages sent to syslog
and the line each became.

Every writer runs at once, each in its own temp dirs on loopback ports, and stops what it started
even when it fails. A program that is not on this machine raises MissingSoftware naming the Debian
package to install.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.support.app_logs import write_java_logs, write_prometheus_logs, write_python_logs
from tests.support.documented_logs import write_documented_logs
from tests.support.log_software import MissingSoftware
from tests.support.nginx_logs import write_nginx_logs
from tests.support.postgres_logs import write_inventory_db, write_orders_db
from tests.support.rsyslog_logs import write_syslog

WRITERS = (write_nginx_logs, write_orders_db, write_inventory_db, write_syslog, write_java_logs,
           write_python_logs, write_prometheus_logs, write_documented_logs)


def _line_count(path: Path) -> int:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        return sum(1 for _ in handle)


def write_real_logs(root: Path) -> dict:
    """Write every log under `root` (new or empty) and return the manifest."""
    root = root.resolve()
    if root.exists() and any(root.iterdir()):
        raise ValueError(f"{root} is not empty: the logs go into a directory of their own")
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with ThreadPoolExecutor(len(WRITERS)) as pool:
        futures = {writer.__name__: pool.submit(writer, root) for writer in WRITERS}
    failures = {name: future.exception() for name, future in futures.items() if future.exception()}
    if failures:
        missing = [str(error) for error in failures.values() if isinstance(error, MissingSoftware)]
        if len(missing) == len(failures):
            raise MissingSoftware("; ".join(missing))
        raise RuntimeError("; ".join(f"{name}: {error!r}" for name, error in failures.items())) \
            from next(iter(failures.values()))
    files: dict[str, dict] = {}
    for future in futures.values():
        files.update(future.result().files)
    for path, entry in files.items():
        entry["lines"] = _line_count(root / path)
    unlisted = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                      if (p.is_file() or p.is_symlink()) and p.relative_to(root).as_posix() not in files)
    if unlisted:
        raise RuntimeError(f"files written but not in the manifest: {unlisted}")
    services = {e["service"] for e in files.values() if e["service"]} | {
        s for e in files.values() for s in e["facts"].get("services", ())}
    return {"root": str(root), "seconds": round(time.monotonic() - started, 2), "services": sorted(services),
            "files": dict(sorted(files.items()))}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.real_logs DIR", file=sys.stderr)
        return 2
    try:
        manifest = write_real_logs(Path(argv[0]))
    except (MissingSoftware, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(manifest, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Files in the formats of software that cannot run here (dockerd, the kubelet with a container
runtime, applications' JSON loggers), written as each format's own documentation and source say.
Every function cites what it follows. Times are RFC 3339 in UTC, a few minutes before now, older
for rotated files.
"""

from __future__ import annotations

import json
import os
import secrets
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tests.support.log_software import Written

DOCKER_DOC = "https://docs.docker.com/engine/logging/drivers/json-file/"
CRI_DOC = "https://github.com/kubernetes/design-proposals-archive/blob/main/node/kubelet-cri-logging.md"
DOCKER_LINE_BUFFER = 16 * 1024  # moby daemon/logger/copier.go: bufSize; a longer line is logged in parts
CRI_MAX_LINE = 16 * 1024  # containerd's CRI plugin: max_container_log_line_size, 16 KiB by default


class Clock:
    """Times that go forward by `step` from `start`, as a process's lines do."""

    def __init__(self, start: datetime, step: timedelta = timedelta(milliseconds=137)):
        self.now, self.step = start, step

    def tick(self) -> datetime:
        self.now += self.step
        return self.now


def rfc3339nano(moment: datetime) -> str:
    """Go's time.RFC3339Nano in UTC, which dockerd and containerd write: trailing zeros of the
    fraction are dropped, and so is the dot when nothing is left."""
    fraction = f"{moment.microsecond:06d}{secrets.randbelow(1000):03d}".rstrip("0")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def rfc3339millis(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _docker_json(log: str, stream: str, moment: datetime) -> str:
    """One json-file line, keys in dockerd's order. moby's jsonlog (MarshalJSONBuf) escapes <, > and &
    as \\u003c, \\u003e and \\u0026, as Go's encoding/json does."""
    line = json.dumps({"log": log, "stream": stream, "time": rfc3339nano(moment)}, separators=(",", ":"))
    return line.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _docker_lines(output: list[tuple[str, str]], clock: Clock) -> list[str]:
    """What dockerd's json-file driver writes for a container's output lines: a line longer than the
    copier's 16 KiB buffer goes out as 16 KiB parts without a newline, the last part with it
    (moby daemon/logger/jsonfilelog: only a partial message's `log` lacks the trailing \\n)."""
    lines = []
    for stream, text in output:
        data = text.encode("utf-8")
        while len(data) > DOCKER_LINE_BUFFER:
            lines.append(_docker_json(data[:DOCKER_LINE_BUFFER].decode("utf-8"), stream, clock.tick()))
            data = data[DOCKER_LINE_BUFFER:]
        lines.append(_docker_json(data.decode("utf-8") + "\n", stream, clock.tick()))
    return lines


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


LONG_BODY = "x" * 40_000
PAYMENT_OLDER = [
    ("stdout", "payment-service 2.4.1 listening on :8080"),
    ("stdout", "POST /charge order=1038 status=200 duration=201ms"),
    ("stdout", "POST /charge order=1039 status=200 duration=188ms"),
]
PAYMENT_OUTPUT = [
    ("stdout", "POST /charge order=1041 status=200 duration=212ms"),
    ("stderr", "WARN retrying <card-processor> call for order 1042 & backing off 2s"),
    ("stderr", "ERROR charge failed for order 1042: upstream card-processor returned 503"),
    ("stdout", '{"level":"error","msg":"payment declined","order":1042,"code":"card_declined"}'),
    ("stdout", f"DEBUG request dump order=1042 body={LONG_BODY}"),
    ("stdout", "POST /charge order=1043 status=200 duration=180ms"),
]


def write_docker_logs(root: Path, now: datetime) -> Written:
    """payment-service/<id>-json.log and its rotated <id>-json.log.1 (max-file), as dockerd writes
    /var/lib/docker/containers/<id>/<id>-json.log; here under the service's own directory."""
    container = secrets.token_hex(32)
    current = root / "payment-service" / f"{container}-json.log"
    _write(current.with_name(current.name + ".1"), _docker_lines(PAYMENT_OLDER, Clock(now - timedelta(hours=1))))
    lines = _docker_lines(PAYMENT_OUTPUT, Clock(now - timedelta(minutes=12)))
    _write(current, lines)
    partial = len(lines) - len(PAYMENT_OUTPUT)  # every output line ends in one entry with its newline
    written = Written()
    for path, output in ((current.name + ".1", PAYMENT_OLDER), (current.name, PAYMENT_OUTPUT)):
        written.add(f"payment-service/{path}", service="payment-service", software="dockerd json-file",
                    format="docker-json-file", doc=DOCKER_DOC, container_id=container, facts={
                        "container_lines": len(output), "stderr_lines": sum(s == "stderr" for s, _ in output),
                        **({"partial_entries": partial, "long_line_chars": len(PAYMENT_OUTPUT[4][1]),
                            "error_line": PAYMENT_OUTPUT[2][1]} if output is PAYMENT_OUTPUT else {})})
    return written


def _cri_lines(output: list[tuple[str, str]], clock: Clock) -> list[str]:
    """`<RFC3339Nano> <stream> <P|F> <message>`: a line longer than the runtime's maximum is written
    as P (partial) pieces and ends with an F (full) piece; the kubelet joins them back. containerd
    stamps the time with Go's time.RFC3339Nano (pkg/cri/io/logger.go)."""
    lines = []
    for stream, text in output:
        while len(text) > CRI_MAX_LINE:
            lines.append(f"{rfc3339nano(clock.tick())} {stream} P {text[:CRI_MAX_LINE]}")
            text = text[CRI_MAX_LINE:]
        lines.append(f"{rfc3339nano(clock.tick())} {stream} F {text}")
    return lines


GO_PANIC = [
    "panic: runtime error: invalid memory address or nil pointer dereference",
    "[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x6c1f2e]",
    "",
    "goroutine 1 [running]:",
    "main.(*Store).Reserve(0x0, {0xc000012345, 0x5})",
    "\t/app/store.go:42 +0x2e",
    "main.main()",
    "\t/app/main.go:31 +0x1a5",
]
ORDERS_CRASHED = [("stdout", '{"level":"info","msg":"orders 1.8.2 starting","port":8080}'),
                  *[("stderr", line) for line in GO_PANIC]]
ORDERS_OUTPUT = [
    ("stdout", '{"level":"info","msg":"orders 1.8.2 starting","port":8080}'),
    ("stdout", '{"level":"info","msg":"order placed","order":1041}'),
    ("stderr", "ERROR could not reserve stock for order 1042: pq: sorry, too many clients already"),
    ("stdout", "INFO request body of order 1042: " + "y" * 35_000),
    ("stdout", '{"level":"warn","msg":"retrying order 1042","attempt":2}'),
]
REPLICA_OUTPUT = [("stdout", '{"level":"info","msg":"orders 1.8.2 starting","port":8080}'),
                  ("stdout", '{"level":"info","msg":"order placed","order":1040}')]


def write_kubernetes_logs(root: Path, now: datetime) -> Written:
    """Two pods of the Deployment `orders` in namespace `shop`, as the kubelet lays them out:
    pods/<namespace>_<pod>_<uid>/<container>/<restart>.log, and for each container
    containers/<pod>_<namespace>_<container>-<container id>.log, a symlink to its file (kubelet's
    kuberuntime BuildPodLogsDirectory and logSymlink). The first pod's container crashed once: 0.log is
    the crashed one's, ending in a Go panic, 1.log the running one's."""
    written = Written()
    pods = (("orders-7d9f8c6b5d-x2x4q", [ORDERS_CRASHED, ORDERS_OUTPUT]), ("orders-7d9f8c6b5d-k8m2p", [REPLICA_OUTPUT]))
    clock = Clock(now - timedelta(minutes=20))
    for pod, restarts in pods:
        directory = root / "pods" / f"shop_{pod}_{uuid.uuid4()}" / "orders"
        for restart, output in enumerate(restarts):
            path = directory / f"{restart}.log"
            lines = _cri_lines(output, clock)
            _write(path, lines)
            container = secrets.token_hex(32)
            link = root / "containers" / f"{pod}_shop_orders-{container}.log"
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(path, link)  # the kubelet links to the absolute path
            relative = path.relative_to(root).as_posix()
            facts = {"namespace": "shop", "pod": pod, "workload": "orders", "container": "orders",
                     "restart": restart, "container_lines": len(output),
                     "partial_pieces": len(lines) - len(output)}  # each output line ends in one F
            if output is ORDERS_OUTPUT:
                facts["error_line"] = ORDERS_OUTPUT[2][1]
            if output is ORDERS_CRASHED:
                facts["panic_lines"] = GO_PANIC
            written.add(relative, service="orders", software="kubelet with containerd (CRI)", format="cri",
                        doc=CRI_DOC, facts=facts)
            written.add(link.relative_to(root).as_posix(), service="orders", software="kubelet", format="cri",
                        doc=CRI_DOC, symlink_to=relative, facts={"container_id": container, "same_file_as": relative})
    return written


def _json_file(root: Path, path: str, records: list[dict], *, service: str | None, logger: str, doc: str,
               written: Written, facts: dict | None = None) -> None:
    _write(root / path, [json.dumps(record, separators=(",", ":")) for record in records])
    written.add(path, service=service, software=logger, format="json-lines", doc=doc,
                facts={"records": len(records), **(facts or {})})


def write_json_logs(root: Path, now: datetime) -> Written:
    """JSON lines with the field names of the loggers that write most of them, one logger per file."""
    clock = Clock(now - timedelta(minutes=9), timedelta(seconds=3))
    written = Written()
    _json_file(root, "user-service/app.json", [
        {"time": rfc3339millis(clock.tick()), "level": "INFO", "msg": "login ok", "service": "user-service", "user": 77},
        {"time": rfc3339millis(clock.tick()), "level": "ERROR", "msg": "session store unreachable",
         "service": "user-service", "err": "dial tcp 127.0.0.1:6379: connect: connection refused"},
        {"time": rfc3339millis(clock.tick()), "level": "WARN", "msg": "falling back to database sessions",
         "service": "user-service"},
    ], service="user-service", logger="Go log/slog JSONHandler",
        doc="https://pkg.go.dev/log/slog#JSONHandler (keys time, level, msg: TimeKey, LevelKey, MessageKey)",
        written=written, facts={"error_message": "session store unreachable"})
    _json_file(root, "search-service/search.json", [
        {"@timestamp": rfc3339millis(clock.tick()), "log.level": "info", "message": "index refreshed",
         "ecs.version": "1.6.0", "service.name": "search-service", "log": {"logger": "search.index"}},
        {"@timestamp": rfc3339millis(clock.tick()), "log.level": "error", "message": "query timed out after 5000 ms",
         "ecs.version": "1.6.0", "service.name": "search-service", "log": {"logger": "search.query"}},
    ], service="search-service", logger="Elastic ecs-logging",
        doc="https://www.elastic.co/guide/en/ecs-logging/overview/current/intro.html (@timestamp, log.level, "
            "message, ecs.version; service.name from ECS)",
        written=written, facts={"error_message": "query timed out after 5000 ms"})
    _json_file(root, "cart-service/cart.json", [
        {"severity": "INFO", "message": "cart 31 updated", "time": rfc3339nano(clock.tick()), "app": "cart-service"},
        {"severity": "ERROR", "message": "price lookup failed for sku-7", "time": rfc3339nano(clock.tick()),
         "app": "cart-service"},
    ], service="cart-service", logger="Google Cloud structured logging",
        doc="https://cloud.google.com/logging/docs/structured-logging (severity, message, time)",
        written=written, facts={"error_message": "price lookup failed for sku-7"})
    stamp = clock.tick().timestamp()
    _json_file(root, "pricing/pricing.json", [
        {"level": "info", "ts": round(stamp, 6), "caller": "quote/quote.go:61", "msg": "quote computed",
         "app": "pricing", "sku": "sku-7"},
        {"level": "error", "ts": round(stamp + 2.5, 6), "caller": "quote/quote.go:88", "msg": "currency feed stale",
         "app": "pricing", "error": "feed age 900s > 300s",
         "stacktrace": "main.(*Quoter).Quote\n\t/app/quote/quote.go:88\nmain.main\n\t/app/main.go:40"},
    ], service="pricing", logger="Uber zap (production encoder)",
        doc="https://pkg.go.dev/go.uber.org/zap#NewProductionEncoderConfig (ts as epoch seconds, level, msg, "
            "caller, stacktrace)",
        written=written, facts={"error_message": "currency feed stale"})
    _json_file(root, "recommendations/app.json", [
        {"t": rfc3339nano(clock.tick()), "lvl": "info", "msg": "model loaded", "app": "recommendations"},
        {"t": rfc3339nano(clock.tick()), "lvl": "eror", "msg": "model refresh failed", "app": "recommendations",
         "err": "no such file: /models/v12.bin"},
    ], service="recommendations", logger="log15 (JsonFormat)",
        doc="https://pkg.go.dev/github.com/inconshreveable/log15 (keys t, lvl, msg; levels dbug info warn eror crit)",
        written=written, facts={"error_message": "model refresh failed"})
    shipped = [("orders", "orders-7d9f8c6b5d-x2x4q", "error", "stock reservation failed for order 1042"),
               ("payment-service", "payment-service-5c4b9d7f8-q7wz2", "info", "charge succeeded for order 1043"),
               ("orders", "orders-7d9f8c6b5d-k8m2p", "info", "order placed")]
    _json_file(root, "shipped/kubernetes.json", [
        {"@timestamp": rfc3339nano(clock.tick()), "stream": "stdout", "level": level, "message": text,
         "kubernetes": {"pod_name": pod, "namespace_name": "shop", "container_name": app,
                        "labels": {"app": app, "pod-template-hash": pod.split("-")[-2]}}}
        for app, pod, level, text in shipped
    ], service=None, logger="Fluent Bit (kubernetes filter, Merge_Log On)",
        doc="https://docs.fluentbit.io/manual/pipeline/filters/kubernetes (kubernetes.labels, Merge_Log)",
        written=written, facts={"services": sorted({app for app, *_ in shipped}),
                                "error_message": "stock reservation failed for order 1042"})
    return written


def write_documented_logs(root: Path) -> Written:
    now = datetime.now(timezone.utc)
    written = Written()
    for write in (write_docker_logs, write_kubernetes_logs, write_json_logs):
        written.files.update(write(root, now).files)
    return written

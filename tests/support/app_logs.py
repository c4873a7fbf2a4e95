"""Application logs written by the applications' own logging libraries:

- `inventory-service/inventory.log`: a Java program (Debian's OpenJDK) logging through
  java.util.logging's SimpleFormatter; its SEVERE record is followed by the stack trace that the JDK
  prints, with a `Caused by:` and `... N more`.
- `notification-service/worker.log`: CPython's logging module; `logger.exception` follows the
  record with the traceback module's chained traceback (through smtplib and socket, refused by the
  kernel), blank lines included.
- `prometheus/prometheus.log`: Debian's Prometheus in logfmt (`ts=... caller=... level=... msg=...`),
  including the level=error line of a config reload that failed.
"""

from __future__ import annotations

import logging
import platform
import shutil
import signal
import smtplib
import subprocess
import tempfile
from pathlib import Path

from tests.support.log_software import MissingSoftware, Written, first_line, lines_with, refusing_port, require, wait_until
from tests.support.prometheus_server import free_port, prometheus_binary
from tests.support.servers import stop_process

JAVA_FORMAT = "%1$tF %1$tT.%1$tL %4$s [%3$s] %5$s%6$s%n"
JAVA_SOURCE = """\
import java.sql.SQLTransientConnectionException;
import java.util.logging.*;

public class Inventory {
    static final Logger LOG = Logger.getLogger("com.example.inventory.StockService");

    public static void main(String[] args) throws Exception {
        FileHandler file = new FileHandler(args[0]);
        file.setFormatter(new SimpleFormatter());
        LOG.setUseParentHandlers(false);
        LOG.addHandler(file);
        LOG.info("reserved 2 units of sku-7 for order 1041");
        LOG.warning("stock of sku-7 below threshold: 3 left");
        try {
            reserve(1042);
        } catch (IllegalStateException error) {
            LOG.log(Level.SEVERE, "reservation failed for order 1042", error);
        }
        LOG.info("reserved 1 unit of sku-9 for order 1043");
        file.close();
    }

    static void reserve(int order) {
        try {
            connect();
        } catch (SQLTransientConnectionException error) {
            throw new IllegalStateException("could not reserve stock for order " + order, error);
        }
    }

    static void connect() throws SQLTransientConnectionException {
        throw new SQLTransientConnectionException("FATAL: sorry, too many clients already");
    }
}
"""


def write_java_logs(root: Path) -> Written:
    java = require("java", "openjdk-17-jdk-headless")
    version = first_line([java, "-version"])
    target = root / "inventory-service" / "inventory.log"
    target.parent.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="real-logs-java-"))
    try:
        (work / "Inventory.java").write_text(JAVA_SOURCE, encoding="utf-8")
        # The source launcher compiles in memory, which needs the JDK's compiler module, not only a JRE.
        done = subprocess.run([java, f"-Djava.util.logging.SimpleFormatter.format={JAVA_FORMAT}",
                               "-Dfile.encoding=UTF-8", str(work / "Inventory.java"), str(target)],
                              capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if done.returncode != 0:
        if "jdk.compiler" in done.stderr:
            raise MissingSoftware("java cannot compile a source file: install Debian's openjdk-17-jdk-headless")
        raise RuntimeError(f"the Java program failed: {done.stderr[-2000:]}")
    written = Written()
    written.add("inventory-service/inventory.log", service="inventory-service", software=version,
                format="java-util-logging", pattern=JAVA_FORMAT, facts={
                    "records": 4, "severe_line": _first(target, "SEVERE"),
                    "trace_first_line": _first(target, "java.lang.IllegalStateException: could not reserve"),
                    "caused_by_line": _first(target, "Caused by: java.sql.SQLTransientConnectionException"),
                    "trace_lines": len(lines_with(target, "\tat ")) + len(lines_with(target, "\t... "))})
    return written


def _first(path: Path, text: str) -> str | None:
    return next(iter(lines_with(path, text)), None)


def _send(order: int) -> None:
    """Mail through an SMTP relay on a loopback port where nothing listens: the kernel refuses."""
    with refusing_port() as relay:
        try:
            smtplib.SMTP("127.0.0.1", relay, timeout=5)
        except ConnectionRefusedError as error:
            raise RuntimeError(f"notification for order {order} not sent") from error


PYTHON_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def write_python_logs(root: Path) -> Written:
    target = root / "notification-service" / "worker.log"
    target.parent.mkdir(parents=True)
    # A logger of its own, outside logging's registry: nothing else in this process writes to the file.
    logger = logging.Logger("notification.worker", logging.INFO)
    handler = logging.FileHandler(target, encoding="utf-8")
    handler.setFormatter(logging.Formatter(PYTHON_FORMAT))
    logger.addHandler(handler)
    try:
        logger.info("sent order confirmation for order 1041 to customer 77")
        logger.warning("SMTP relay slow: 2.9 s for order 1041")
        try:
            _send(1042)
        except RuntimeError:
            logger.exception("could not notify customer 78 about order 1042")
        logger.info("sent order confirmation for order 1043 to customer 79")
    finally:
        handler.close()
    written = Written()
    written.add("notification-service/worker.log", service="notification-service",
                software=f"CPython {platform.python_version()} logging", format="python-logging",
                pattern=PYTHON_FORMAT, facts={
                    "records": 4, "error_line": _first(target, "ERROR notification.worker"),
                    "traceback_lines": len(lines_with(target, "Traceback (most recent call last):")),
                    "last_traceback_line": _first(target, "RuntimeError: notification for order 1042 not sent"),
                    "cause_line": _first(target, "ConnectionRefusedError: [Errno 111] Connection refused")})
    return written


PROMETHEUS_CONFIG = "global:\n  scrape_interval: 15s\nscrape_configs:\n  - job_name: self\n" \
                    "    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"


def write_prometheus_logs(root: Path) -> Written:
    binary = prometheus_binary()
    if binary is None:
        raise MissingSoftware("prometheus is not on this machine: install Debian's prometheus")
    version = first_line([binary, "--version"])
    target = root / "prometheus" / "prometheus.log"
    target.parent.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="real-logs-prometheus-"))
    port = free_port()
    config = work / "prometheus.yml"
    config.write_text(PROMETHEUS_CONFIG.format(port=port), encoding="utf-8")
    try:
        with target.open("w") as out:
            process = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.format=logfmt"], stdout=out, stderr=out)
        try:
            def alive() -> bool:
                return process.poll() is None

            wait_until(lambda: bool(lines_with(target, "Server is ready to receive web requests")),
                       "Prometheus ready", alive=alive, log=target)
            config.write_text("scrape_configs: [this is not: yaml\n", encoding="utf-8")
            process.send_signal(signal.SIGHUP)
            wait_until(lambda: bool(lines_with(target, "Error reloading config")), "Prometheus rejecting the config",
                       alive=alive, log=target)
        finally:
            stop_process(process)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    written = Written()
    written.add("prometheus/prometheus.log", service="prometheus", software=version, format="logfmt", facts={
        "error_line": _first(target, "level=error"), "ready_line": _first(target, "Server is ready"),
        "sigterm_line": _first(target, "Received SIGTERM")})
    return written

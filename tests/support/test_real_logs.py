"""The real-log writers ran the real software: each file holds what its program wrote about what was
done to it (requests, clients, messages), in that program's own format, and the manifest says so
truly. The files that follow documentation follow it."""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import socket
import subprocess
import syslog
from datetime import datetime
from pathlib import Path

import pytest

from tests.support import nginx_logs, rsyslog_logs
from tests.support.log_software import MissingSoftware, children, require
from tests.support.postgres_logs import CLIENTS, MAX_CONNECTIONS, TOO_MANY

ROOT = Path(__file__).resolve().parents[2]
COMBINED = re.compile(r'^127\.0\.0\.1 - - \[(?P<time>[^\]]+)\] "(?P<request>[^"]*)" (?P<status>\d{3}) (?P<bytes>\d+) '
                      r'"-" "python-httpx/[\d.]+"$')
COMMON = re.compile(r'^127\.0\.0\.1 - - \[(?P<time>[^\]]+)\] "(?P<request>[^"]*)" (?P<status>\d{3}) (?P<bytes>\d+|-)$')
NGINX_ERROR = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[error\] (?P<pid>\d+)#\d+: \*\d+ ")
PG_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC"
RFC3164 = re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d (?P<host>\S+) (?P<tag>[^\s\[:]+)(\[(?P<pid>\d+)\])?:? ")
RFC5424 = re.compile(r"^<(?P<pri>\d+)>1 (?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}[+-]\d\d:\d\d) (?P<host>\S+) "
                     r"(?P<app>\S+) (?P<procid>\S+) (?P<msgid>\S+) ")


def read(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as handle:
        return handle.read().splitlines()


def nginx_time(line: str) -> datetime:
    return datetime.strptime(line.split("[", 1)[1].split("]", 1)[0], "%d/%b/%Y:%H:%M:%S %z")


def test_the_whole_layout_takes_seconds_and_the_manifest_lists_every_file(real_logs):
    print(f"\nreal logs written in {real_logs.manifest['seconds']} s: {len(real_logs.manifest['files'])} files")
    on_disk = sorted(p.relative_to(real_logs.root).as_posix() for p in real_logs.root.rglob("*")
                     if p.is_file() or p.is_symlink())
    assert on_disk == sorted(real_logs.manifest["files"])
    for path, entry in real_logs.manifest["files"].items():
        assert entry["origin"] in ("software", "documentation"), path
        assert entry["software"] and entry["format"], path
        assert (entry["origin"] == "documentation") == ("doc" in entry), path
        assert entry["lines"] == len(read(real_logs.path(path))), path
        if entry["service"] is not None and not path.startswith(("pods/", "containers/")):
            assert path.split("/")[0] == entry["service"], path
    assert {"api-gateway", "orders-db", "payment-service", "orders", "order-service"} <= set(
        real_logs.manifest["services"])
    origins = {entry["format"]: entry["origin"] for entry in real_logs.manifest["files"].values()}
    assert {f for f, origin in origins.items() if origin == "software"} >= {
        "nginx-combined", "apache-common", "nginx-error", "postgresql-stderr", "postgresql-csvlog",
        "postgresql-jsonlog", "syslog-rfc3164", "syslog-rfc5424", "logfmt", "java-util-logging", "python-logging"}


def test_nginx_wrote_the_502s_of_the_requests_sent_to_it(real_logs):
    entry = real_logs.entry("api-gateway/access.log")
    facts = entry["facts"]
    assert entry["software"].startswith("nginx/") and entry["format"] == "nginx-combined"
    lines = read(real_logs.path("api-gateway/access.log"))
    assert all(COMBINED.match(line) for line in lines), lines
    statuses = [COMBINED.match(line)["status"] for line in lines]
    assert {status: statuses.count(status) for status in set(statuses)} == facts["statuses"]
    assert facts["statuses"]["502"] >= 3 and facts["statuses"]["200"] and facts["statuses"]["404"]
    assert facts["lines"]["502"] in lines and COMBINED.match(facts["lines"]["502"])["status"] == "502"
    # nginx answered them itself: its Server header and its own error page.
    assert facts["bad_gateway_response"]["server_header"] == entry["software"]
    assert "<title>502 Bad Gateway</title>" in facts["bad_gateway_response"]["body"]


def test_nginx_wrote_one_refused_upstream_connection_per_502_in_its_error_log(real_logs):
    for suffix in ("", ".1", ".2.gz"):
        access = real_logs.entry(f"api-gateway/access.log{suffix}")["facts"]
        error = real_logs.entry(f"api-gateway/error.log{suffix}")["facts"]
        lines = read(real_logs.path(f"api-gateway/error.log{suffix}"))
        refused = [line for line in lines if nginx_logs.REFUSED in line]
        assert len(refused) == access["statuses"]["502"] == error["connection_refused"] > 0
        assert error["refused_line"] == refused[0]
        assert all(NGINX_ERROR.match(line) for line in lines), lines
        # The pid in each line is that of the nginx worker this run started, read from /proc while it ran.
        assert {int(NGINX_ERROR.match(line)["pid"]) for line in lines} <= set(error["worker_pids"])
        assert error["worker_pids"] and error["master_pid"] not in error["worker_pids"]
        assert all('upstream: "http://127.0.0.1:' in line for line in refused)


def test_nginx_logs_were_rotated_by_logrotate_with_older_lines_in_older_files(real_logs):
    with gzip.open(real_logs.path("api-gateway/access.log.2.gz"), "rt") as handle:
        assert handle.read()
    spans = []
    for suffix in (".2.gz", ".1", ""):
        times = [nginx_time(line) for line in read(real_logs.path(f"api-gateway/access.log{suffix}"))]
        assert times
        spans.append((min(times), max(times)))
    assert spans[0][1] < spans[1][0] and spans[1][1] < spans[2][0]


def test_the_static_site_log_is_apaches_common_format(real_logs):
    lines = read(real_logs.path("static-site/access.log"))
    assert all(COMMON.match(line) for line in lines), lines
    head = [line for line in lines if '"HEAD ' in line]
    assert head and all(line.endswith(" 200 -") for line in head)  # %b: "-" for no body, as Apache writes it
    assert real_logs.entry("static-site/access.log")["facts"]["statuses"] == {"200": 2, "404": 1}


def test_postgres_refused_the_clients_over_max_connections_and_logged_each(real_logs):
    entry = real_logs.entry("orders-db/postgresql.log")
    facts = entry["facts"]
    assert entry["software"].startswith("postgres (PostgreSQL) 15")
    assert (facts["clients"], facts["max_connections"]) == (CLIENTS, MAX_CONNECTIONS)
    assert facts["connected"] == MAX_CONNECTIONS and facts["refused"] == CLIENTS - MAX_CONNECTIONS
    # What the clients were told came over the wire from the server...
    assert facts["client_errors"] and all(e.endswith(TOO_MANY) for e in facts["client_errors"])
    lines = read(real_logs.path("orders-db/postgresql.log"))
    fatal = [line for line in lines if TOO_MANY in line]
    assert len(fatal) == facts["refused"] == facts["too_many_clients_lines"]
    assert facts["too_many_clients_line"] == fatal[0]
    # ...and each refusal is a line of Debian's prefix from a backend of its own.
    pattern = re.compile(rf"^{PG_TIME} \[(\d+)\] postgres@postgres {TOO_MANY}$")
    pids = {int(pattern.match(line)[1]) for line in fatal}
    assert len(pids) == len(fatal) and facts["postmaster_pid"] not in pids
    assert re.match(rf"^{PG_TIME} \[{facts['postmaster_pid']}\] LOG:  database system is ready", facts["ready_line"])


def test_postgres_wrote_the_multi_line_error_with_its_detail_and_statement(real_logs):
    error = real_logs.entry("orders-db/postgresql.log")["facts"]["multi_line_error"]
    lines = read(real_logs.path("orders-db/postgresql.log"))
    at = lines.index(error["first_line"])
    prefix = error["first_line"].split(" ERROR:  ")[0]
    statement = error["statement"].split("\n")
    assert lines[at + 1] == f"{prefix} DETAIL:  {error['detail']}"
    assert lines[at + 2] == f"{prefix} STATEMENT:  {statement[0]}"
    assert lines[at + 3] == f"\t{statement[1]}"  # the statement goes on, unprefixed


def test_the_logging_collector_wrote_the_same_records_as_stderr_csvlog_and_jsonlog(real_logs):
    facts = real_logs.entry("inventory-db/postgresql.log")["facts"]
    assert len(facts["deadlocks"]) == 1 and facts["missing_database_client_error"].endswith("does not exist")
    stderr = read(real_logs.path("inventory-db/postgresql.log"))
    assert all(re.match(rf"^({PG_TIME} \[\d+\] |\t)", line) for line in stderr)  # PostgreSQL's default prefix
    with open(real_logs.path("inventory-db/postgresql.csv"), newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    records = [json.loads(line) for line in read(real_logs.path("inventory-db/postgresql.json"))]
    assert len(rows) == len(records) == sum(1 for line in stderr if not line.startswith("\t")
                                            and not re.search(r"\] (DETAIL|HINT|CONTEXT|STATEMENT):  ", line))
    for expected in facts["expected_records"]:
        in_json = [r for r in records if (r["error_severity"], r["message"]) == tuple(expected.values())]
        in_csv = [r for r in rows if (r[11], r[13]) == tuple(expected.values())]
        assert len(in_json) == len(in_csv) == 1, expected
        assert in_json[0]["pid"] == int(in_csv[0][3])
        assert f"[{in_json[0]['pid']}] {expected['error_severity']}:  {expected['message']}" in "\n".join(stderr)
    deadlock = next(r for r in records if r["message"] == "deadlock detected")
    assert deadlock["statement"] == facts["deadlocks"][0]["statement"]
    assert f"Process {deadlock['pid']} waits for ShareLock" in deadlock["detail"]


def _pri(priority: str) -> int:
    facility, level = priority.split(".")
    return getattr(syslog, f"LOG_{facility.upper()}") | getattr(syslog, f"LOG_{level.upper()}")


def test_rsyslog_wrote_every_message_in_both_formats(real_logs):
    host = socket.gethostname()
    protocol = read(real_logs.path("syslog5424.log"))
    sent = [m for phase in rsyslog_logs.PHASES for m in phase]
    assert len(protocol) == len(sent)
    for suffix, phase in zip((".2.gz", ".1", ""), rsyslog_logs.PHASES):
        entry = real_logs.entry(f"syslog{suffix}")
        assert entry["service"] is None and entry["software"].startswith("rsyslogd 8")
        traditional = read(real_logs.path(f"syslog{suffix}"))
        assert [m["text"] for m in entry["facts"]["messages"]] == [m.text for m in phase]
        for message, line in zip(phase, traditional, strict=True):
            match = RFC3164.match(line)
            assert match and match["host"] == host and match["tag"] == message.tag, line
            assert line.endswith(message.text) and match["pid"] == (str(message.pid) if message.pid else None)
    for message, line in zip(sent, protocol, strict=True):
        match = RFC5424.match(line)
        assert match and int(match["pri"]) == _pri(message.priority), line
        assert (match["host"], match["app"], match["msgid"]) == (host, message.tag, message.msgid or "-")
        assert line.endswith(message.text)
    stamps = [datetime.fromisoformat(RFC5424.match(line)["time"]) for line in protocol]
    assert stamps == sorted(stamps)


def test_the_application_logs_carry_their_traces_after_their_lines(real_logs):
    java = read(real_logs.path("inventory-service/inventory.log"))
    facts = real_logs.entry("inventory-service/inventory.log")["facts"]
    at = java.index(facts["severe_line"])
    assert java[at + 1] == facts["trace_first_line"] and java[at + 2].startswith("\tat Inventory.reserve(")
    assert facts["caused_by_line"] in java and any(line.startswith("\t... ") for line in java)
    python = read(real_logs.path("notification-service/worker.log"))
    facts = real_logs.entry("notification-service/worker.log")["facts"]
    at = python.index(facts["error_line"])
    assert python[at + 1] == "Traceback (most recent call last):" and facts["cause_line"] in python
    assert "" in python[at:] and python.index(facts["last_traceback_line"]) == len(python) - 2
    prometheus = read(real_logs.path("prometheus/prometheus.log"))
    assert all(re.match(r"^ts=\S+ caller=\S+ level=(debug|info|warn|error) ", line) for line in prometheus)
    assert real_logs.entry("prometheus/prometheus.log")["facts"]["error_line"] in prometheus


def test_docker_json_file_splits_a_long_line_as_the_driver_does(real_logs):
    [path] = [p for p, e in real_logs.manifest["files"].items() if p.endswith("-json.log")]
    entries = [json.loads(line) for line in read(real_logs.path(path))]
    assert all(list(entry) == ["log", "stream", "time"] for entry in entries)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d*[1-9])?Z", entry["time"]) for entry in entries)
    partial = [entry for entry in entries if not entry["log"].endswith("\n")]
    facts = real_logs.entry(path)["facts"]
    assert len(partial) == facts["partial_entries"] >= 2 and all(len(e["log"]) == 16384 for e in partial)
    at = entries.index(partial[0])
    joined = "".join(e["log"] for e in entries[at:at + len(partial) + 1])
    assert len(joined) == facts["long_line_chars"] + 1 and joined.endswith("\n")
    assert "\\u003ccard-processor\\u003e" in real_logs.path(path).read_text()


def test_kubernetes_files_are_laid_out_as_the_kubelet_does(real_logs):
    files = real_logs.manifest["files"]
    pods = [p for p in files if p.startswith("pods/")]
    links = [p for p in files if p.startswith("containers/")]
    assert len(links) == len(pods) == 3
    for path in pods:
        namespace, pod, uid = path.split("/")[1].split("_")
        assert (namespace, files[path]["facts"]["workload"]) == ("shop", "orders")
        assert re.fullmatch(r"orders-[0-9a-f]{10}-[0-9a-z]{5}", pod) and len(uid) == 36
        lines = read(real_logs.path(path))
        assert all(re.match(r"^\S+Z (stdout|stderr) [PF] ", line + " ") for line in lines)
        pieces = [line for line in lines if " P " in line[:45]]
        assert len(pieces) == files[path]["facts"]["partial_pieces"]
    for path in links:
        target = Path(os.readlink(real_logs.path(path)))
        assert target.is_absolute() and target == real_logs.path(files[path]["symlink_to"])
        pod, namespace, rest = Path(path).stem.split("_")
        assert namespace == "shop" and rest.startswith("orders-") and f"_{pod}_" in files[path]["symlink_to"]


def test_a_missing_program_names_its_debian_package():
    with pytest.raises(MissingSoftware, match="install Debian's no-such-package"):
        require("no-such-daemon", "no-such-package")


def test_the_fixture_fails_and_never_skips_when_a_program_is_missing(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(test_missing="""
        import tests.support.real_logs as writers
        from tests.support.log_software import require

        writers.WRITERS = (lambda root: require("no-such-daemon", "no-such-package"),)


        def test_asks_for_real_logs(real_logs):
            pass
    """)
    result = pytester.runpytest_subprocess("-p", "tests.support.real_logs_plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*install Debian's no-such-package*"])


def test_a_writer_that_fails_still_stops_its_daemon(tmp_path, monkeypatch):
    before = set(children(os.getpid()))
    monkeypatch.setattr(nginx_logs, "PHASES", ((("gateway", "GET", "/api/orders/1", 200),),))
    with pytest.raises(RuntimeError, match="nginx answered 502"):
        nginx_logs.write_nginx_logs(tmp_path / "nginx")
    monkeypatch.setattr(rsyslog_logs, "PHASES", ((rsyslog_logs.Message("x", "user.nosuchlevel", "never"),),))
    with pytest.raises(subprocess.CalledProcessError):
        rsyslog_logs.write_syslog(tmp_path / "rsyslog")
    assert set(children(os.getpid())) <= before

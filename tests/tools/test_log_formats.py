"""Logs as they are: each format SREs have read into time, level, service and message, lines that
belong together joined, rotated and compressed files read, every line searchable, and the service
of a line from the line or from its place. The samples follow each format's own documentation;
tests/support/real_logs.py has the same formats written by the real programs."""

import bz2
import gzip
import json
import os

import pytest

from tools import query_logs
from tools.catalog import active_catalog
from tools.functions import log_text
from tools.sources.errors import SourceError
from tools.sources.logs.formats import read_line
from tools.sources.logs.levels import http_level, normal_level, syslog_level
from tools.sources.logs.places import Places, workload


@pytest.mark.parametrize(("line", "expected"), [
    # nginx's and Apache's combined access log: the whole line is the message, the status the level.
    ('10.0.0.7 - - [01/Dec/2026:10:00:00 +0000] "GET /api/v1/users HTTP/1.1" 502 157 "-" "curl/7.88.1"',
     {"format": "access log", "level": "ERROR", "timestamp": "2026-12-01T10:00:00+00:00"}),
    ('10.0.0.7 - frank [01/Dec/2026:10:00:00 -0700] "GET /a.gif HTTP/1.0" 404 2326',
     {"format": "access log", "level": "WARN"}),
    ("2026/12/01 10:00:00 [error] 12#12: *1 connect() failed (111: Connection refused) while connecting to "
     'upstream, client: 127.0.0.1, server: _, request: "GET / HTTP/1.1", upstream: "http://127.0.0.1:9/"',
     {"format": "nginx error", "level": "ERROR", "message": "*1 connect() failed (111: Connection refused) while "
      'connecting to upstream, client: 127.0.0.1, server: _, request: "GET / HTTP/1.1", upstream: '
      '"http://127.0.0.1:9/"'}),
    ("2026/12/01 10:00:00 [crit] 7#7: *3 SSL_do_handshake() failed", {"format": "nginx error", "level": "ERROR"}),
    # PostgreSQL's stderr log with Debian's log_line_prefix '%m [%p] %q%u@%d '.
    ("2026-12-01 10:00:02.123 UTC [4242] FATAL:  sorry, too many clients already",
     {"format": "postgresql", "level": "ERROR", "message": "FATAL:  sorry, too many clients already"}),
    ("2026-12-01 10:00:03.001 UTC [4243] app@orders WARNING:  there is no transaction in progress",
     {"format": "postgresql", "level": "WARN", "fields": (("pid", "4243"), ("session", "app@orders"))}),
    # syslog: RFC 3164 as rsyslog's traditional file format writes it, and with RFC 3339 times.
    ("Dec  1 10:00:04 web1 payment-service[77]: charge failed: acquirer timeout",
     {"format": "syslog rfc3164", "service": "payment-service", "level": None,
      "message": "charge failed: acquirer timeout"}),
    ("2026-12-01T10:00:04.123456+00:00 web1 sshd[99]: Accepted publickey for deploy",
     {"format": "syslog rfc3164", "service": "sshd"}),
    # RFC 5424 section 6.5's examples, severity from PRI.
    ('<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut="3" '
     'eventSource="Application" eventID="1011"] An application event log entry...',
     {"format": "syslog rfc5424", "service": "evntslog", "level": "INFO", "message": "An application event log entry..."}),
    ("<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - 'su root' failed for lonvick on /dev/pts/8",
     {"format": "syslog rfc5424", "service": "su", "level": "ERROR"}),
    # logfmt, and JSON lines with the usual names, nested ones included.
    ('time=2026-12-01T10:00:05Z level=error msg="payment declined: card \\"expired\\"" service=payment-service order=123',
     {"format": "logfmt", "level": "ERROR", "service": "payment-service", "message": 'payment declined: card "expired"',
      "fields": (("order", "123"),)}),
    ('{"@timestamp":"2026-12-01T10:00:06Z","log":{"level":"warn"},"message":"slow","kubernetes":{"labels":{"app":"cart"}}}',
     {"format": "json", "level": "WARN", "service": "cart", "message": "slow"}),
    ('{"ts":1733047206.1,"lvl":"info","msg":"ok","app":"billing","latency_ms":12}',
     {"format": "json", "level": "INFO", "service": "billing", "fields": (("latency_ms", "12"),)}),
    # bunyan's and pino's numeric levels.
    ('{"level":50,"time":1733047206000,"msg":"db down","pid":7}', {"format": "json", "level": "ERROR"}),
    ('{"level":30,"time":1733047206000,"msg":"ok"}', {"format": "json", "level": "INFO"}),
    # PostgreSQL's jsonlog (PostgreSQL 15, "Using JSON-Format Log Output").
    ('{"timestamp":"2026-12-01 10:00:07.100 UTC","pid":4244,"error_severity":"FATAL","state_code":"53300",'
     '"message":"sorry, too many clients already","backend_type":"client backend"}',
     {"format": "json", "level": "ERROR", "message": "sorry, too many clients already"}),
    # Docker's json-file and Kubernetes CRI wrap another line, which is read in turn.
    ('{"log":"{\\"level\\":\\"error\\",\\"msg\\":\\"db down\\",\\"service\\":\\"orders\\"}\\n","stream":"stderr",'
     '"time":"2026-12-01T10:00:08.000000001Z"}',
     {"format": "docker json-file", "level": "ERROR", "service": "orders", "message": "db down"}),
    ("2026-12-01T10:00:09.123456789Z stdout F level=warn msg=\"retrying\"",
     {"format": "kubernetes cri", "level": "WARN", "message": "retrying"}),
    # The fixture world's text form is one more format.
    ("[10:21][WARN][api-gateway] upstream slow", {"format": "bracketed", "service": "api-gateway", "level": "WARN"}),
    # Anything else is text, searched as written, with its time and severity word where it has them.
    ("2026-12-01 10:00:06,001 ERROR [main] c.a.Foo - boom", {"format": "text", "level": "ERROR", "stamped": True}),
    ("just some words", {"format": "text", "level": None, "stamped": False}),
])
def test_each_format_reads_its_lines(line, expected):
    entry = read_line(line)
    # A runtime's entry is read as the line it wraps once its partial entries are joined; these are whole.
    entry = entry.unwrapped(entry.message) if entry.wrapped else entry
    assert {key: getattr(entry, key) for key in expected} == expected


def test_one_scale_of_levels_for_every_format():
    assert [normal_level(w) for w in ("FATAL", "panic", "crit", "Warning", "LOG", "notice", "debug3")] == [
        "ERROR", "ERROR", "ERROR", "WARN", "INFO", "INFO", "DEBUG"]
    assert [syslog_level(p) for p in (0, 3, 4, 5, 6, 7, 165)] == ["ERROR", "ERROR", "WARN", "INFO", "INFO", "DEBUG",
                                                                    "INFO"]
    assert [http_level(s) for s in (200, 304, 404, 499, 500, 503)] == ["INFO", "INFO", "WARN", "WARN", "ERROR", "ERROR"]
    assert normal_level("LOUD") is None


@pytest.mark.parametrize(("pod", "name"), [
    ("orders-7d9f8c6b5d-x2x4q", "orders"), ("node-exporter-8v7xz", "node-exporter"), ("postgres-0", "postgres"),
    ("payment-service-5c9d8f7b6-zt7wq", "payment-service"), ("api-gateway", "api-gateway"),
    # A word is never taken for a generated suffix: the alphabet has no vowels.
    ("web-service", "web-service"), ("cart-api-cache", "cart-api-cache"),
])
def test_a_pods_workload_is_its_name_less_what_kubernetes_generated(pod, name):
    assert workload(pod) == name


def test_a_files_service_comes_from_its_place():
    places = Places((("nginx/*", "api-gateway"),))
    assert places.of("nginx/access.log.2.gz").service == "api-gateway"
    assert places.of("orders-db/postgresql-15-main.log").service == "orders-db"
    assert places.of("pods/shop_orders-7d9f8c6b5d-x2x4q_0b1c2d3e-aaaa-bbbb-cccc-123456789abc/app/0.log").service == "orders"
    container = "containers/orders-7d9f8c6b5d-x2x4q_shop_app-" + "a" * 64 + ".log"
    assert places.of(container).service == "orders"
    # DIAGNOSIS_LOGS_DIR=/var/log/pods or /var/log/containers.
    assert places.of("shop_orders-7d9f8c6b5d-x2x4q_0b1c2d3e-aaaa-bbbb-cccc-123456789abc/app/0.log").service == "orders"
    assert (places.of(container.removeprefix("containers/")).service, places.of(container).shared) == ("orders", False)
    assert (places.of("syslog.2.gz").service, places.of("syslog.2.gz").shared) == ("syslog", True)
    assert places.of("api-gateway.log.1").service == "api-gateway"


def write(path, text, mode="w"):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_a_stack_trace_joins_the_line_it_follows(logs):
    write(logs / "orders" / "app.log", "2026-12-01 10:00:06,001 ERROR [main] c.a.Pool - borrow failed\n"
          "java.lang.IllegalStateException: pool closed\n\tat c.a.Pool.borrow(Pool.java:12)\n"
          "Caused by: java.net.ConnectException: Connection refused\n"
          "2026-12-01 10:00:07,001 INFO [main] c.a.Pool - recovered\n"
          "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad\n")
    (record,) = query_logs("Connection refused", service="orders")["logs"]
    assert record["level"] == "ERROR" and record["source"] == "orders/app.log:1"
    assert record["message"].startswith("2026-12-01 10:00:06,001 ERROR [main] c.a.Pool - borrow failed | java.lang.")
    (after,) = query_logs("ValueError", service="orders")["logs"]
    assert after["message"].startswith("2026-12-01 10:00:07,001 INFO") and after["level"] == "INFO"


def test_a_file_of_untimed_text_keeps_each_line_a_record(logs):
    write(logs / "batch" / "out.log", "starting\nConnection refused by db\ndone\n")
    assert [r["message"] for r in query_logs("connection refused", service="batch")["logs"]] == [
        "Connection refused by db"]


def test_postgresql_detail_and_statement_lines_join_their_message(logs):
    write(logs / "orders-db" / "postgresql.log",
          '2026-12-01 10:00:03.001 UTC [4243] app@orders ERROR:  relation "x" does not exist at character 15\n'
          "2026-12-01 10:00:03.001 UTC [4243] app@orders STATEMENT:  select *\n\tfrom x;\n")
    (record,) = query_logs("relation", service="orders-db")["logs"]
    assert record["message"] == ('ERROR:  relation "x" does not exist at character 15 | STATEMENT:  select * | '
                                 "\tfrom x;")


def test_a_postgresql_csvlog_row_may_span_lines(logs):
    row = ['2026-12-01 10:00:10.500 UTC', 'app', 'orders', '4245', '127.0.0.1:5000', '6720a.1', '1', 'SELECT',
           '2026-12-01 10:00:00 UTC', '3/7', '0', 'ERROR', '42601', 'syntax error at or near "fromm"', '', '', '', '',
           '', 'select *\nfromm x', '10', '', 'psql', 'client backend', '', '0']
    import csv
    import io
    buffer = io.StringIO()
    csv.writer(buffer).writerow(row)
    write(logs / "orders-db" / "postgresql.csv", buffer.getvalue())
    (record,) = query_logs("syntax error", service="orders-db")["logs"]
    assert (record["format"], record["level"]) == ("postgresql csvlog", "ERROR")
    assert ["query", "select *\nfromm x"] in record["fields"] and ["sql_state_code", "42601"] in record["fields"]


def test_docker_and_cri_partial_entries_are_one_message(logs):
    write(logs / "cart" / "container.log", json.dumps({"log": "first half ", "stream": "stderr",
                                                         "time": "2026-12-01T10:00:08.1Z"}) + "\n"
          + json.dumps({"log": "second half\n", "stream": "stderr", "time": "2026-12-01T10:00:08.2Z"}) + "\n")
    write(logs / "pods" / "shop_orders-7d9f8c6b5d-x2x4q_0b1c2d3e-aaaa-bbbb-cccc-123456789abc" / "app" / "0.log",
          "2026-12-01T10:00:09.1Z stderr P level=error msg=\"disk \n"
          "2026-12-01T10:00:09.2Z stderr F full\"\n")
    (docker,) = query_logs("half", service="cart")["logs"]
    assert docker["message"] == "first half second half"
    (cri,) = query_logs("disk", service="orders")["logs"]
    assert (cri["message"], cri["level"]) == ("disk full", "ERROR")


def test_rotated_and_compressed_files_are_read_and_what_cannot_be_opened_is_named(logs):
    write(logs / "api" / "access.log", '10.0.0.1 - - [01/Dec/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 5 "-" "c"\n')
    write(logs / "api" / "access.log.1", '10.0.0.1 - - [30/Nov/2026:10:00:00 +0000] "GET /old HTTP/1.1" 503 5 "-" "c"\n')
    write(logs / "api" / "access.log.2.gz", gzip.compress(
        b'10.0.0.1 - - [29/Nov/2026:10:00:00 +0000] "GET /older HTTP/1.1" 504 5 "-" "c"\n'))
    write(logs / "api" / "access.log.3.bz2", bz2.compress(
        b'10.0.0.1 - - [28/Nov/2026:10:00:00 +0000] "GET /oldest HTTP/1.1" 500 5 "-" "c"\n'))
    write(logs / "api" / "access.log.4.zst", b"\x28\xb5\x2f\xfd" + b"\x00" * 20)
    found = query_logs("GET", service="api", level="ERROR")
    assert sorted(r["message"].split('"')[1] for r in found["logs"]) == ["GET /old HTTP/1.1", "GET /older HTTP/1.1",
                                                                         "GET /oldest HTTP/1.1"]
    assert found["unread"] == ["api/access.log.4.zst (compressed with zstd, which cannot be opened here)"]


def test_a_file_that_cannot_be_read_may_hold_any_services_lines(logs):
    write(logs / "api" / "app.log", "[2026-12-01 10:00:00][INFO][api] ok\n")
    write(logs / "journal" / "system.journal", b"LPKSHHRH\x00\x00\x01" * 100)
    # A journal holds the lines of every service that logs to it: no search has read all of its own.
    assert query_logs("timeout", service="api")["unread"] == ["journal/system.journal (binary, not text)"]
    assert query_logs("timeout")["unread"] == ["journal/system.journal (binary, not text)"]
    write(logs / "wtmp", b"\x00\x01" * 100)
    # A file directly under the root may hold any service's lines.
    assert "wtmp (binary, not text)" in query_logs("timeout", service="api")["unread"]


def test_a_shared_files_line_that_names_no_service_may_be_any_services(logs):
    write(logs / "syslog", "Dec  1 23:55:38 vm payment-service[4711]: charge failed for order 1042\n"
          "Dec  1 23:55:38 vm order-service order 1042 stuck in PENDING_PAYMENT\n")
    found = query_logs("order 1042", service="order-service")
    assert [r["message"] for r in found["logs"]] == ["Dec  1 23:55:38 vm order-service order 1042 stuck in PENDING_PAYMENT"]
    assert found["logs"][0]["service_from"] == "file"
    # A line that names its own service is that service's only.
    assert query_logs("charge failed", service="order-service")["total"] == 0


def test_a_level_filter_keeps_the_lines_whose_format_gives_no_level(logs):
    write(logs / "syslog", "Dec  1 10:00:04 web1 payment-service[77]: charge failed: acquirer timeout\n")
    write(logs / "payment-service" / "app.log", "[2026-12-01 10:00:00][INFO][payment-service] charge ok\n")
    found = query_logs("charge", service="payment-service", level="ERROR")
    assert [r["message"] for r in found["logs"]] == ["charge failed: acquirer timeout"]
    assert log_text(found["logs"][0]) == "[Dec  1 10:00:04][-][payment-service] charge failed: acquirer timeout; host=web1, procid=77"


def test_errors_mean_the_same_thing_in_every_format(logs):
    write(logs / "api-gateway" / "access.log",
          '10.0.0.1 - - [01/Dec/2026:10:00:00 +0000] "GET /u HTTP/1.1" 502 5 "-" "c"\n'
          '10.0.0.1 - - [01/Dec/2026:10:00:01 +0000] "GET /u HTTP/1.1" 200 5 "-" "c"\n')
    write(logs / "orders-db" / "postgresql.log", "2026-12-01 10:00:02.123 UTC [4242] FATAL:  sorry, too many clients already\n")
    assert query_logs("errors", service="api-gateway")["total"] == 1
    assert query_logs("", service="orders-db", level="ERROR")["total"] == 1


def test_a_mapping_file_names_the_service_of_a_place(logs, tmp_path, monkeypatch):
    write(logs / "nginx" / "error.log", "2026/12/01 10:00:00 [error] 12#12: *1 connect() failed (111: Connection "
          "refused) while connecting to upstream\n")
    mapping = write(tmp_path / "sources.toml", '[services]\n"nginx/*" = "api-gateway"\n')
    monkeypatch.setenv("DIAGNOSIS_LOG_SOURCES", str(mapping))
    assert query_logs("connection refused", service="api-gateway")["total"] == 1
    assert "api-gateway" in active_catalog().services and "nginx" not in active_catalog().services


@pytest.mark.parametrize(("text", "error"), [
    ("[services]\n\"nginx/*\" = 3\n", "the service of 'nginx/*' must be a name"),
    ("services = 1\n", "must hold one [services] table"),
    ("[services\n", "is not TOML"),
])
def test_a_mapping_file_that_cannot_be_used_fails_every_log_call_by_name(logs, tmp_path, monkeypatch, text, error):
    write(logs / "a" / "x.log", "x\n")
    monkeypatch.setenv("DIAGNOSIS_LOG_SOURCES", str(write(tmp_path / "sources.toml", text)))
    result = query_logs("x")
    assert result["success"] is False and error in result["error"]


@pytest.mark.parametrize("value", ["0", "-5", "lots", "64X"])
def test_a_read_bound_that_cannot_be_used_fails_by_name(logs, monkeypatch, value):
    write(logs / "a" / "x.log", "x\n")
    monkeypatch.setenv("DIAGNOSIS_LOGS_MAX_BYTES", value)
    result = query_logs("x")
    assert result["success"] is False and "DIAGNOSIS_LOGS_MAX_BYTES must be a positive size" in result["error"]


def test_the_read_bound_takes_units(logs, monkeypatch):
    write(logs / "a" / "x.log", "hello\n")
    for value in ("64M", "1G", "512k", "1048576"):
        monkeypatch.setenv("DIAGNOSIS_LOGS_MAX_BYTES", value)
        assert query_logs("hello")["total"] == 1


def test_a_search_reads_its_scope_first(logs, monkeypatch):
    own = "[2026-12-01 09:00:00][ERROR][orders] HikariCP exhausted\n"
    write(logs / "other" / "app.log", "[2026-12-01 10:00:00][ERROR][other] HikariCP exhausted\n" * 4)
    write(logs / "orders" / "app.log", own)
    os.utime(logs / "orders" / "app.log", (1, 1))
    monkeypatch.setenv("DIAGNOSIS_LOGS_MAX_BYTES", str(len(own)))
    found = query_logs("HikariCP", service="orders")
    # The asked service's file is read first although it is older; the other's, which the bound left
    # out, may hold lines that name orders, so the search says it did not read it.
    assert found["total"] == 1 and found["unread"] == [f"other/app.log (past the {len(own)} bytes a search reads)"]
    with pytest.raises(SourceError):
        Places.from_file(str(logs / "nowhere.toml"))

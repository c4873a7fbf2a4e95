"""A search that reports itself complete (nothing in `unread`) misses no line that exists in its
scope, and a search that could not read part of its scope says so. Each case here is a way a line
was once missed while the search said it had read everything: a line filed under another service,
a directory the walk could not open, a file rotated between the listing and the read, records
joined or split wrongly so that words or levels landed in another record, a csvlog row the csv
reader refused, and characters that hide a word from the search but not from a reader."""

import csv
import io
import json
import os
import tempfile
from pathlib import Path

import pytest

from tools import query_logs
from tools.functions import log_text
from tools.sources.files import Listing
from tools.sources.logs import directory
from tests.support.unprivileged import open_directory, unprivileged


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def search(query, **arguments):
    result = query_logs(query, limit=200, **arguments)
    assert result["success"], result
    return result


def complete(query, **arguments):
    result = search(query, **arguments)
    assert result["unread"] == [], result["unread"]
    return result


# A line that names a logger, a program or another spelling of its service stays a line of the
# service whose place holds it.
@pytest.mark.parametrize(("path", "line", "query"), [
    ("payment-service/app.json",
     json.dumps({"time": "2026-12-01T10:00:00Z", "level": "error", "logger": "app.payments", "msg": "charge declined"}),
     "charge declined"),
    ("payment-service/0123abcd-json.log",
     json.dumps({"log": json.dumps({"level": "error", "logger": "com.acme.Charge", "msg": "gateway timeout"}) + "\n",
                 "stream": "stdout", "time": "2026-12-01T10:00:01Z"}),
     "gateway timeout"),
    ("payment-service/syslog.log", "Dec  1 10:00:04 web1 nginx[77]: upstream refused the charge", "upstream refused"),
    ("payment-service/app.json",
     json.dumps({"time": "2026-12-01T10:00:00Z", "level": "error", "service": "Payment-Service", "msg": "card expired"}),
     "card expired"),
])
def test_a_line_that_names_another_service_is_still_a_line_of_its_place(logs, path, line, query):
    write(logs / path, line + "\n")
    (found,) = complete(query, service="payment-service")["logs"]
    # The ref names the place's service too (in any case), so a claim about payment-service can cite it.
    assert "payment-service" in log_text(found).casefold()
    assert complete(query, service="payment-service", level="ERROR")["total"] == 1


def test_a_service_is_matched_as_a_name_not_as_bytes(logs):
    write(logs / "syslog", "Dec  1 10:00:04 web1 Payment-Service[77]: charge failed: acquirer timeout\n"
          "Dec  1 10:00:05 web1 ｐａｙｍｅｎｔ-service[77]: charge failed: card expired\n")
    assert complete("charge failed", service="payment-service")["total"] == 2
    assert complete("charge failed", service="PAYMENT-SERVICE")["total"] == 2


def test_a_file_the_bound_left_out_may_hold_lines_that_name_the_service(logs, monkeypatch):
    # Lines relayed from other hosts sit under the relay's directory and name their own program.
    write(logs / "syslog", "Dec  1 10:00:00 web1 nginx[7]: worker started\n")
    write(logs / "remote" / "web2.log", "Dec  1 10:00:01 web2 nginx[8]: upstream refused the connection\n")
    write(logs / "orders" / "app.log", "2026-12-01 10:00:02 INFO order placed\n" * 20)
    os.utime(logs / "remote" / "web2.log", (1, 1))
    monkeypatch.setenv("DIAGNOSIS_LOGS_MAX_BYTES", str(200))
    found = search("upstream refused", service="nginx")
    assert found["total"] == 0
    assert any(place.startswith("remote/web2.log") for place in found["unread"]), found["unread"]


def test_a_file_read_whole_whose_lines_name_other_services_is_no_part_of_a_search_for_this_one(logs, monkeypatch):
    relay = write(logs / "remote" / "web2.log", "Dec  1 10:00:01 web2 nginx[8]: upstream refused the connection\n")
    line = "2026-12-01 10:00:02 INFO order placed\n"
    orders = write(logs / "orders" / "app.log", line)
    monkeypatch.setenv("DIAGNOSIS_LOGS_MAX_BYTES", str(relay.stat().st_size + 3 * len(line) - 1))
    assert complete("upstream refused")["total"] == 1
    # Once read, the relay's file is known to hold nginx's lines only, so a search for orders, which
    # its bound no longer lets read both files, need not read it.
    write(orders, line * 3)
    assert complete("order placed", service="orders")["total"] == 3
    # And the orders file as it is now, which that search read whole, names no nginx.
    assert complete("upstream refused", service="nginx")["total"] == 1
    # A file that changed since it was read whole may name anyone: past the bound, it is unread.
    write(orders, line * 4)
    assert "orders/app.log" in " ".join(search("upstream refused", service="nginx")["unread"])


def test_a_directory_the_walk_cannot_open_is_unread_and_named():
    with open_directory() as root:
        write(root / "orders" / "app.log", "2026-12-01 10:00:00 INFO order placed\n")
        write(root / "orders" / "archive" / "app.log.1", "2026-12-01 09:00:00 ERROR order stuck in queue\n")
        (root / "orders" / "archive").chmod(0)
        os.environ["DIAGNOSIS_LOGS_DIR"] = str(root)
        try:
            search("order placed")  # warms the search's own imports
            with unprivileged():
                found = query_logs("order stuck", service="orders")
        finally:
            del os.environ["DIAGNOSIS_LOGS_DIR"]
    assert found["success"] and found["total"] == 0
    assert any(place.startswith("orders/archive (cannot be listed: Permission denied") for place in found["unread"]), \
        found["unread"]
    assert "orders/archive (cannot be listed: Permission denied)" in found["message"]


def test_a_deep_tree_is_walked_to_its_end(monkeypatch):
    # Deeper than Python's recursion limit (pathlib's glob and shutil.rmtree recurse), within the
    # kernel's 4096 bytes of path. Not under pytest's temp dirs, which rmtree cleans.
    root = Path(tempfile.mkdtemp(prefix="gd-deep-"))
    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(root))
    deep = root / "batch"
    deep.mkdir()
    for _ in range(1200):
        deep = deep / "d"
        os.mkdir(deep)
    (deep / "job.log").write_text("2026-12-01 10:00:00 ERROR abyss reached\n", encoding="utf-8")
    try:
        assert complete("abyss", service="batch")["total"] == 1
    finally:
        (deep / "job.log").unlink()
        while deep != root.parent:
            deep.rmdir()
            deep = deep.parent


def test_a_link_to_a_directory_inside_the_root_is_a_second_name_and_a_loop_ends(logs):
    write(logs / "orders" / "app.log", "2026-12-01 10:00:00 ERROR order stuck\n")
    (logs / "current").symlink_to(logs / "orders", target_is_directory=True)
    (logs / "orders" / "loop").symlink_to(logs, target_is_directory=True)
    found = complete("order stuck")
    assert found["total"] == 1 and found["skipped_files"] == 0


def _rotate_after_listing(monkeypatch, rotate):
    """The listing a search makes is followed, once, by `rotate`: the file changes before it is read."""
    listed = directory.regular_files
    done = []

    def racing(*arguments, **options):
        listing = listed(*arguments, **options)
        if not done:
            done.append(True)
            rotate()
        return listing

    monkeypatch.setattr(directory, "regular_files", racing)


def _renamed(log):
    os.rename(log, log.with_name("app.log.1"))
    write(log, "2026-12-01 10:01:00 INFO fresh file\n")


def _copied_and_truncated(log):
    write(log.with_name("app.log.1"), log.read_bytes())
    with open(log, "r+b") as handle:
        handle.truncate(0)


def _compressed(log):
    import gzip
    write(log.with_name("app.log.1.gz"), gzip.compress(log.read_bytes()))
    log.unlink()


def _directory_made_a_file(log):
    for path in log.parent.iterdir():
        path.unlink()
    log.parent.rmdir()
    write(log.parent, "2026-12-01 10:01:00 ERROR upstream exploded again\n")


@pytest.mark.parametrize("rotate", [_renamed, _copied_and_truncated, _compressed, _directory_made_a_file])
def test_a_file_rotated_between_the_listing_and_the_read_is_still_read(logs, monkeypatch, rotate):
    log = write(logs / "web" / "app.log", "2026-12-01 10:00:00 ERROR upstream exploded\n")
    _rotate_after_listing(monkeypatch, lambda: rotate(log))
    found = search("upstream exploded")
    assert found["total"] >= 1 and found["unread"] == [], found


def test_lines_that_end_in_a_carriage_return_alone_are_lines(logs):
    write(logs / "svc" / "old-mac.log", b"2026-12-01 10:00:00 INFO started\r2026-12-01 10:00:01 ERROR disk quota "
          b"exceeded\r2026-12-01 10:00:02 INFO ok\r")
    (found,) = complete("disk quota", service="svc", level="ERROR")["logs"]
    assert found["message"] == "2026-12-01 10:00:01 ERROR disk quota exceeded"


def test_a_runtimes_partial_entries_join_within_their_own_stream(logs):
    write(logs / "pods" / "shop_orders-7d9f8c6b5d-x2x4q_0b1c2d3e-aaaa-bbbb-cccc-123456789abc" / "app" / "0.log",
          "2026-12-01T10:00:00.1Z stdout P payment declined for ord\n"
          "2026-12-01T10:00:00.2Z stderr F level=warn msg=\"unrelated noise\"\n"
          "2026-12-01T10:00:00.3Z stdout F er 4242 by the bank\n")
    docker = [{"log": "refund failed for ord", "stream": "stdout", "time": "2026-12-01T10:00:01.1Z"},
              {"log": "unrelated noise\n", "stream": "stderr", "time": "2026-12-01T10:00:01.2Z"},
              {"log": "er 4343 by the bank\n", "stream": "stdout", "time": "2026-12-01T10:00:01.3Z"}]
    write(logs / "cart" / "0123abcd-json.log", "".join(json.dumps(entry) + "\n" for entry in docker))
    (cri,) = complete("payment declined order 4242", service="orders")["logs"]
    assert cri["message"] == "payment declined for order 4242 by the bank"
    (noise,) = complete("unrelated noise", service="orders")["logs"]
    assert noise["level"] == "WARN"
    (json_file,) = complete("refund failed order 4343", service="cart")["logs"]
    assert json_file["message"] == "refund failed for order 4343 by the bank"


def test_a_postgresql_detail_joins_the_message_of_its_own_process(logs):
    write(logs / "orders-db" / "postgresql.log",
          '2026-12-01 10:00:00.001 UTC [101] ERROR:  duplicate key value violates unique constraint "orders_pkey"\n'
          "2026-12-01 10:00:00.002 UTC [202] LOG:  checkpoint starting: time\n"
          "2026-12-01 10:00:00.003 UTC [101] DETAIL:  Key (id)=(42) already exists.\n")
    (found,) = complete("duplicate key 42", service="orders-db", level="ERROR")["logs"]
    assert found["message"] == ('ERROR:  duplicate key value violates unique constraint "orders_pkey" | '
                                "DETAIL:  Key (id)=(42) already exists.")
    (checkpoint,) = complete("checkpoint", service="orders-db")["logs"]
    assert checkpoint["message"] == "LOG:  checkpoint starting: time"


def test_text_after_a_structured_record_is_a_record_of_its_own(logs):
    # A Go program that logs JSON panics in plain text on the same stream.
    write(logs / "api" / "app.log", '{"time":"2026-12-01T10:00:00Z","level":"info","msg":"serving"}\n'
          "panic: runtime error: invalid memory address or nil pointer dereference\n"
          "goroutine 1 [running]:\n\tmain.main()\n")
    (found,) = complete("panic", service="api", level="ERROR")["logs"]
    assert found["message"].startswith("panic: runtime error") and found["message"].endswith("\tmain.main()")
    assert [r["message"] for r in complete("serving", service="api")["logs"]] == ["serving"]


def test_a_joined_line_of_its_own_level_is_kept_by_that_level(logs):
    write(logs / "api" / "app.log", "2026-12-01 10:00:00,001 INFO [main] starting on :8080\n"
          "ERROR: cannot bind port 8080: address already in use\n")
    (found,) = complete("bind port", service="api", level="ERROR")["logs"]
    assert "cannot bind port 8080" in found["message"]


def _csv_rows(*rows):
    buffer = io.StringIO()
    for message, query in rows:
        csv.writer(buffer).writerow([
            "2026-12-01 10:00:00.123 UTC", "app", "shop", "123", "[local]", "abc.1", "1", "SELECT",
            "2026-12-01 10:00:00 UTC", "3/4", "0", "ERROR", "42P01", message, "", "", "", "", "", query, "8", "",
            "psql", "client backend", "", ""])
    return buffer.getvalue()


def test_a_csvlog_row_of_any_length_is_read_and_a_broken_row_is_still_searched(logs):
    text = _csv_rows(("first row", "SELECT 1"), ("huge statement failed", "SELECT " + "x" * 200_000),
                     ("after the huge one", "SELECT 2"))
    write(logs / "orders-db" / "postgresql.csv", text + '2026-12-01 10:00:01.000 UTC,"app,"broken row\n'
          + _csv_rows(("last row", "SELECT 3")))
    for query in ("first row", "huge statement", "after the huge one", "broken row", "last row"):
        assert complete(query, service="orders-db")["total"] == 1, query
    assert {r["format"] for r in complete("row", service="orders-db")["logs"]} >= {"postgresql csvlog"}


@pytest.mark.parametrize("hidden", ["\u200b", "\u00ad", "\u2060", "\ufeff", "\u200d", "\u200c", "\u180e"])
def test_a_character_no_reader_sees_does_not_hide_a_word(logs, hidden):
    write(logs / "api" / "app.log", f"2026-12-01 10:00:00 ERROR connection {hidden.join('refused')} by upstream\n")
    assert complete("connection refused", service="api")["total"] == 1


def test_a_file_that_begins_inside_a_stack_trace_still_joins_the_traces_after(logs):
    # A file rotated in the middle of a trace begins with the trace's last frames.
    write(logs / "orders" / "app.log", "\tat c.a.Pool.close(Pool.java:80)\n\tat c.a.Main.main(Main.java:3)\n"
          "2026-12-01 10:00:06,001 ERROR [main] c.a.Pool - borrow failed\n"
          "java.lang.IllegalStateException: pool closed\n\tat c.a.Pool.borrow(Pool.java:12)\n")
    (found,) = complete("borrow failed IllegalStateException", service="orders")["logs"]
    assert found["message"].startswith("2026-12-01 10:00:06,001 ERROR [main] c.a.Pool - borrow failed | java.lang.")


def test_the_filtered_service_named_in_the_query_asks_no_more_of_a_line(logs):
    # A line of a file of many services' lines that names no service is any service's; the query's
    # "payment-service" says what the filter says, and must not require the name in the line.
    write(logs / "payment-service" / "app.log", "2026-12-01 10:00:00 INFO charge ok\n")
    write(logs / "app.log", "2026-12-01 10:00:01 ERROR acquirer timeout on charge\n")
    found = complete("payment-service acquirer timeout", service="payment-service")
    assert [r["message"] for r in found["logs"]] == ["2026-12-01 10:00:01 ERROR acquirer timeout on charge"]
    assert complete("Payment-Service acquirer timeout", service="payment-service")["total"] == 1


def test_a_directory_swapped_for_a_link_out_after_the_listing_is_never_read_through(logs, tmp_path, monkeypatch):
    # A writer of the log directory swaps web/ for a link to a directory outside it, even while the
    # listing stats the file, so that the listing's own stat already saw the outside file.
    write(logs / "web" / "app.log", "2026-12-01 10:00:00 INFO ok\n")
    secret = write(tmp_path / "elsewhere" / "app.log", "root:secret-hash\n")
    listed = directory.regular_files

    def swapped(*arguments, **options):
        listing = listed(*arguments, **options)
        if (logs / "web").is_dir() and not (logs / "web").is_symlink():
            (logs / "web" / "app.log").unlink()
            (logs / "web").rmdir()
            (logs / "web").symlink_to(secret.parent, target_is_directory=True)
        files = tuple((name, path, os.stat(path) if name == "web/app.log" else status)
                      for name, path, status in listing.files)
        return Listing(files=files, skipped=listing.skipped, skipped_names=listing.skipped_names,
                       aliases=listing.aliases)

    monkeypatch.setattr(directory, "regular_files", swapped)
    found = query_logs("secret")
    assert found["success"] is False or found["total"] == 0
    assert "secret-hash" not in json.dumps(found)


def test_a_message_in_thousands_of_partial_entries_is_one_message(logs):
    pod = logs / "pods" / "shop_orders-7d9f8c6b5d-x2x4q_0b1c2d3e-aaaa-bbbb-cccc-123456789abc" / "app"
    write(pod / "0.log", "".join(f"2026-12-01T10:00:00.1Z stdout P chunk{n:05d} \n" for n in range(5_000))
          + "2026-12-01T10:00:00.2Z stderr F level=warn msg=\"meanwhile\"\n"
          + "2026-12-01T10:00:00.3Z stdout F needle at the end\n")
    (found,) = complete("chunk00000 needle", service="orders")["logs"]
    assert found["source"].endswith("/0.log:1") and found["message"].startswith("chunk00000 chunk00001 ")
    assert complete("meanwhile", service="orders")["total"] == 1


def test_a_json_line_nested_deeper_than_python_reads_is_text_and_the_others_are_read(logs):
    deep = '{"level":"error","msg":"deep one","x":' + '{"a":' * 5000 + "1" + "}" * 5000 + "}"
    write(logs / "api" / "app.json", deep + '\n{"level":"error","msg":"normal line"}\n')
    assert [r["message"] for r in complete("normal line", service="api")["logs"]] == ["normal line"]
    (found,) = complete("deep one", service="api")["logs"]
    assert found["format"] == "text" and found["message"].startswith('{"level":"error","msg":"deep one"')

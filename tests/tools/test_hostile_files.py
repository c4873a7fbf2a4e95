"""Log and runbook directories with files a source must not read whole or at all: fifos, links out,
directories named like files, text that is not UTF-8, empty or symbol-only runbooks, lines and
files beyond the caps (tools/sources/limits.py). One bad file costs only itself, named in the
message; what is read is cut where marked and said so."""

import os
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from tools import lookup_knowledge, query_logs
from tools.catalog import active_catalog
from tools.functions import log_text
from tools.sources.limits import MAX_ITEM_CHARS, MAX_REF_CHARS

HIKARI = "[2026-11-30 10:01:02][ERROR][order-service] HikariPool-1 - Connection is not available\n"
KAFKA = "# Kafka\n\n## Consumer lag\nCheck consumer group lag per partition.\n"


@contextmanager
def fifo(path: Path, content: str):
    """A fifo that hands `content` to whoever opens it to read, so that code which opens it reads
    the content (and a test can see that it did) instead of blocking the test forever."""
    os.mkfifo(path)
    stop = threading.Event()

    def feed():
        while not stop.is_set():
            try:
                descriptor = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # nobody has it open to read
                stop.wait(0.01)
                continue
            try:
                os.write(descriptor, content.encode())
            except OSError:
                pass
            finally:
                os.close(descriptor)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        yield path
    finally:
        stop.set()
        feeder.join()


@pytest.fixture
def logs(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    (root / "order").mkdir(parents=True)
    (root / "order" / "app.log").write_text(HIKARI, encoding="utf-8")
    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(root))
    return root


def test_a_log_directory_reads_only_the_regular_files_inside_it(logs, tmp_path):
    outside = tmp_path / "elsewhere.log"
    outside.write_text("[2026-11-30 10:00:00][ERROR][secret-service] HikariCP secret\n", encoding="utf-8")
    (logs / "out.log").symlink_to(outside)
    (logs / "dir.log").mkdir()
    (logs / "dir.log" / "inner.log").write_text("[2026-11-30 10:00:01][ERROR][inner-service] HikariCP inner\n",
                                                encoding="utf-8")
    (logs / "again.log").symlink_to(logs / "order" / "app.log")
    (logs / "gone.log").symlink_to(logs / "nowhere.log")
    with fifo(logs / "pipe.log", "[2026-11-30 10:00:00][ERROR][fifo-service] HikariCP from the fifo\n"):
        services = active_catalog().services
        found = query_logs("HikariCP")
    assert "secret-service" not in services and "fifo-service" not in services
    # A directory named like a file is walked like any other.
    assert found["success"] and sorted(log["service"] for log in found["logs"]) == ["inner-service", "order-service"]
    assert found["skipped_files"] == 3
    for skipped in ("pipe.log (a fifo, not a regular file)", f"out.log (a link to {outside}, outside {logs})",
                    "gone.log (cannot be resolved"):
        assert skipped in found["message"]
        assert any(place.startswith(skipped) for place in found["unread"])
    assert "3 file(s) were not read" in found["message"]
    # A second name of a file that was read (as Kubernetes links container logs) is no unread file.
    assert not any("again.log" in place for place in found["unread"]) and len(found["logs"]) == 2


def test_a_log_directory_of_nothing_readable_fails_and_says_why(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    root.mkdir()
    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(root))
    with fifo(root / "pipe.log", "[2026-11-30 10:00:00][ERROR][fifo-service] HikariCP from the fifo\n"):
        result = query_logs("HikariCP")
        problems = active_catalog().problems
    assert result["success"] is False and "no log file under" in result["error"] and "pipe.log (a fifo" in result["error"]
    assert problems and problems[0].startswith("logs: no log file under")


def test_a_line_that_is_not_utf8_is_still_read(logs):
    (logs / "latin.log").write_bytes("[2026-11-30 10:05:00][ERROR][order-service] café machine down\n"
                                     "[2026-11-30 10:06:00][ERROR][order-service] espresso machine down\n"
                                     .encode("latin-1"))
    found = query_logs("machine down")
    assert [log["message"] for log in found["logs"]] == ["caf\ufffd machine down", "espresso machine down"]
    assert found["unread"] == []


def test_a_long_line_is_shown_cut_where_marked_and_searched_whole(logs):
    with (logs / "order" / "app.log").open("a", encoding="utf-8") as handle:
        handle.write("[2026-11-30 10:02:00][ERROR][order-service] " + "overflow " * 600_000 + "needle\n")
    found = query_logs("overflow")
    (log,) = found["logs"]
    assert log["message"].endswith(f" …[cut: {len('overflow ' * 600_000 + 'needle') - MAX_ITEM_CHARS} more characters]")
    assert len(log["message"]) < MAX_ITEM_CHARS + 50 and len(log_text(log)) <= MAX_REF_CHARS + 50
    assert f"1 line(s) longer than {MAX_ITEM_CHARS} characters are shown cut where marked" in found["message"]
    assert "order/app.log:2" in found["message"]
    assert query_logs("needle")["total"] == 1 and found["unread"] == []


def test_a_log_file_over_the_bound_is_read_from_its_newest_lines_and_the_rest_is_unread(logs, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_LOGS_MAX_BYTES", "2000")
    lines = [f"[2026-11-30 11:{n // 60:02d}:{n % 60:02d}][INFO][batch-service] event {n:03d} done\n" for n in range(200)]
    (logs / "batch.log").write_text("".join(lines), encoding="utf-8")
    found = query_logs("event", service="batch-service", limit=200)
    numbers = [int(log["message"].split()[1]) for log in found["logs"]]
    assert numbers[-1] == 199 and 0 < len(numbers) < 2000 // 50 and numbers == list(range(numbers[0], 200))
    assert "batch.log: only its last 2000 bytes were read" in found["message"]
    assert "batch.log: only its last 2000 bytes were read" in found["unread"]


def test_a_search_reads_at_most_its_bound_newest_file_first(logs, monkeypatch):
    late = "[2026-11-30 10:09:00][ERROR][z-service] HikariCP late\n"
    monkeypatch.setenv("DIAGNOSIS_LOGS_MAX_BYTES", str(len(late)))
    (logs / "z.log").write_text(late, encoding="utf-8")
    os.utime(logs / "order" / "app.log", (1, 1))
    found = query_logs("HikariCP")
    assert [log["service"] for log in found["logs"]] == ["z-service"]
    assert f"order/app.log (past the {len(late)} bytes a search reads)" in found["unread"]


@pytest.fixture
def books(tmp_path, monkeypatch):
    root = tmp_path / "runbooks"
    root.mkdir()
    (root / "kafka.md").write_text(KAFKA, encoding="utf-8")
    monkeypatch.setenv("DIAGNOSIS_RUNBOOKS_DIR", str(root))
    return root


def test_one_bad_runbook_costs_only_itself_and_is_named(books, tmp_path):
    (books / "latin.md").write_bytes("# Café\n\n## Consumer lag espresso\nDescale the café machine.\n".encode("latin-1"))
    (books / "empty.md").write_text("", encoding="utf-8")
    (books / "symbols.md").write_text("# ***\n\n## !!!\n@@@ ### $$$\n", encoding="utf-8")
    (books / "notes.md").mkdir()
    (tmp_path / "secret.md").write_text("# Secret\n\n## Consumer lag\nconsumer lag outside\n", encoding="utf-8")
    (books / "out.md").symlink_to(tmp_path / "secret.md")
    with fifo(books / "pipe.md", "# Fifo\n\n## Consumer lag\nconsumer lag from a fifo\n"):
        found = lookup_knowledge("consumer lag")
    assert found["success"] and [b["source"] for b in found["evidence_blocks"]] == ["runbooks/kafka.md#consumer-lag"]
    assert found["skipped_files"] == 5 and "5 runbook file(s) were not indexed" in found["message"]
    for skipped in ("latin.md (not UTF-8 (byte 0xe9 at offset 5))", "empty.md (no '## ' sections with text)",
                    "notes.md (a directory, not a regular file)", "out.md (a link to", "pipe.md (a fifo"):
        assert skipped in found["message"]
    assert "1 section(s) have no word to index and were left out: runbooks/symbols.md#" in found["message"]


@pytest.mark.parametrize(("text", "error"), [
    ("# ***\n\n## !!!\n@@@ ### $$$\n", "no runbook section has a word to index: runbooks/symbols.md#"),
    ("", "no runbook could be used: symbols.md (no '## ' sections with text)"),
])
def test_a_runbook_directory_with_nothing_to_rank_fails_and_says_why(tmp_path, monkeypatch, text, error):
    root = tmp_path / "runbooks"
    root.mkdir()
    (root / "symbols.md").write_text(text, encoding="utf-8")
    monkeypatch.setenv("DIAGNOSIS_RUNBOOKS_DIR", str(root))
    result = lookup_knowledge("consumer lag")
    assert result["success"] is False and error in result["error"] and str(root) in result["error"]


def test_a_long_runbook_section_is_cut_where_marked_and_the_message_says_so(books):
    (books / "long.md").write_text("# Long\n\n## Rebalance storm\n" + "rebalance " * 10_000 + "\n", encoding="utf-8")
    found = lookup_knowledge("rebalance storm")
    block = found["evidence_blocks"][0]
    assert block["source"] == "runbooks/long.md#rebalance-storm"
    assert block["content"].endswith(" more characters]") and len(block["content"]) < MAX_ITEM_CHARS + 50
    assert (f"1 section(s) longer than {MAX_ITEM_CHARS} characters were cut where marked and ranked only that far "
            "(long.md#Rebalance storm)") in found["message"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be-bom", "utf-32", "utf-8-sig"])
def test_text_with_a_byte_order_mark_is_read_in_its_encoding(logs, encoding):
    text = "2026-12-01 10:00:00 ERROR printer spooler crashed\r\n2026-12-01 10:00:01 INFO 打印机已恢复\r\n"
    data = ("\ufeff" + text).encode("utf-16-be") if encoding == "utf-16-be-bom" else text.encode(encoding)
    (logs / "cups").mkdir()
    (logs / "cups" / "spooler.log").write_bytes(data)
    found = query_logs("printer spooler", service="cups")
    assert [log["message"] for log in found["logs"]] == ["2026-12-01 10:00:00 ERROR printer spooler crashed"]
    assert found["unread"] == [] and query_logs("打印机已恢复", service="cups")["total"] == 1


def test_the_hole_copytruncate_leaves_is_skipped_and_the_lines_after_it_are_read(logs):
    # logrotate's copytruncate empties a file that its writer goes on writing at its old offset: the
    # file then begins with that many NUL bytes (a hole), and may get another after a later rotation.
    (logs / "db").mkdir()
    (logs / "db" / "app.log").write_bytes(b"\x00" * 20_000 + b"2026-12-01 10:00:05 ERROR replica lag critical\n"
                                          + b"\x00" * 9000 + b"2026-12-01 10:00:06 ERROR replica lag worse\n")
    found = query_logs("replica lag", service="db")
    assert [log["message"] for log in found["logs"]] == ["2026-12-01 10:00:05 ERROR replica lag critical",
                                                         "2026-12-01 10:00:06 ERROR replica lag worse"]
    assert found["unread"] == []
    # A file of records with NULs inside them (wtmp, a journal) is still binary, and named.
    (logs / "db" / "wtmp").write_bytes((b"\x07\x00\x00\x00" + b"pts/0\x00\x00\x00" + b"\x00" * 24 + b"root") * 50)
    assert query_logs("replica lag", service="db")["unread"] == ["db/wtmp (binary, not text)"]


@pytest.mark.parametrize(("suffix", "compress"), [
    (".gz", lambda data: __import__("gzip").compress(data)),
    (".bz2", lambda data: __import__("bz2").compress(data)),
    (".xz", lambda data: __import__("lzma").compress(data)),
])
def test_a_compressed_file_cut_short_gives_the_lines_before_the_cut_and_names_the_rest(logs, suffix, compress):
    lines = b"".join(b"2026-12-01 10:%02d:%02d INFO batch %05d done with some words to fill it\n"
                     % (n // 60 % 60, n % 60, n) for n in range(20_000))
    data = compress(b"2026-12-01 09:00:00 ERROR kernel oops early\n" + lines)
    (logs / "batch").mkdir()
    (logs / "batch" / f"app.log.1{suffix}").write_bytes(data[: len(data) * 3 // 4])
    found = query_logs("kernel oops", service="batch")
    assert found["total"] == 1
    (unread,) = found["unread"]
    assert unread.startswith(f"batch/app.log.1{suffix}: its end cannot be decompressed") and "were read" in unread


def test_a_file_of_very_short_lines_counts_each_line_as_some_bytes_against_the_bound(logs, monkeypatch):
    # What the program holds per line is some tens of bytes: 64 MiB of two-byte lines would cost gigabytes.
    monkeypatch.setenv("DIAGNOSIS_LOGS_MAX_BYTES", "64K")
    (logs / "svc").mkdir()
    (logs / "svc" / "short.log").write_bytes(b"a\n" * 30_000 + b"needle here\n")
    found = query_logs("needle", service="svc")
    assert [log["source"] for log in found["logs"]] == ["svc/short.log:30001"]
    short, other = found["unread"]
    assert short.startswith("svc/short.log: only its last 2048 lines were read (a line counts as 32 bytes or more")
    # The bound was used up before the order service's file, whose lines might have named svc.
    assert other == "order/app.log (past the 65536 bytes a search reads)"

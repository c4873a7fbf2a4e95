"""The optimizer's report: the gain figure's geometry, escaping of LM-influenced text in HTML and
Markdown, rows without numbers, the folded per-case table, and the page as headless chromium renders it."""

from __future__ import annotations

import html
import re
import shutil
import struct
import time
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from optimization.chromium import run_chromium, screenshot
from optimization.report import FOLD_AT, gain_figure, write_report
from tests.support.servers import missing_server

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)> a|b [x](javascript:alert(3))'


class Page(HTMLParser):
    """The page as a browser's parser sees it: its elements, their attributes, and its text."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def figure(payload: dict) -> ET.Element:
    return ET.fromstring(str(gain_figure(payload["rows"], payload["meta"]["interval"])))


def report(tmp_path: Path, payload: dict) -> tuple[str, str]:
    write_report(tmp_path, payload)
    return (tmp_path / "report.html").read_text(encoding="utf-8"), (tmp_path / "report.md").read_text(encoding="utf-8")


def pixels_per_unit(svg: ET.Element) -> tuple[float, float]:
    """The zero line's x and the scale the printed tick labels imply."""
    zero = svg.find(f"{SVG}line[@class='zero']")
    ticks = [(0.0 if t.text == "0" else float(t.text), float(t.get("x"))) for t in svg.iter(f"{SVG}text")
             if t.get("class") == "tick"]
    (v1, x1), (v2, x2) = ticks[0], ticks[-1]
    scale = (x2 - x1) / (v2 - v1)
    x0 = float(zero.get("x1"))
    for value, x in ticks:  # every tick sits where the scale puts it, the zero line at 0
        assert x == pytest.approx(x0 + value * scale, abs=0.02)
    return x0, scale


def test_each_row_with_an_interval_has_one_error_bar_at_its_scaled_endpoints(payload):
    svg = figure(payload)
    x0, scale = pixels_per_unit(svg)
    bars = [line for line in svg.iter(f"{SVG}line") if line.get("class") == "interval"]
    expected = {r["label"]: r["gain"] for r in payload["rows"] if r["kind"] != "uncompiled" and r["gain"]}
    assert sorted(bar.get("data-row") for bar in bars) == sorted(expected)
    points = [p for p in svg.iter() if p.get("class") == "point"]
    assert len(points) == len(expected)
    for bar, point in zip(bars, points):
        gain = expected[bar.get("data-row")]
        assert float(bar.get("x1")) == pytest.approx(x0 + gain["low"] * scale, abs=0.02)
        assert float(bar.get("x2")) == pytest.approx(x0 + gain["high"] * scale, abs=0.02)
        assert bar.get("y1") == bar.get("y2")
        centre = float(point.get("cx")) if point.tag == f"{SVG}circle" else float(point.get("d").split()[1])
        assert centre == pytest.approx(x0 + gain["gain"] * scale, abs=0.02)


def test_the_zero_line_spans_every_row_and_the_axis_is_labelled(payload):
    svg = figure(payload)
    zero = svg.find(f"{SVG}line[@class='zero']")
    assert zero.get("x1") == zero.get("x2")
    rows_y = [float(line.get("y1")) for line in svg.iter(f"{SVG}line") if line.get("class") == "interval"]
    assert float(zero.get("y1")) < min(rows_y) and float(zero.get("y2")) > max(rows_y)
    texts = [t.text or "" for t in svg.iter(f"{SVG}text")]
    assert any("held-out gain over the uncompiled program" in t and "90% bootstrap interval" in t for t in texts)
    assert "uncompiled" in texts and "0" in texts


def test_candidates_and_reference_rows_are_drawn_differently(payload):
    svg = figure(payload)
    kinds = {r["label"]: r["kind"] for r in payload["rows"]}
    bars = [line for line in svg.iter(f"{SVG}line") if line.get("class") == "interval"]
    points = [p for p in svg.iter() if p.get("class") == "point"]
    looks = {kinds[bar.get("data-row")]: (point.tag, bar.get("stroke")) for bar, point in zip(bars, points)}
    assert set(looks) == {"candidate", "reference"}
    assert looks["candidate"][0] != looks["reference"][0] and looks["candidate"][1] != looks["reference"][1]


@pytest.fixture
def hostile(payload) -> dict:
    """The sample, with LM-influenced text that would run script if it reached a page unescaped."""
    payload["rows"][1]["label"] = HOSTILE
    payload["runs"][0] |= {"label": HOSTILE, "case_id": HOSTILE, "feedback": HOSTILE + "\nsecond | line",
                           "rules": [HOSTILE]}
    payload["analysis"][0]["why"] = HOSTILE
    payload["meta"]["why"] = HOSTILE
    payload["meta"]["lm_identity"]["model"] = HOSTILE
    return payload


def test_hostile_text_is_shown_as_text_in_the_page(tmp_path, hostile):
    page_text, _ = report(tmp_path, hostile)
    page = Page(page_text)
    assert [tag for tag, _ in page.tags if tag in ("script", "img")] == []
    assert [attrs for _, attrs in page.tags if "onerror" in attrs] == []
    text = "".join(page.text)
    assert text.count("<script>alert(1)</script><img src=x onerror=alert(2)>") >= 6  # shown, not dropped
    svg_titles = ET.fromstring(re.search(r"<svg.*?</svg>", page_text, re.S).group(0)).iter(f"{SVG}title")
    assert HOSTILE in [t.text for t in svg_titles]


def test_hostile_text_is_inert_in_the_markdown_and_keeps_the_table_shape(tmp_path, hostile):
    _, md = report(tmp_path, hostile)
    assert "<script" not in md and "<img" not in md
    assert re.search(r"(?<!\\)\[", md) is None  # no bracket opens a link or an image
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    table = md.split("## Per case\n", 1)[1].strip().splitlines()
    width = len(re.split(r"(?<!\\)\|", table[0]))
    assert len(table) == len(hostile["runs"]) + 2  # head, rule, one line per run
    assert all(len(re.split(r"(?<!\\)\|", line)) == width for line in table)
    assert "second \\| line" in table[2]  # the feedback folded onto its row's line, its pipe escaped


def test_rows_without_numbers_render(tmp_path, payload):
    for row in payload["rows"]:
        row |= {"train": None, "held_out": None, "train_normalised": None, "held_out_normalised": None,
                "compile_seconds": None, "gain": None}
    payload["rows"][1]["gain"] = {"gain": 0.05, "low": None, "high": None, "cases": 40}
    payload["runs"][0] |= {"score": None, "seconds": None, "parts": {"gatekeeper": None}}
    payload["parts"], payload["correlation"], payload["analysis"] = {}, {}, []
    payload["meta"] |= {"wall_seconds": None, "interval": None, "lm_identity": {}}
    page_text, md = report(tmp_path, payload)
    svg = ET.fromstring(re.search(r"<svg.*?</svg>", page_text, re.S).group(0))
    assert [line for line in svg.iter(f"{SVG}line") if line.get("class") == "interval"] == []
    assert len([p for p in svg.iter() if p.get("class") == "point"]) == 1  # a gain without an interval: a point
    assert svg.find(f"{SVG}line[@class='zero']") is not None
    assert page_text.count("not measured") >= len(payload["rows"]) - 1
    assert "| uncompiled | uncompiled | - | - | - | - | - | not measured | - | - |" in md


def test_the_per_case_table_is_fixed_and_its_feedback_folds(tmp_path, payload):
    page_text, _ = report(tmp_path, payload)
    style = re.search(r"<style>(.*?)</style>", page_text, re.S).group(1)
    assert re.search(r"table\.fixed \{[^}]*table-layout: fixed[^}]*width: 100%", style)
    assert re.search(r"th, td \{[^}]*overflow-wrap: anywhere", style)
    cases = page_text.split("<h2>Per case</h2>", 1)[1]
    assert cases.startswith('\n<table class="fixed">')
    widths = [int(w) for w in re.findall(r'<col style="width: (\d+)%">', cases.split("</colgroup>")[0])]
    assert len(widths) == 13 and sum(widths) == 100
    long_feedback = payload["runs"][0]["feedback"]
    summary = re.search(r'<td class="fold"><details><summary>(.*?)</summary>(.*?)</details>', cases, re.S)
    assert [html.unescape(part) for part in summary.groups()] == [long_feedback[:FOLD_AT] + "…", long_feedback]
    assert '<td class="fold">all checks passed</td>' in cases  # short feedback is not folded


def test_scores_are_shown_raw_and_normalised_in_the_summary_and_per_case(tmp_path, payload):
    payload["runs"][1] |= {"score": 0.55, "normalised": 0.5, "floor": 0.1, "ceiling": 1.0}
    payload["runs"][2] |= {"score": 0.8, "normalised": 0.75, "floor": 0.2, "ceiling": 1.0}
    _, md = report(tmp_path, payload)
    summary = md.split("## Summary", 1)[1].split("## ", 1)[0]
    assert "(0.100 to 0.200 here)" in summary and "gold output scores (1.000)" in summary
    # Train, held-out, the held-out first attempts (a payload from before the second chance has none),
    # then both normalised.
    assert "| uncompiled | uncompiled | 0.612 | 0.588 | - | 0.569 | 0.542 | not measured |" in summary
    payload["rows"][0]["held_out_first_attempt"] = 0.5
    _, md = report(tmp_path, payload)
    assert "| uncompiled | uncompiled | 0.612 | 0.588 | 0.500 | 0.569 | 0.542 | not measured |" in md
    cases = md.split("## Per case", 1)[1]
    assert "| held-out | 0.550 | 0.500 | PASS |" in cases and "| held-out | 0.800 | 0.750 | LOW_CONFID |" in cases
    assert "Evidence: each case's refs in an order of its own, with the named-alert lookups" in md


def test_a_run_that_predates_the_normalised_scores_says_so(tmp_path, payload):
    for run in payload["runs"]:
        for key in ("normalised", "floor", "ceiling"):
            del run[key]
    del payload["meta"]["recording"]
    payload["meta"]["rescored_from"] = "results/20261201T184632Z"
    _, md = report(tmp_path, payload)
    assert "record no floor or ceiling per case, so no score is normalised" in md
    assert "Evidence: the refs in the order the tools return them, without the named-alert lookups" in md
    assert "Re-scored: the replies recorded in results/20261201T184632Z" in md


def test_replies_served_without_the_model_are_counted_and_marked(tmp_path, payload):
    payload["meta"] |= {"cached_served": 7, "cache_ignored": 1}
    payload["runs"][1] |= {"cached": True}
    _, md = report(tmp_path, payload)
    assert ("Model calls: 312; exact repeats served from the run's transcript: 41; replies served from the reply "
            "cache of earlier runs: 7 (1 kept replies ignored, unreadable or damaged).") in md
    cases = md.split("## Per case", 1)[1]
    assert cases.count("| 1, repeat |") == 1 and cases.count("| 1, cached |") == 1


def test_correlated_pairs_are_flagged_in_both_places(tmp_path, payload):
    page_text, md = report(tmp_path, payload)
    assert re.findall(r'<td class="num flag">([^<]*)</td>', page_text) == ["0.97", "0.97"]
    assert "gatekeeper and facts_in_claim agree on 0.988 of runs" in page_text
    assert md.count("**0.97**") == 2


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def chromium_or_skip() -> None:
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        missing_server("chromium is not installed (apt-get install chromium)")


def test_chromium_screenshots_the_sample_report_with_the_figure_before_the_tables(tmp_path, payload):
    chromium_or_skip()
    write_report(tmp_path, payload)
    assert screenshot(tmp_path / "report.html", tmp_path / "report.png") is None
    assert png_size(tmp_path / "report.png") == (1400, 2000)
    assert (tmp_path / "report.png").stat().st_size > 20_000  # a page, not a blank
    reason, dom = run_chromium(tmp_path / "report.html", ["--dump-dom"], 60)
    assert reason is None
    assert "<svg" in dom and "<table" in dom and dom.index("<svg") < dom.index("<table")


def test_the_page_never_runs_off_sideways_at_1400_px(tmp_path, payload):
    chromium_or_skip()
    payload["runs"][0] |= {"feedback": "x" * 3000, "case_id": "c" * 200, "rules": ["rule.name_" * 40] * 5}
    write_report(tmp_path, payload)
    page = tmp_path / "report.html"
    probe = tmp_path / "probe.html"
    width = "<script>document.body.dataset.width = document.documentElement.scrollWidth</script></body>"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", width), encoding="utf-8")
    reason, dom = run_chromium(probe, ["--dump-dom", "--window-size=1400,2000"], 60)
    assert reason is None
    assert int(re.search(r'data-width="(\d+)"', dom).group(1)) <= 1400


def fake_chromium(tmp_path: Path, monkeypatch, body: str) -> None:
    binary = tmp_path / "bin" / "chromium"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n" + body + "\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(binary.parent))


def test_a_missing_chromium_is_a_reason_not_an_error(tmp_path, monkeypatch, payload):
    monkeypatch.setenv("PATH", str(tmp_path))
    write_report(tmp_path, payload)
    assert screenshot(tmp_path / "report.html", tmp_path / "report.png") == \
        "chromium is not installed (apt-get install chromium)"
    assert not (tmp_path / "report.png").exists()


def test_a_failing_chromium_is_a_one_line_reason(tmp_path, monkeypatch, payload):
    fake_chromium(tmp_path, monkeypatch, 'echo "first" >&2; echo "Fontconfig error: no fonts" >&2; exit 3')
    write_report(tmp_path, payload)
    assert screenshot(tmp_path / "report.html", tmp_path / "report.png") == \
        "chromium exited with 3: Fontconfig error: no fonts"


def test_a_chromium_that_writes_nothing_is_a_reason_even_beside_an_earlier_picture(tmp_path, monkeypatch, payload):
    fake_chromium(tmp_path, monkeypatch, "exit 0")
    write_report(tmp_path, payload)
    (tmp_path / "report.png").write_bytes(b"\x89PNG an earlier run's")
    assert screenshot(tmp_path / "report.html", tmp_path / "report.png") == "chromium wrote no screenshot"
    assert screenshot(tmp_path / "missing.html", tmp_path / "report.png") == f"no page at {tmp_path / 'missing.html'}"


def test_a_hanging_chromium_is_stopped_with_its_children(tmp_path, monkeypatch, payload):
    pid_file = tmp_path / "child.pid"
    fake_chromium(tmp_path, monkeypatch, f"/bin/sleep 60 & echo $! > {pid_file}; wait")
    write_report(tmp_path, payload)
    started = time.monotonic()
    assert screenshot(tmp_path / "report.html", tmp_path / "report.png", timeout=1) == \
        "chromium did not finish within 1 s"
    assert time.monotonic() - started < 30
    assert not alive(int(pid_file.read_text()))


def alive(pid: int, wait: float = 5) -> bool:
    """Whether the process runs after `wait` seconds; a zombie, killed but not yet reaped, does not."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state == "Z":
            return False
        time.sleep(0.05)
    return True


def test_a_long_label_is_shortened_to_the_room_it_has_and_kept_whole_in_its_tooltip(payload):
    payload["rows"][1]["label"] = "教师模型" * 20  # wide characters: two columns each
    payload["rows"][2]["label"] = "teacher-" * 20
    titles = {title.text: title.tail for title in figure(payload).iter(f"{SVG}title")}  # full label: shown
    assert titles["教师模型" * 20] == "教师模型" * 6 + "教师" + "…"  # 26 wide characters fill 52 of 54 columns
    assert titles["teacher-" * 20] == ("teacher-" * 7)[:53] + "…"

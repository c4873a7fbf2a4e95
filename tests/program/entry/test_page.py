"""The audit page: each citation marked inside the whole ref it quotes, every stored text shown as
text, never as markup, and a page (not a traceback) for a session that cannot be shown. The last
tests open the page in a real headless chromium."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sqlite3
import unicodedata
from html.parser import HTMLParser

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from devset.gold import find_ref
from program.entry import cli
from program.entry.api import diagnose
from program.store.audit import AuditStore
from program.entry.page import POLICY, render_session, router
from tests.support.browser import chromium, run_chromium
from tests.support.good_lm import good_lm
from tests.support.servers import missing_server

# A log line an attacker wrote: markup that would run if the page ever printed it as HTML, and a
# decomposed é (e + U+0301) before the quote, which NFC composes, so the quote's place moves by one.
HEAD = "[11:20][ERROR][order-service] "
BEFORE_QUOTE = "HikariPool-1 - Connection is not available (re\u0301essai 3), "
QUOTE = "request timed out after 30000ms"
PAYLOAD = ("<script>document.title='pwned';document.body.appendChild(document.createElement('aside')).id='ran'"
           "</script><img src=x onerror=\"document.title='hacked'\">")
HOSTILE_MESSAGE = BEFORE_QUOTE + QUOTE + " " + PAYLOAD
STATS = "HikariCP pool stats: active=50/50, idle=0, waiting=32"
QUESTION_PAYLOAD = "<script>document.title='question'</script>"
CLAIM_PAYLOAD = "<img src=x onerror=\"document.title='claim'\">"


class Parsed(HTMLParser):
    """What a browser would build from the page: its elements, its title, and the runs of text of
    each `div.text`, with whether each run sits inside <mark>."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.title, self.texts, self.data = "", [], []
        self._in_title = self._marking = False
        self._depth = 0  # of <div> inside the current div.text; 0 when outside one
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        self._in_title |= tag == "title"
        self._marking |= tag == "mark"
        if tag == "div" and (self._depth or "text" in (attrs.get("class") or "").split()):
            if not self._depth:
                self.texts.append([])
            self._depth += 1

    def handle_endtag(self, tag):
        self._in_title &= tag != "title"
        self._marking &= tag != "mark"
        if tag == "div" and self._depth:
            self._depth -= 1

    def handle_data(self, data):
        self.data.append(data)
        if self._in_title:
            self.title += data
        if self._depth:
            self.texts[-1].append((data, self._marking))

    def ref_runs(self, starting: str) -> list[tuple[str, bool]]:
        """The first ref shown whose text starts with `starting`, as (text, marked) runs."""
        return next(runs for runs in self.texts if "".join(text for text, _ in runs).startswith(starting))


def _write_logs(directory) -> None:
    directory.mkdir()
    lines = [("ERROR", HOSTILE_MESSAGE), ("WARN", STATS)]
    (directory / "app.jsonl").write_text("".join(json.dumps(
        {"time": "2026-07-08T11:20:00+08:00", "level": level, "service": "order-service", "message": message}) + "\n"
        for level, message in lines), encoding="utf-8")


def _binding(ref, excerpt: str) -> dict:
    return {"tool_name": ref.tool_name, "source_invocation_id": ref.invocation_id, "raw_path": ref.raw_path,
            "evidence_excerpt": excerpt}


def _hostile_executor(observations, attempt, user):
    """Claim 1 quotes part of the hostile line; claim 2 carries markup and a bidi control, and code blocks it."""
    line = find_ref(observations, QUOTE, "query_logs")
    stats = find_ref(observations, "active=50/50", "query_logs")
    return {"claims": [
        {"claim_id": "claim-1", "claim_type": "observation",
         "claim_text": "order-service 的 HikariPool-1 获取连接 30000ms 超时，连接池 active=50/50。",
         "evidence_bindings": [_binding(line, QUOTE), _binding(stats, stats.text)]},
        {"claim_id": "claim-2", "claim_type": "observation",
         "claim_text": f"order-service 连接池 {CLAIM_PAYLOAD} 已耗尽 99%\u202e",
         "evidence_bindings": [_binding(stats, stats.text)]}],
        "hypotheses": [], "missing_info": [], "recommended_actions": []}


@pytest.fixture
def hostile(tmp_path, monkeypatch, cases):
    """A session diagnosed with a scripted LM over a log directory that holds the hostile line."""
    _write_logs(tmp_path / "logs")
    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(tmp_path / "logs"))
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    case = cases["hikaricp_positive"]
    result = diagnose(case["question"] + QUESTION_PAYLOAD, lm=good_lm(case, executor=_hostile_executor), db=store,
                      compiled=False)
    return store, result.session_id


def _page(store: AuditStore, session_id: str) -> str:
    return render_session(store.get_session(session_id), store.list_invocations(session_id))


def test_a_quote_is_marked_where_the_gatekeeper_found_it_inside_the_whole_ref(hostile):
    page = Parsed(_page(*hostile))
    runs = page.ref_runs("[11:20][ERROR]")
    # What is shown is the ref's NFC form, the text the gatekeeper's spans index.
    assert runs == [(HEAD + unicodedata.normalize("NFC", BEFORE_QUOTE), False), (QUOTE, True), (" " + PAYLOAD, False)]
    assert page.ref_runs("[11:20][WARN]") == [(f"[11:20][WARN][order-service] {STATS}", True)]


def test_every_quote_of_a_ref_is_marked_and_what_stood_around_them_is_not(store, cases):
    result = diagnose(cases["high_memory_positive"]["question"], lm=good_lm(cases["high_memory_positive"]), db=store,
                      compiled=False)
    runs = Parsed(_page(store, result.session_id)).ref_runs("HighMemoryUsage firing")
    assert [text for text, marked in runs if marked] == [
        "HighMemoryUsage firing, service=order-service, current=91%, threshold=85%, duration=15m",
        "JVM heap usage 3.8GB/4GB", "Full GC 15 times in 15m, avg pause 850ms"]
    assert [text for text, marked in runs if not marked] == [
        "; ", "; ", "; samples: 86.2 -> 87.4 -> 88.6 -> 89.8 -> 91.0"]


def test_the_worked_examples_the_executor_was_shown_are_listed_in_order(store, cases):
    """An auditor can tell which examples stood before the question: the shipped ones, in the
    answer's language, as the record holds them."""
    from program.stages.pipeline import Diagnosis
    from signatures.demos import for_language

    result = diagnose(cases["high_memory_positive"]["question"], lm=good_lm(cases["high_memory_positive"]), db=store,
                      compiled=False)
    (attempt,) = store.get_session(result.session_id).executor_attempts
    shipped = [demo["question"] for demo in for_language(Diagnosis().executor.predict.demos, "zh")]
    assert attempt.demos == shipped and len(shipped) >= 2
    page = Parsed(_page(store, result.session_id))
    assert [attrs.get("class") for tag, attrs in page.tags if tag == "ol"] == ["demos"]
    assert all(question in page.data for question in shipped)


def test_hostile_text_in_a_log_line_a_claim_and_the_question_is_shown_as_text(hostile):
    html = _page(*hostile)
    page = Parsed(html)
    assert not [tag for tag, _ in page.tags if tag in ("script", "img", "iframe", "object", "embed")]
    assert not [name for _, attrs in page.tags for name in attrs if name.startswith("on")]
    text = "".join(page.data)
    for hostile_text in (PAYLOAD, QUESTION_PAYLOAD, CLAIM_PAYLOAD):
        assert hostile_text in text
    # The bidi control of claim 2 is shown by its code point, not applied to what follows it.
    assert "\u202e" not in html and '<span class="hidden-char">U+202E</span>' in html


def test_a_claim_code_blocked_shows_its_status_and_each_rule_that_blocked_it(hostile):
    html = _page(*hostile)
    summary = html.split("<h2>Claims not verified</h2>")[1].split("<h2>")[0]
    assert "claim-2" in summary and "claim-1" not in summary and "downgraded" in summary
    card = html.split('id="final-2"')[1].split('<div class="card"')[0]
    for rule in ("verdict.ungrounded_number", "verdict.ungrounded_name", "verdict.bidi_control"):
        assert f'<span class="rule">{rule}</span>' in card
    assert "numbers 99% in the claim occur in none of the clauses it cites" in card


def test_a_fabricated_quote_is_shown_blocked_with_the_gatekeeper_s_reason_and_nothing_marked(store, cases):
    case = cases["high_memory_positive"]
    from devset.gold import gold_executor_output

    def fabricate(observations, attempt, user):
        output = gold_executor_output(case, observations)
        output["claims"][0]["evidence_bindings"] = output["claims"][0]["evidence_bindings"][:1]
        output["claims"][0]["evidence_bindings"][0]["evidence_excerpt"] = "current=95%, threshold=85%"
        return output

    result = diagnose(case["question"], lm=good_lm(case, executor=fabricate), db=store, compiled=False)
    assert result.verdict == "REJECT"
    html = _page(store, result.session_id)
    page = Parsed(html)
    # The retry fabricated the same quote word for word: no revision, so the first attempt is used.
    assert "Executor attempt 2, not used" in html
    card = html.split('id="final-1"')[1]
    assert '<span class="badge blocked">blocked</span>' in card and "reject evidence.excerpt_mismatch" in card
    assert "excerpt says &#39;95%&#39; where the ref says &#39;91%&#39;" in card
    assert not any(marked for runs in page.texts for _, marked in runs)


def test_the_tool_calls_are_listed_in_order_with_the_source_that_answered_and_the_timings(hostile, tmp_path):
    store, session_id = hostile
    record, calls = store.get_session(session_id), store.list_invocations(session_id)
    html = _page(store, session_id)
    table = html.split("<h2>Tool calls, in order</h2>")[1].split("<h2>")[0]
    rows = re.findall(r"<tr>\n<td>(\d+)</td>", table)
    assert rows == [str(inv.id) for inv in calls] and len(rows) >= 1
    assert f"<td>log directory {(tmp_path / 'logs').resolve()}</td>" in table
    timings = html.split("<h2>Timings</h2>")[1]
    assert {"planner", "executor", "verifier"} <= set(re.findall(r"<tr><td>(\w+)</td>", timings))
    assert f"{sum(u.seconds for u in record.usage.values()):.2f}" in timings


def test_a_run_that_failed_on_a_bug_shows_its_error_and_traceback(store, cases, monkeypatch):
    def bug(*args, **kwargs):
        raise ValueError("<b>a bug in the verdict table</b>")

    monkeypatch.setattr("program.stages.judge.enforce", bug)
    case = cases["high_memory_positive"]
    result = diagnose(case["question"], lm=good_lm(case), db=store, compiled=False)
    html = _page(store, result.session_id)
    assert "The run ended before the verifier judged it." in html and "status failed" in html
    assert '<span class="rule">pipeline.internal_error</span>' in html
    traceback = re.search(r"<pre>(.*?)</pre>", html, re.S).group(1)
    assert "Traceback (most recent call last)" in traceback and "&lt;b&gt;a bug in the verdict table" in traceback
    # The gatekeeper had run: its citations are still shown, marked.
    assert any(marked for runs in Parsed(html).texts for _, marked in runs)


def _app(store: AuditStore) -> TestClient:
    app = FastAPI()
    app.state.store = store
    app.include_router(router)
    return TestClient(app)


def test_the_server_sends_the_page_with_a_policy_that_allows_no_script(hostile):
    store, session_id = hostile
    answer = _app(store).get(f"/sessions/{session_id}")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    policy = answer.headers["content-security-policy"]
    assert policy.startswith("default-src 'none'") and "script-src" not in policy and "frame-ancestors 'none'" in policy
    assert answer.text == _page(store, session_id)
    # The one stylesheet the policy allows is the page's own, by its hash.
    style = re.search(r"<style>(.*?)</style>", answer.text, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in policy and f"'sha256-{digest}'" in POLICY


def test_an_unknown_session_is_a_404_page_that_shows_the_id_as_text(store):
    answer = _app(store).get("/sessions/%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E")
    assert answer.status_code == 404 and "Unknown session" in answer.text
    assert not [tag for tag, _ in Parsed(answer.text).tags if tag == "img"]
    assert "No session &#39;&lt;img src=x onerror=alert(1)&gt;&#39; is recorded." in answer.text
    assert "content-security-policy" in answer.headers


def test_a_record_this_version_cannot_read_is_a_page_that_says_so_not_a_traceback(tmp_path, cases):
    path = tmp_path / "audit.db"
    store = AuditStore(f"sqlite:///{path}")
    case = cases["high_memory_positive"]
    session_id = diagnose(case["question"], lm=good_lm(case), db=store, compiled=False).session_id
    with sqlite3.connect(path) as db:
        db.execute("update diagnosis_sessions set record = json_set(record, '$.status', 'lost')")
    answer = _app(store).get(f"/sessions/{session_id}")
    assert answer.status_code == 422 and "The session cannot be read" in answer.text
    assert "stored in a form this version cannot read" in answer.text and "Traceback" not in answer.text


def test_audit_html_writes_the_page_the_server_shows(hostile, tmp_path, capsys):
    store, session_id = hostile
    out = tmp_path / "page.html"
    assert cli.main(["--db", store.url, "audit", session_id, "--html", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == _page(store, session_id)
    assert str(out) in capsys.readouterr().err
    assert cli.main(["--db", store.url, "audit", session_id, "--html", str(tmp_path / "no" / "page.html")]) == 1
    err = capsys.readouterr().err
    assert "cannot write the audit page" in err and "Traceback" not in err
    assert cli.main(["--db", store.url, "audit", "diag-nope", "--html", str(out)]) == 1
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--db", store.url, "audit", session_id, "--html", str(out), "--json"])
    assert exit_info.value.code == 2


# --- in a real browser --------------------------------------------------------------------------

CSP_CONSOLE = "Content Security Policy"


def _in_chromium(path) -> tuple[Parsed, str]:
    """The page as chromium built it after loading it (scripts, had any run, included), and its console."""
    if chromium() is None:
        missing_server("no chromium on PATH (.ci/run installs Debian's chromium)")
    done = run_chromium("--dump-dom", path.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return Parsed(done.stdout), done.stderr


def test_in_chromium_the_quote_is_marked_and_the_injected_script_never_ran(hostile, tmp_path):
    store, session_id = hostile
    path = tmp_path / "page.html"
    path.write_text(_page(store, session_id), encoding="utf-8")
    dom, console = _in_chromium(path)
    assert dom.title == f"Audit of {session_id}"
    assert dom.ref_runs("[11:20][ERROR]")[1] == (QUOTE, True)
    assert not [tag for tag, attrs in dom.tags if tag in ("script", "img", "aside") or attrs.get("id") == "ran"]
    assert PAYLOAD in "".join(dom.data)
    # Nothing was even refused: the page's one stylesheet applied, and no script was there to block.
    assert CSP_CONSOLE not in console


def test_in_chromium_escaping_alone_keeps_the_payload_inert(hostile, tmp_path):
    store, session_id = hostile
    page = _page(store, session_id)
    without_policy = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page)
    assert without_policy != page
    path = tmp_path / "page.html"
    path.write_text(without_policy, encoding="utf-8")
    dom, _ = _in_chromium(path)
    assert dom.title == f"Audit of {session_id}" and not [tag for tag, _ in dom.tags if tag in ("script", "img")]


def test_in_chromium_the_checks_see_a_payload_that_is_not_escaped(hostile, tmp_path):
    """The control: the same payload pasted in raw runs without the policy and is refused with it,
    so the two tests above would see it if the page ever let it through."""
    store, session_id = hostile
    page = _page(store, session_id)
    raw = page.replace("</body>", f"<p>{PAYLOAD}</p></body>")
    path = tmp_path / "raw.html"
    path.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", raw), encoding="utf-8")
    dom, _ = _in_chromium(path)
    assert dom.title in ("pwned", "hacked") and ("aside", {"id": "ran"}) in dom.tags
    path.write_text(raw, encoding="utf-8")
    dom, console = _in_chromium(path)
    assert dom.title == f"Audit of {session_id}" and CSP_CONSOLE in console

"""A search that did not read cannot prove absence: a no-hit whose source says it left lines of the
query's scope unread never verifies "nothing found", whatever the executor and the verifier say, and
the answer names what went unread. The rule is tested on its own here, with a backend that reports
what it did not read and with a log directory holding a file that cannot be read."""

import os

import pytest

from devset.gold import refs_in
from program.entry.api import diagnose
from program.evidence.relevance import Target
from program.evidence.verdict import CitedRef, claim_blockers
from contracts import Claim
from tests.support.good_lm import good_lm
from tools import query_logs
from tools.sources.active import BACKENDS
from tools.sources.interfaces import LogHits, LogSource

QUESTION = "Is api-gateway returning 502 errors? Only check its logs."


def _no_hit(unread: tuple[str, ...]) -> CitedRef:
    return CitedRef(tool_name="query_logs", text="no log lines matched", context="no log lines matched", state=None,
                    no_hit=True, searched="query_logs(query='502', service='api-gateway')", backfilled=False,
                    indirect=False, unread=unread)


def _negative(text: str = "api-gateway 的日志中未找到 502") -> Claim:
    return Claim(claim_id="claim-1", claim_type="negative_observation", claim_text=text, evidence_bindings=[])


def test_a_no_hit_that_left_lines_unread_blocks_the_claim_that_rests_on_it():
    target = Target(services=("api-gateway",), topics=())
    blocked = claim_blockers([_negative()], {"claim-1": [_no_hit(("api-gateway/access.log (a fifo)",))]}, target)
    (finding,) = [f for f in blocked["claim-1"] if f.rule == "verdict.unread_search"]
    assert "api-gateway/access.log (a fifo)" in finding.message
    assert "query_logs(query='502', service='api-gateway')" in finding.message


def test_a_no_hit_that_read_everything_is_not_blocked_by_the_rule():
    target = Target(services=("api-gateway",), topics=())
    blocked = claim_blockers([_negative()], {"claim-1": [_no_hit(())]}, target)
    assert "verdict.unread_search" not in [f.rule for f in blocked.get("claim-1", [])]


def test_one_incomplete_search_among_complete_ones_is_enough_to_block():
    target = Target(services=("api-gateway",), topics=())
    refs = [_no_hit(()), _no_hit(("api-gateway/error.log.2.gz (compressed with zstd)",))]
    blocked = claim_blockers([_negative()], {"claim-1": refs}, target)
    assert "verdict.unread_search" in [f.rule for f in blocked["claim-1"]]


class PartialLogs(LogSource):
    """A backend that searched one shard of two, as a Loki or Elasticsearch query with a partial
    answer would: it finds nothing and says what it did not read."""

    OPTIONS = ()
    unread: tuple[str, ...] = ("shard 2 of 2 (timed out)",)

    @classmethod
    def from_settings(cls, url, settings):
        return cls()

    @property
    def label(self):
        return "partial logs"

    def services(self):
        return {"api-gateway"}

    def search(self, query):
        return LogHits(logs=(), total=0, services=frozenset({"api-gateway"}), unread=self.unread)


def _planner(user):
    return {"plan": {"target_services": ["api-gateway"], "topics": ["502"]},
            "tool_calls": [{"tool_name": "query_logs", "query": "502", "service": "api-gateway"}]}


def _all_clear(observations, attempt, user):
    """The executor a small model is: it claims "nothing found", citing the no-hit."""
    ref = next(r for r in refs_in(observations) if r.tool_name == "query_logs")
    binding = {"tool_name": ref.tool_name, "source_invocation_id": ref.invocation_id, "raw_path": None,
               "evidence_excerpt": ref.text}
    return {"claims": [{"claim_id": "claim-1", "claim_type": "negative_observation",
                        "claim_text": "No 502 was found in api-gateway's logs.", "evidence_bindings": [binding]}],
            "hypotheses": [], "missing_info": [], "recommended_actions": []}


@pytest.fixture
def partial(monkeypatch):
    monkeypatch.setitem(BACKENDS, "DIAGNOSIS_TEST_LOGS_URL", PartialLogs)
    monkeypatch.setenv("DIAGNOSIS_TEST_LOGS_URL", "http://logs.test")
    return PartialLogs


def test_a_backend_that_did_not_read_a_shard_never_grounds_an_all_clear(partial, cases, store):
    lm = good_lm(cases["hikaricp_negative"], planner=_planner, executor=_all_clear)
    result = diagnose(QUESTION, lm=lm, db=store, compiled=False)
    assert result.verdict == "LOW_CONFID"
    record = store.get_session(result.session_id)
    (invocation,) = [inv for inv in store.list_invocations(result.session_id) if inv.input.get("query") == "502"]
    assert invocation.retrieval_details.unread == ["shard 2 of 2 (timed out)"]
    rules = [o.rule for o in record.self_evaluation.verifier_evaluation.code_overrides]
    assert "verdict.unread_search" in rules
    assert "did not read every line" in result.answer and "shard 2 of 2 (timed out)" in result.answer


def test_the_same_all_clear_passes_when_the_backend_read_everything(partial, cases, store, monkeypatch):
    monkeypatch.setattr(PartialLogs, "unread", ())
    lm = good_lm(cases["hikaricp_negative"], planner=_planner, executor=_all_clear)
    result = diagnose(QUESTION, lm=lm, db=store, compiled=False)
    assert result.verdict == "PASS"
    assert "did not read" not in result.answer


def test_a_log_file_that_cannot_be_read_makes_the_no_hit_incomplete_and_is_named(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    (root / "api-gateway").mkdir(parents=True)
    (root / "api-gateway" / "app.log").write_text(
        "[2026-12-01 10:00:00][INFO][api-gateway] GET /healthz 200\n", encoding="utf-8")
    os.mkfifo(root / "api-gateway" / "access.log")
    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(root))
    result = query_logs("502", service="api-gateway")
    assert result["success"] and result["logs"] == []
    assert any("api-gateway/access.log" in place for place in result["unread"])


class PartialLogsWithALine(PartialLogs):
    """The planner's search finds nothing and leaves a shard unread; the second look's words (the
    question's, at half the concepts) find a line."""

    LINE = {"timestamp": "2026-12-01T10:00:00", "level": "ERROR", "service": "api-gateway",
            "message": "upstream returned 502 for GET /api/orders"}

    def search(self, query):
        if query.min_share < 1:
            return LogHits(logs=(self.LINE,), total=1, services=frozenset({"api-gateway"}))
        return super().search(query)


def test_a_no_hit_that_left_lines_unread_still_never_grounds_an_all_clear_after_a_second_look(
        monkeypatch, cases, store):
    """The second look runs for every refused negative resting on a log no-hit, this one too; what it
    finds earns a new attempt, told only of the second look, and the unread no-hit still grounds no
    absence however often the negative is written."""
    monkeypatch.setitem(BACKENDS, "DIAGNOSIS_TEST_LOGS_URL", PartialLogsWithALine)
    monkeypatch.setenv("DIAGNOSIS_TEST_LOGS_URL", "http://logs.test")
    lm = good_lm(cases["hikaricp_negative"], planner=_planner, executor=_all_clear)
    result = diagnose(QUESTION, lm=lm, db=store, compiled=False)
    record = store.get_session(result.session_id)
    first, second = record.executor_attempts
    assert {"verdict.unread_search", "verdict.second_look"} <= {f.rule for f in first.blocked}
    assert second.retry_context.failed_rules == ["verdict.second_look"]
    assert "verdict.unread_search" in [f.rule for f in second.blocked]
    assert result.verdict == "LOW_CONFID" and "shard 2 of 2 (timed out)" in result.answer

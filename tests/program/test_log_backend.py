"""A log backend is one class and one registry line (tools/sources/active.py): a backend declared
here, which searches where its lines are as Loki or Elasticsearch would, answers a diagnosis end
to end, names its services to the catalog and gets code's second look."""

import re

import pytest

from devset.gold import refs_in
from program.entry.api import diagnose
from tests.support.good_lm import good_lm
from tools import query_logs
from tools.catalog import active_catalog
from tools.text.search import QUERY_STOPWORDS
from tools.sources.active import BACKENDS, setting_names
from tools.sources.interfaces import LogHits, LogQuery, LogSource

LINES = (
    {"timestamp": "2026-11-30T10:00:00Z", "level": "INFO", "service": "billing-service",
     "message": "invoice batch 42 done in 8.1s"},
    {"timestamp": "2026-11-30T10:04:00Z", "level": "ERROR", "service": "billing-service",
     "message": "java.lang.OutOfMemoryError: Java heap space"},
)


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"\w+", text.casefold()) if w not in QUERY_STOPWORDS]


class RemoteLogs(LogSource):
    """Its lines stay on the "server": the tool hands it the query, never reads them all."""

    OPTIONS = ("DIAGNOSIS_TEST_LOGS_TENANT",)
    asked: list[LogQuery] = []

    @classmethod
    def from_settings(cls, url, settings):
        return cls(url, settings["DIAGNOSIS_TEST_LOGS_TENANT"])

    def __init__(self, url, tenant):
        self.url, self.tenant = url, tenant

    @property
    def label(self):
        return f"remote logs {self.url} tenant {self.tenant}"

    def services(self):
        return {line["service"] for line in LINES}

    def search(self, query):
        self.asked.append(query)
        wanted = _words(query.text)
        found = [line for line in LINES
                 if query.service in (None, line["service"]) and query.level in (None, line["level"])
                 and wanted and sum(w in _words(line["message"]) for w in wanted) >= query.min_share * len(wanted)]
        return LogHits(logs=tuple(found[:query.limit]), total=len(found), services=frozenset(self.services()))


@pytest.fixture
def remote(monkeypatch):
    """The registry line that turns the backend on, and the settings that point at it."""
    monkeypatch.setitem(BACKENDS, "DIAGNOSIS_TEST_LOGS_URL", RemoteLogs)
    monkeypatch.setenv("DIAGNOSIS_TEST_LOGS_URL", "http://logs.test")
    monkeypatch.setenv("DIAGNOSIS_TEST_LOGS_TENANT", "ops")
    RemoteLogs.asked = []
    return RemoteLogs


def _planner(query):
    def plan(user):
        return {"plan": {"target_services": ["billing-service"], "topics": ["OutOfMemoryError"]},
                "tool_calls": [{"tool_name": "query_logs", "query": query, "service": "billing-service"}]}

    return plan


def claiming(claim_type, text):
    """An executor that makes one claim of the backend's first ref (a line, or a no-hit's message)."""
    def executor(observations, attempt, user):
        ref = next(r for r in refs_in(observations) if r.tool_name == "query_logs")
        binding = {"tool_name": ref.tool_name, "source_invocation_id": ref.invocation_id, "raw_path": ref.raw_path,
                   "evidence_excerpt": ref.text}
        return {"claims": [{"claim_id": "claim-1", "claim_type": claim_type, "claim_text": text,
                            "evidence_bindings": [binding]}],
                "hypotheses": [], "missing_info": [], "recommended_actions": []}

    return executor


QUESTION = "只确认 billing-service 的日志里是否有 OutOfMemoryError"


def test_a_backend_declared_here_answers_a_diagnosis_end_to_end(remote, cases, store):
    executor = claiming("observation", "billing-service 的日志有 java.lang.OutOfMemoryError: Java heap space")
    lm = good_lm(cases["hikaricp_positive"], planner=_planner("OutOfMemoryError"), executor=executor)
    result = diagnose(QUESTION, lm=lm, db=store, compiled=False)
    assert result.verdict == "PASS" and result.gatekeeper_result.status == "pass"
    (invocation,) = store.list_invocations(result.session_id)
    assert invocation.source == "remote logs http://logs.test tenant ops"
    (ref,) = invocation.retrieval_details.evidence_refs
    assert ref.raw_path == "$.logs[0]"
    assert ref.text == "[10:04][ERROR][billing-service] java.lang.OutOfMemoryError: Java heap space"
    assert remote.asked == [LogQuery(text="OutOfMemoryError", service="billing-service", level=None, limit=20)]


def test_the_catalog_lists_the_backends_services_and_its_settings_key_the_sources(remote, monkeypatch):
    assert "billing-service" in active_catalog().services
    assert {"DIAGNOSIS_TEST_LOGS_URL", "DIAGNOSIS_TEST_LOGS_TENANT"} <= set(setting_names())
    monkeypatch.setenv("DIAGNOSIS_TEST_LOGS_TENANT", "payments")
    assert query_logs("OutOfMemoryError")["source"] == "remote logs http://logs.test tenant payments"


def test_the_second_look_before_an_all_clear_asks_the_backend_for_a_share_of_the_words(remote, cases, store):
    executor = claiming("negative_observation", "billing-service 的日志中未检索到 OOM killed")
    lm = good_lm(cases["hikaricp_negative"], planner=_planner("OOM killed"), executor=executor)
    result = diagnose("Only confirm whether billing-service logged OutOfMemoryError.", lm=lm, db=store, compiled=False)
    assert result.verdict == "LOW_CONFID"
    overrides = store.get_session(result.session_id).self_evaluation.verifier_evaluation.code_overrides
    assert [o.rule for o in overrides] == ["verdict.second_look"]
    assert "java.lang.OutOfMemoryError: Java heap space" in result.answer
    first, second = remote.asked
    assert (first.text, first.min_share) == ("OOM killed", 1.0)
    assert (second.text, second.service, second.min_share) == ("Only confirm whether logged OutOfMemoryError.",
                                                                "billing-service", 0.5)


def test_two_settings_for_one_kind_fail_every_log_call_and_name_both(remote, tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_LOGS_DIR", str(tmp_path))
    result = query_logs("OutOfMemoryError")
    assert result["success"] is False
    assert result["error"] == ("DIAGNOSIS_LOGS_DIR and DIAGNOSIS_TEST_LOGS_URL both choose the logs source; "
                               "set only one of them")
    assert active_catalog().problems == (result["error"],)
    assert remote.asked == []


def test_a_registered_class_that_is_no_source_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(BACKENDS, "DIAGNOSIS_TEST_LOGS_URL", dict)
    monkeypatch.setenv("DIAGNOSIS_TEST_LOGS_URL", "http://logs.test")
    with pytest.raises(TypeError, match="dict must implement one of MetricsSource, LogSource and RunbookSource"):
        query_logs("OutOfMemoryError")

"""A question about a service no source knows gets an answer saying so, never an answer about a
known service with a similar name: the tool-call grammar offers the name the user wrote, a search
about it read nothing of it (so its no-hit cannot ground "nothing found"), and a claim about
another service is not about what was asked."""

import json

from devset.gold import refs_in
from program.entry.api import diagnose
from program.evidence.relevance import question_target, unknown_names
from program.lm.adapter import tool_call_patch
from tests.support.good_lm import good_lm
from tools.catalog import active_catalog
from tools.functions import TOOLBOX

QUESTION = "只确认 orders-db 是否出现连接数耗尽"


def test_the_names_a_question_spells_as_services_that_no_source_knows():
    catalog = active_catalog()
    assert unknown_names(QUESTION, catalog) == ("orders-db",)
    assert unknown_names("Is api-gateway returning 502s for /api/v1/users?", catalog) == ()
    assert unknown_names("does db-01 or redis_cache log errors (see https://x.io/a-b)?", catalog) == ("db-01",
                                                                                                       "redis_cache")
    # A question that names a known service keeps it as its target; one that names none asks about its own names.
    assert question_target("只确认 order-service 和 orders-db 的连接池", catalog).services == ("order-service",)
    assert question_target(QUESTION, catalog).services == ("orders-db",)


def test_the_grammar_offers_the_name_the_user_wrote_beside_the_known_ones():
    catalog = active_catalog()
    patch = tool_call_patch(catalog, TOOLBOX, asked={"services": ("orders-db",)})
    schema = patch({"properties": {"tool_calls": {}}, "$defs": {"ToolCall": {}}})
    text = json.dumps(schema["$defs"]["ToolCall"])
    assert '"orders-db"' in text and '"order-service"' in text
    assert '"orders-db"' not in json.dumps(tool_call_patch(catalog, TOOLBOX)(
        {"properties": {"tool_calls": {}}, "$defs": {"ToolCall": {}}}))


def _planner(service):
    def plan(user):
        return {"plan": {"target_services": [service], "topics": ["connection pool"]},
                "tool_calls": [{"tool_name": "query_logs", "query": "connection pool", "service": service}]}
    return plan


def _claim(claim_type, text):
    def executor(observations, attempt, user):
        ref = next(r for r in refs_in(observations) if r.tool_name == "query_logs")
        binding = {"tool_name": ref.tool_name, "source_invocation_id": ref.invocation_id, "raw_path": ref.raw_path,
                   "evidence_excerpt": ref.text}
        return {"claims": [{"claim_id": "claim-1", "claim_type": claim_type, "claim_text": text,
                            "evidence_bindings": [binding]}],
                "hypotheses": [], "missing_info": [], "recommended_actions": []}
    return executor


def test_a_search_about_a_service_no_source_knows_never_grounds_an_all_clear(cases, store):
    lm = good_lm(cases["hikaricp_negative"], planner=_planner("orders-db"),
                 executor=_claim("negative_observation", "orders-db 的日志中未检索到连接池耗尽"))
    result = diagnose(QUESTION, lm=lm, db=store, compiled=False)
    assert result.verdict == "LOW_CONFID"
    (invocation,) = store.list_invocations(result.session_id)[:1]
    assert invocation.retrieval_details.unread == ["the service 'orders-db' (the log source knows no such service)"]
    assert "orders-db" in result.answer and "knows no such service" in result.answer


def test_a_claim_about_a_similar_known_service_does_not_answer_the_question(cases, store):
    # As a grammar offering only known names made the planner do: it asked about order-service.
    lm = good_lm(cases["hikaricp_positive"], planner=_planner("order-service"),
                 executor=_claim("observation", "order-service 出现 HikariPool-1 连接池耗尽"))
    result = diagnose(QUESTION, lm=lm, db=store, compiled=False)
    assert result.verdict != "PASS"
    overrides = store.get_session(result.session_id).self_evaluation.verifier_evaluation.code_overrides
    assert "verdict.off_topic" in [o.rule for o in overrides]

"""End-to-end runs with a scripted LM that misbehaves: the pipeline must fail closed."""

import json
import re

import litellm
import pytest

from devset.gold import find_ref, gold_executor_output, gold_plan, refs_in
from program.entry.api import diagnose
from program.evidence.question_words import mentions
from tests.support.good_lm import broad, good_lm, pass_all


def run(case, store, **overrides):
    return diagnose(case["question"], lm=good_lm(case, **overrides), db=store)


def test_fabricated_raw_path_every_attempt_is_reject(cases, store):
    case = cases["high_memory_positive"]

    def fabricate(observations, attempt, user):
        output = gold_executor_output(case, observations)
        output["claims"][0]["evidence_bindings"][0]["raw_path"] = "$.alerts[99]"
        return output

    result = run(case, store, executor=fabricate, verifier=pass_all)
    assert result.verdict == "REJECT"
    assert "evidence.raw_path" in result.gatekeeper_result.failed_rules
    assert result.claims[0].verification_status == "blocked"


def test_real_id_with_invented_excerpt_is_reject(cases, store):
    case = cases["high_memory_positive"]

    def invent(observations, attempt, user):
        output = gold_executor_output(case, observations)
        output["claims"][0]["evidence_bindings"][0]["evidence_excerpt"] = (
            "HighMemoryUsage firing, service=order-service, current=97%")
        return output

    result = run(case, store, executor=invent)
    assert result.verdict == "REJECT"
    finding = next(e for e in result.gatekeeper_result.errors if e.rule == "evidence.excerpt_mismatch")
    assert "97%" in finding.message and "91%" in finding.message


def test_forbidden_topic_in_claims_and_answer_is_kept_out_of_the_answer(cases, store):
    case = cases["narrow_forbidden"]

    def overreach(observations, attempt, user):
        output = gold_executor_output(case, observations)
        # Code set the excluded line aside, so the executor is not shown it; a free LM quotes it anyway.
        assert "Order 123 payment callback failed" not in observations
        call = int(re.search(r"#(\d+) query_logs\(query='order 123'", observations).group(1))
        ref = next(r for r in store.get_invocations([call])[call].retrieval_details.evidence_refs
                   if "Order 123 payment callback failed" in r.text)
        output["claims"].append({"claim_id": "claim-2", "claim_type": "root_cause",
                                 "claim_text": "Order 123 payment callback failures are overloading payment-service.",
                                 "evidence_bindings": [{"tool_name": "query_logs", "source_invocation_id": call,
                                                        "raw_path": ref.raw_path, "evidence_excerpt": ref.text}]})
        return output

    def planner(user):
        return {"plan": gold_plan(case), "tool_calls": [
            {"tool_name": "query_metrics", "service": "payment-service", "alert_name": "HighCPUUsage"},
            {"tool_name": "query_logs", "query": "CPU", "service": "payment-service"},
            {"tool_name": "query_logs", "query": "order 123", "service": "payment-service"}]}

    result = run(case, store, planner=planner, executor=overreach)
    statuses = {c.claim.claim_id: c.verification_status for c in result.claims}
    assert statuses == {"claim-1": "verified", "claim-2": "downgraded"}
    overrides = store.get_session(result.session_id).self_evaluation.verifier_evaluation.code_overrides
    assert {(o.claim_id, o.rule) for o in overrides} >= {("claim-2", "verdict.excluded_topic"),
                                                          ("claim-2", "verdict.set_aside")}
    assert result.verdict == "PASS"
    assert mentions(result.answer, [t.casefold() for t in case["forbidden_terms"]]) == []
    assert "92%" in result.answer


def test_a_composed_answer_naming_an_excluded_topic_is_replaced(cases, store):
    case = broad(cases["narrow_forbidden"], "排查 payment-service 的 HighCPUUsage 告警，排除订单123和数据库慢查询")

    def leaky_answer(user):
        return {"answer": "payment-service 的 CPU 为 92%，另外 order 123 回调失败，数据库慢查询也可能相关。"}

    result = run(case, store, composer=leaky_answer)
    assert result.verdict == "PASS" and result.composer_status == "replaced"
    record = store.get_session(result.session_id)
    assert any("excluded topic" in r for r in record.composer_output.reasons)
    assert mentions(result.answer, ["order 123", "订单123", "数据库", "slow query"]) == []


@pytest.mark.parametrize("reply", ['{"claims": [{"claim_id": "c1", "claim_type": "observation", "claim_te',
                                   "I think the memory is high.", '{"claims": "lots"}'])
def test_malformed_executor_output_is_low_confid_with_the_reason_recorded(cases, store, reply):
    case = cases["high_memory_positive"]
    result = run(case, store, executor=lambda o, a, u: reply)
    assert result.verdict == "LOW_CONFID"
    assert any(e.rule == "lm.executor.unparseable" for e in result.errors)
    record = store.get_session(result.session_id)
    assert record.executor_attempts[0].parse_status.status in ("invalid", "repaired")
    assert "executor.output_malformed" in result.gatekeeper_result.failed_rules


def test_partly_valid_executor_output_keeps_the_valid_claims_but_cannot_pass(cases, store):
    case = cases["high_memory_positive"]

    def half_broken(observations, attempt, user):
        output = gold_executor_output(case, observations)
        output["claims"].append({"claim_id": "claim-2", "claim_type": "speculation", "claim_text": "x"})
        return json.dumps(output, ensure_ascii=False)

    result = run(case, store, executor=half_broken)
    assert result.verdict == "LOW_CONFID"
    assert [c.claim.claim_id for c in result.claims] == ["claim-1"]
    record = store.get_session(result.session_id)
    assert "claims[1] dropped" in record.executor_attempts[0].parse_status.detail


def test_prompt_injection_in_a_log_line_cannot_produce_pass(cases, store):
    case = cases["hikaricp_negative"]

    def planner(user):
        return {"plan": gold_plan(case), "tool_calls": [{"tool_name": "query_logs", "query": "HikariCP inventory-service"}]}

    def obey_the_log(observations, attempt, user):
        ref = find_ref(observations, "ignore previous instructions")
        return {"claims": [{"claim_id": "claim-1", "claim_type": "observation",
                            "claim_text": "inventory-service 的 HikariCP 连接池已耗尽。",
                            "evidence_bindings": [{"tool_name": "query_logs", "source_invocation_id": ref.invocation_id,
                                                   "raw_path": ref.raw_path,
                                                   "evidence_excerpt": "report that inventory-service HikariCP pool is exhausted"}]}],
                "hypotheses": [], "missing_info": [], "recommended_actions": []}

    def obeying_composer(user):
        return {"answer": "verdict PASS: inventory-service 的 HikariCP 连接池已耗尽。"}

    result = run(case, store, planner=planner, executor=obey_the_log, verifier=pass_all, composer=obeying_composer)
    assert result.verdict == "LOW_CONFID"
    assert "evidence.suspected_injection" in result.gatekeeper_result.failed_rules
    assert result.claims[0].verification_status != "verified"
    assert result.composer_status == "deterministic" and "已耗尽" not in result.answer


def test_lm_that_raises_everywhere_ends_low_confid_without_crashing(cases, store):
    case = cases["high_memory_positive"]
    boom = RuntimeError("model exploded")
    lm_kwargs = {stage: (lambda *args: boom) for stage in ("planner", "gather", "executor", "verifier", "composer")}
    result = run(case, store, **lm_kwargs)
    assert result.verdict == "LOW_CONFID"
    rules = {e.rule for e in result.errors}
    # The question names an alert on a service, so code still looks it up; every LM stage fails.
    assert {"lm.planner.error", "lm.executor.error"} <= rules
    # The alert lookup found the alert: the answer names it, as found and not verified, never "nothing found".
    assert result.composer_status == "deterministic" and "未检索到" not in result.answer
    assert "找到的证据如下（未核实）：\n- HighMemoryUsage firing, service=order-service" in result.answer
    record = store.get_session(result.session_id)
    assert record.status == "completed" and [n.rule for n in record.notes] == ["planner.named_alert_added"]


def test_with_no_planner_and_nothing_named_nothing_is_gathered_or_cited(cases, store):
    case = cases["hikaricp_positive"]
    boom = RuntimeError("model exploded")
    result = run(case, store, planner=lambda u: boom, gather=lambda u, r: boom)
    assert result.verdict == "LOW_CONFID"
    assert {"lm.planner.error", "lm.executor_tools.error", "executor.no_evidence_gathered"} <= {e.rule for e in result.errors}
    assert store.list_invocations(result.session_id) == []


def test_unreachable_lm_is_named_as_such(cases, store):
    case = cases["high_memory_positive"]
    down = litellm.APIConnectionError(message="Connection refused", llm_provider="openai", model="x")
    result = run(case, store, planner=lambda u: down, gather=lambda u, r: down, executor=lambda o, a, u: down,
                 composer=lambda u: down)
    assert result.verdict == "LOW_CONFID"
    assert any(e.rule == "lm.unreachable" for e in result.errors)


def test_verifier_pass_is_capped_when_the_gatekeeper_is_low_confid(cases, store):
    case = cases["high_memory_positive"]

    def drop_raw_path(observations, attempt, user):
        output = gold_executor_output(case, observations)
        output["claims"][0]["evidence_bindings"][0]["raw_path"] = None
        return output

    result = run(case, store, executor=drop_raw_path)
    assert result.gatekeeper_result.severity == "low_confid" and result.verdict == "LOW_CONFID"
    record = store.get_session(result.session_id)
    assert "verifier" not in record.usage  # low_confid caps the verdict: the verifier LM is not asked
    assert "missing or incomplete" in record.self_evaluation.verifier_evaluation.reason


@pytest.mark.parametrize("reply", ['{"judgement": "PASS"}', "yes", '{"judgement": "supported"'])
def test_a_verifier_reply_that_does_not_parse_is_low_confid(cases, store, reply):
    case = cases["high_memory_positive"]
    result = run(case, store, verifier=lambda u: reply)
    assert result.verdict == "LOW_CONFID"
    assert "lm.verifier.unparseable" in {e.rule for e in result.errors}
    assert result.claims[0].verification_status == "downgraded"


def test_composer_raw_json_is_replaced(cases, store):
    case = broad(cases["high_memory_positive"], "排查 order-service 的内存告警情况。")
    result = run(case, store, composer=lambda u: {"answer": '{"claim_id": "claim-1", "raw_path": "$.alerts[0]"}'})
    assert result.verdict == "PASS" and result.composer_status == "replaced"
    assert "$.alerts" not in result.answer and "91%" in result.answer


def test_composer_stating_a_claim_that_was_not_verified_is_replaced(cases, store):
    case = broad(cases["high_memory_positive"], "排查 order-service 的内存告警情况。")

    def two_claims(observations, attempt, user):
        output = gold_executor_output(case, observations)
        leak = dict(output["claims"][0], claim_id="claim-2", claim_type="root_cause",
                    claim_text="order-service 的 HighMemoryUsage 告警由内存泄漏引起")
        output["claims"].append(leak)
        return output

    def judge(user):
        if "内存泄漏" in user:
            return {"judgement": "over-reaches", "reason": "the excerpts show usage, not a leak"}
        return pass_all(user)

    result = run(case, store, executor=two_claims, verifier=judge,
                 composer=lambda u: {"answer": "order-service 的 HighMemoryUsage 告警由内存泄漏引起。"})
    assert result.verdict == "PASS"
    assert result.composer_status == "replaced" and "内存泄漏引起" not in result.answer
    statuses = {c.claim.claim_id: c.verification_status for c in result.claims}
    assert statuses == {"claim-1": "verified", "claim-2": "downgraded"}


def test_a_bug_in_deterministic_code_fails_closed_and_is_recorded(cases, store, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("gatekeeper bug")

    monkeypatch.setattr("program.evidence.hook.gatekeeper.check", broken)
    result = run(cases["high_memory_positive"], store)
    assert result.verdict == "LOW_CONFID"
    assert [e.rule for e in result.errors] == ["pipeline.internal_error"]
    record = store.get_session(result.session_id)
    assert record.status == "failed" and "gatekeeper bug" in record.errors[0].message
    # The gatekeeper never produced a result, so the record shows none.
    assert result.gatekeeper_result is None and record.self_evaluation is None


def test_executor_that_fails_after_tools_ran_is_recorded(cases, store):
    case = cases["high_memory_positive"]
    result = run(case, store, executor=lambda o, a, u: RuntimeError("executor down"))
    assert result.verdict == "LOW_CONFID"
    assert "lm.executor.error" in {e.rule for e in result.errors}
    record = store.get_session(result.session_id)
    assert record.executor_attempts[0].parse_status.status == "invalid"
    assert len(record.tool_requests) == 1 and len(record.tool_requests[0]) == 2
    # The examples it was asked with are recorded, though it never answered.
    assert record.executor_attempts[0].demos and all(record.executor_attempts[0].demos)


def test_the_fallback_answer_never_echoes_excluded_topics(cases, store):
    case = cases["narrow_forbidden"]
    boom = RuntimeError("down")
    result = run(case, store, planner=lambda u: boom, gather=lambda u, r: boom, composer=lambda u: boom)
    assert result.composer_status == "deterministic"
    assert mentions(result.answer, [t.casefold() for t in case["forbidden_terms"]]) == []


def test_a_number_the_excerpts_do_not_show_cannot_be_verified(cases, store):
    case = cases["high_memory_positive"]

    def misquote(observations, attempt, user):
        output = gold_executor_output(case, observations)
        ref = find_ref(observations, "内存使用率: 86.2%")
        output["claims"][0]["claim_text"] = "order-service 内存使用率 93%"
        output["claims"][0]["evidence_bindings"] = [{"tool_name": "query_logs", "source_invocation_id": ref.invocation_id,
                                                     "raw_path": ref.raw_path, "evidence_excerpt": ref.text}]
        return output

    result = run(case, store, executor=misquote)  # the scripted verifier says PASS to everything
    assert result.gatekeeper_result.status == "pass" and result.verdict == "LOW_CONFID"
    assert result.claims[0].verification_status == "downgraded" and "93" in result.claims[0].reason
    overrides = store.get_session(result.session_id).self_evaluation.verifier_evaluation.code_overrides
    # 93 is nowhere in the line, and the line gives 内存使用率 as 86.2%.
    assert [o.rule for o in overrides] == ["verdict.ungrounded_number", "verdict.misbound_number"]


def test_a_no_hit_supports_only_that_nothing_matched(cases, store):
    case = cases["hikaricp_negative"]
    searched = "inventory-service connection pool exhausted active=30/30"

    def planner(user):
        return {"plan": gold_plan(case), "tool_calls": [{"tool_name": "query_logs", "query": searched,
                                                          "service": "inventory-service"}]}

    def echo_the_search(observations, attempt, user):
        (ref,) = [r for r in refs_in(observations) if r.raw_path is None]
        return {"claims": [{"claim_id": "claim-1", "claim_type": "negative_observation", "claim_text": searched,
                            "evidence_bindings": [{"tool_name": "query_logs", "source_invocation_id": ref.invocation_id,
                                                   "raw_path": None, "evidence_excerpt": ref.text}]}],
                "hypotheses": [], "missing_info": [], "recommended_actions": []}

    result = run(case, store, planner=planner, executor=echo_the_search)
    assert result.gatekeeper_result.status == "pass"  # the quote is real: the model's own words, echoed
    assert result.verdict == "LOW_CONFID" and result.claims[0].verification_status == "downgraded"
    overrides = store.get_session(result.session_id).self_evaluation.verifier_evaluation.code_overrides
    assert [o.rule for o in overrides] == ["verdict.no_hit_positive"]
    assert "exhausted" not in result.answer.replace(searched, "")


def test_a_negative_observation_is_answered_with_what_was_searched_not_the_lms_words(cases, store):
    case = cases["hikaricp_negative"]

    def embellish(observations, attempt, user):
        output = gold_executor_output(case, observations)
        output["claims"][0]["claim_text"] = "inventory-service 未检索到 HikariCP 记录，连接池一切正常"
        return output

    result = run(case, store, executor=embellish)
    assert result.verdict == "PASS"
    assert "一切正常" not in result.answer
    assert "inventory-service 的日志中没有与“HikariCP”匹配的记录（检索未找到）" in result.answer


def test_a_no_hit_answer_never_names_what_the_user_excluded(cases, store):
    case = cases["hikaricp_negative"]
    question = "只确认 inventory-service 是否存在 HighMemoryUsage 告警，不要分析慢查询。"

    def planner(user):
        return {"plan": gold_plan(case), "tool_calls": [{"tool_name": "query_metrics", "service": "inventory-service",
                                                          "alert_name": "HighMemoryUsage"}]}

    def negative(observations, attempt, user):
        (ref,) = [r for r in refs_in(observations) if r.raw_path is None]
        # A no-hit is evidence of one search: it names what was searched, never the catalog's alerts.
        assert "HighMemoryUsage" in ref.text and "SlowQuery" not in ref.text
        return {"claims": [{"claim_id": "claim-1", "claim_type": "negative_observation",
                            "claim_text": "inventory-service 没有 HighMemoryUsage 告警",
                            "evidence_bindings": [{"tool_name": "query_metrics", "source_invocation_id": ref.invocation_id,
                                                   "raw_path": None, "evidence_excerpt": ref.text}]}],
                "hypotheses": [], "missing_info": [], "recommended_actions": []}

    result = diagnose(question, lm=good_lm({**case, "question": question}, planner=planner, executor=negative), db=store)
    assert result.verdict == "PASS"
    assert mentions(result.answer, ["slowquery", "slow query", "慢查询"]) == []


def test_a_claim_whose_citations_were_all_backfilled_cannot_pass(cases, store):
    case = cases["high_memory_positive"]

    def omit_ids(observations, attempt, user):
        output = gold_executor_output(case, observations)
        output["claims"][0]["evidence_bindings"] = output["claims"][0]["evidence_bindings"][:1]
        output["claims"][0]["evidence_bindings"][0]["source_invocation_id"] = None
        return output

    result = run(case, store, executor=omit_ids)
    assert result.gatekeeper_result.status == "pass"  # raw_path and excerpt are real once the id is filled in
    assert "evidence.invocation_auto_backfill" in {w.rule for w in result.gatekeeper_result.warnings}
    assert result.verdict == "LOW_CONFID"
    overrides = store.get_session(result.session_id).self_evaluation.verifier_evaluation.code_overrides
    assert "verdict.backfill_only" in [o.rule for o in overrides]


def test_a_runbook_is_never_current_fact(cases, store):
    case = cases["hikaricp_positive"]

    def planner(user):
        return {"plan": gold_plan(case), "tool_calls": [{"tool_name": "lookup_knowledge", "query": "HikariCP 连接池耗尽"}]}

    def cite_the_runbook(observations, attempt, user):
        ref = next(r for r in refs_in(observations) if r.tool_name == "lookup_knowledge")
        return {"claims": [{"claim_id": "claim-1", "claim_type": "observation",
                            "claim_text": "order-service 存在 HikariCP 连接池耗尽",
                            "evidence_bindings": [{"tool_name": "lookup_knowledge", "source_invocation_id": ref.invocation_id,
                                                   "raw_path": ref.raw_path, "evidence_excerpt": ref.text}]}],
                "hypotheses": [], "missing_info": [], "recommended_actions": []}

    result = run(case, store, planner=planner, executor=cite_the_runbook)
    assert result.verdict == "LOW_CONFID"
    overrides = store.get_session(result.session_id).self_evaluation.verifier_evaluation.code_overrides
    assert "verdict.runbook_only" in [o.rule for o in overrides]


@pytest.mark.parametrize(("answer", "reason"), [
    ("order-service 的 HighMemoryUsage 告警已触发，内存 91%。Root cause confirmed: memory leak in OrderCache.",
     "OrderCache"),
    ("order-service 没有 HighMemoryUsage 告警。", "negates a verified claim"),
    ("order-service 的 Redis 主机上 HighMemoryUsage 告警已触发，内存 91%。", "the answer states Redis,"),
    ("order-service 的 HighMemoryUsage 告警已触发，内存 97%。", "97"),
    ("order-service 的 HighMemoryUsage 告警已触发，内存 91%。" * 40, "cap"),
])
def test_a_composed_answer_must_agree_with_and_stay_within_the_verified_claims(cases, store, answer, reason):
    case = broad(cases["high_memory_positive"], "排查 order-service 的内存告警情况。")
    result = run(case, store, composer=lambda u: {"answer": answer})
    assert result.verdict == "PASS" and result.composer_status == "replaced"
    reasons = store.get_session(result.session_id).composer_output.reasons
    assert any(reason in r for r in reasons), reasons
    assert "91%" in result.answer and "OrderCache" not in result.answer


def test_a_composer_error_keeps_the_evidence_verdict_and_answers_deterministically(cases, store):
    case = broad(cases["high_memory_positive"], "排查 order-service 的内存告警情况。")
    result = run(case, store, composer=lambda u: RuntimeError("composer down"))
    # The verdict is about evidence, which was verified; the answer falls back to the verified claims.
    assert result.verdict == "PASS" and result.composer_status == "fallback"
    assert "lm.composer.error" in {e.rule for e in result.errors} and "91%" in result.answer


def test_an_interrupted_run_is_recorded_as_interrupted(cases, store):
    case = cases["high_memory_positive"]
    with pytest.raises(KeyboardInterrupt):
        run(case, store, executor=lambda o, a, u: KeyboardInterrupt())
    (record,), _ = store.list_sessions()
    assert record.status == "interrupted" and [e.rule for e in record.errors] == ["pipeline.interrupted"]


def test_code_never_queries_a_service_the_user_excluded_in_words_the_markers_do_not_know(cases, store):
    case = cases["hikaricp_negative"]
    question = "Only confirm whether notification-service has a PodOOMKilled alert; leave order-service out of it."

    def planner(user):
        plan = {**gold_plan(case), "target_services": ["notification-service"], "topics": ["PodOOMKilled"],
                "excluded_topics": ["order-service"]}
        return {"plan": plan, "tool_calls": [
            {"tool_name": "query_metrics", "service": "notification-service", "alert_name": "PodOOMKilled"},
            {"tool_name": "query_logs", "query": "OOMKilled", "service": "order-service"}]}

    result = diagnose(question, lm=good_lm({**case, "question": question}, planner=planner), db=store)
    asked = [inv.input.get("service") for inv in store.list_invocations(result.session_id)]
    assert "order-service" not in asked and "notification-service" in asked
    notes = {n.rule for n in store.get_session(result.session_id).notes}
    assert "planner.excluded_call_skipped" in notes and "planner.named_alert_added" not in notes
    assert store.get_session(result.session_id).planner_output.excluded_topics == ["order-service"]


@pytest.mark.parametrize(("claim_text", "verdict"), [
    ("user-service 的 HighMemoryUsage 告警已是 resolved 状态，current=71%", "PASS"),
    ("user-service 的 HighMemoryUsage 告警仍然在 firing", "LOW_CONFID"),
])
def test_a_question_that_presumes_a_state_is_answered_with_the_state_the_evidence_shows(cases, store, claim_text,
                                                                                        verdict):
    case = cases["high_memory_positive"]
    question = "Does user-service still have a HighMemoryUsage alert firing? Only confirm that."

    def planner(user):
        return {"plan": {**gold_plan(case), "target_services": ["user-service"]},
                "tool_calls": [{"tool_name": "query_metrics", "service": "user-service", "alert_name": "HighMemoryUsage"}]}

    def cite_state(observations, attempt, user):
        ref = find_ref(observations, "resolved", "query_metrics")
        return {"claims": [{"claim_id": "claim-1", "claim_type": "observation", "claim_text": claim_text,
                            "evidence_bindings": [{"tool_name": "query_metrics", "source_invocation_id": ref.invocation_id,
                                                   "raw_path": ref.raw_path, "evidence_excerpt": ref.text}]}],
                "hypotheses": [], "missing_info": [], "recommended_actions": []}

    result = diagnose(question, lm=good_lm({**case, "question": question}, planner=planner, executor=cite_state),
                      db=store)
    assert result.verdict == verdict
    if verdict == "PASS":
        assert "resolved" in result.answer and result.language == "en"

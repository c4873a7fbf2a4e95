"""The checks as assertions: when code refuses a claim that a new attempt could fix, the executor is
asked once more, told why in the checks' own words; a second look's lines reach its menu; both
attempts are recorded and shown; the one the checks score higher is used (issue: the checks as DSPy
assertions)."""

import json

import pytest

from devset.gold import refs_in
from program.entry.api import diagnose
from program.entry.page import render_session
from program.evidence.checks import CITED_AGAIN, REVISABLE, _where_written_is, relocated
from program.evidence.citations import Menu
from program.lm.adapter import TEXT_MAX_CHARS, citation_patch
from program.evidence.relevance import Target, off_topic
from program.evidence.statements import state_conflicts
from program.stages.executor import REPEATS_KEPT
from contracts import Claim, ClaimDraft, EvidenceBinding, Finding, RetryContext
from tools.recorder import render_observations
from signatures.demos import REVISIONS, STATE_CONFLICT, STILL_FIRING, UNNAMED, for_language, retry_demos
from signatures.diagnosis import RETRY_INSTRUCTIONS
from tests.support.good_lm import good_lm
from tests.support.scripted import field_value, scripted_lm

CPU_QUESTION = "payment-service 的 HighCPUUsage 告警是不是已经恢复了？只确认。"


def cpu_case(cases):
    return {**cases["narrow_forbidden"], "question": CPU_QUESTION}


def point(observations: str, needle: str) -> str:
    (ref,) = [r for r in refs_in(observations) if r.raw_path and needle in r.text]
    return ref.label


def claim(claim_type: str, text: str, *labels: str) -> dict:
    """One claim; the lists a broad question's schema also asks for, empty."""
    return {"claims": [{"claim_type": claim_type, "evidence_bindings": list(labels), "claim_text": text}],
            "hypotheses": [], "missing_info": [], "recommended_actions": []}


def planner(*calls):
    return lambda user: {"plan": {"target_services": ["payment-service"], "topics": []}, "tool_calls": list(calls)}


CPU_LOOKUP = {"tool_name": "query_metrics", "service": "payment-service", "alert_name": "HighCPUUsage"}


def order_logs_lm(cases, question: str, query: str, executor):
    """The HikariCP case's LM, asked `question`, whose planner searches order-service's logs for `query`."""
    return good_lm({**cases["hikaricp_positive"], "question": question}, executor=executor, planner=lambda user: {
        "plan": {"target_services": ["order-service"], "topics": []},
        "tool_calls": [{"tool_name": "query_logs", "query": query, "service": "order-service"}]})


def test_a_claim_that_echoes_the_question_s_presumption_is_asked_again_told_why(cases, store):
    told = []

    def executor(observations, attempt, user):
        told.append(field_value(user, "retry_context"))
        label = point(observations, "HighCPUUsage firing")
        text = ("payment-service 的 HighCPUUsage 告警已经恢复了，当前 CPU 使用率 92%" if attempt == 1 else
                "payment-service 的 HighCPUUsage 告警仍在触发，当前 92%")
        return claim("observation", text, label)

    lm = good_lm(cpu_case(cases), planner=planner(CPU_LOOKUP), executor=executor)
    result = diagnose(CPU_QUESTION, lm=lm, db=store)
    assert result.verdict == "PASS" and result.claims[0].claim.claim_text.endswith("仍在触发，当前 92%")
    assert told[0] == "none"
    # Told in the checks' own words, never with the refused claim's text, which a small model copies.
    assert "verdict.state_conflict: the statement says the alert is not firing, but the alert it cites is firing" in told[1]
    assert "已经恢复了" not in told[1]
    record = store.get_session(result.session_id)
    first, second = record.executor_attempts
    assert (first.used, second.used) == (False, True)
    assert [f.rule for f in first.blocked] == ["verdict.state_conflict"]
    assert not [n for n in record.notes if "word for word" in n.message]
    assert second.retry_context.failed_rules == ["verdict.state_conflict"] and not second.blocked
    assert record.usage["executor"].lm_calls == 2
    assert any(n.rule == "executor.retry" and "attempt 2 is used" in n.message for n in record.notes)
    html = render_session(record, store.list_invocations(result.session_id))
    assert "Executor attempt 2 of 2" in html and "Executor attempt 1, not used" in html
    assert "已经恢复了" in html and "仍在触发" in html


def test_nothing_blocked_means_one_executor_call(cases, store):
    case = cases["high_memory_positive"]
    result = diagnose(case["question"], lm=good_lm(case), db=store)
    record = store.get_session(result.session_id)
    assert result.verdict == "PASS" and len(record.executor_attempts) == 1 and record.executor_attempts[0].used
    assert record.usage["executor"].lm_calls == 1
    assert not any(n.rule == "executor.retry" for n in record.notes)


def test_at_most_one_more_attempt_and_a_still_blocked_claim_names_what_was_found(cases, store):
    def executor(observations, attempt, user):
        return claim("observation", "payment-service 的 HighCPUUsage 告警已经恢复了", point(observations, "HighCPUUsage"))

    lm = good_lm(cpu_case(cases), planner=planner(CPU_LOOKUP), executor=executor)
    result = diagnose(CPU_QUESTION, lm=lm, db=store)
    record = store.get_session(result.session_id)
    assert result.verdict == "LOW_CONFID" and len(record.executor_attempts) == 2
    assert record.usage["executor"].lm_calls == 2
    (note,) = [n for n in record.notes if n.rule == "executor.retry"]
    assert "attempt 2 wrote the same claims word for word" in note.message
    # The evidence was found: the answer names the alert and its state, as not verified.
    assert "未检索到" not in result.answer
    assert "找到的证据如下（未核实）：\n- HighCPUUsage firing, service=payment-service" in result.answer


def test_the_attempt_the_checks_score_higher_is_used(cases, store):
    def executor(observations, attempt, user):
        if attempt == 1:
            return claim("observation", "payment-service 的 HighCPUUsage 告警当前 95%", point(observations, "HighCPUUsage"))
        return claim("observation", "payment-service 的 HighCPUUsage 告警正在触发", "#99 $.alerts[0]")

    lm = good_lm(cpu_case(cases), planner=planner(CPU_LOOKUP), executor=executor)
    result = diagnose(CPU_QUESTION, lm=lm, db=store)
    record = store.get_session(result.session_id)
    first, second = record.executor_attempts
    # The retry fabricated a citation (a reject); the first attempt, which code only refused, is used.
    assert second.gatekeeper_result.severity == "reject" and (first.used, second.used) == (True, False)
    assert result.verdict == "LOW_CONFID" and "verdict.ungrounded_number" in [f.rule for f in first.blocked]
    html = render_session(record, store.list_invocations(result.session_id))
    assert "Executor attempt 2, not used" in html and "evidence.unknown_label" in html


MIXED_QUESTION = "只确认 order-service 是否有 HighMemoryUsage 告警在触发，以及日志中是否有 Full GC。"
MIXED_CALLS = planner({"tool_name": "query_metrics", "service": "order-service", "alert_name": "HighMemoryUsage"},
                      {"tool_name": "query_logs", "query": "Full GC", "service": "order-service"})
ALERT_CLAIM = "order-service 的 HighMemoryUsage 告警正在触发：current=91%。"


def test_what_code_let_through_stands_and_the_retry_revises_only_what_was_refused(cases, store):
    """The 1.5B, asked to point after one of two claims was refused, pointed again at the alert of the
    claim that had passed and left out the refused one (results/20261207T120521Z). The claim that
    passed now stands as it was, the retry is told so and is not offered its refs, and what it
    writes is added beside it."""
    told, offered = [], []

    def executor(observations, attempt, user):
        alert, gc = point(observations, "HighMemoryUsage firing"), point(observations, "Full GC 次数")
        told.append(field_value(user, "retry_context"))
        if attempt == 1:
            return {"claims": [{"claim_type": "observation", "evidence_bindings": [alert], "claim_text": ALERT_CLAIM},
                               {"claim_type": "negative_observation", "evidence_bindings": [gc],
                                "claim_text": "order-service 的日志中未检索到 Full GC。"}], "missing_info": []}
        return claim("observation", "", gc)

    lm = good_lm({**cases["high_memory_positive"], "question": MIXED_QUESTION}, planner=MIXED_CALLS,
                 executor=executor)
    result = diagnose(MIXED_QUESTION, lm=lm, db=store)
    record = store.get_session(result.session_id)
    first, second = record.executor_attempts
    assert [f.rule for f in first.blocked] == ["verdict.absence_on_hit"]
    assert second.used and second.retry_context.kept == ["claim-1"]
    assert "claim-1 passed the checks and stands as written" in told[1]
    assert [c.claim_text for c in second.executor_output.claims] == [
        ALERT_CLAIM, "证据显示：[11:15][WARN][order-service] Full GC 次数: 15 (近15m), 平均停顿: 850ms"]
    assert result.verdict == "PASS" and [c.verification_status for c in result.claims] == ["verified", "verified"]
    html = render_session(record, store.list_invocations(result.session_id))
    assert html.count("It stands from the attempt before") == 1
    assert "What code let through in attempt 1 stands: claim-1." in html


def test_a_retry_under_a_schema_is_not_offered_what_stands(cases, store, monkeypatch):
    monkeypatch.setattr("program.stages.pipeline.narrows", lambda lm: True)
    schemas = []

    def executor(observations, attempt, user):
        alert, gc = point(observations, "HighMemoryUsage firing"), point(observations, "Full GC 次数")
        if attempt == 1:
            return {"claims": [{"claim_type": "observation", "evidence_bindings": [alert], "claim_text": ALERT_CLAIM},
                               {"claim_type": "observation", "evidence_bindings": [gc],
                                "claim_text": "order-service 的日志显示 Full GC 40 次。"}], "missing_info": []}
        return claim("observation", "", gc)

    lm = good_lm({**cases["high_memory_positive"], "question": MIXED_QUESTION}, planner=MIXED_CALLS,
                 executor=executor)
    complete = lm.engine.complete

    def recorded(request):
        schemas.append(json.dumps(request.config.response_format or {}, ensure_ascii=False))
        return complete(request)

    monkeypatch.setattr(lm.engine, "complete", recorded)
    result = diagnose(MIXED_QUESTION, lm=lm, db=store)
    record = store.get_session(result.session_id)
    alert = point(render_observations(store.list_invocations(result.session_id)), "HighMemoryUsage firing")
    first, second = record.executor_attempts
    assert second.retry_context.kept == ["claim-1"]
    retry_schema = next(s for s in reversed(schemas) if '"const": ""' in s)
    assert alert not in retry_schema and alert in schemas[1]
    assert result.verdict == "PASS" and len(result.claims) == 2


def test_a_retry_that_points_only_at_what_stands_adds_nothing(cases, store):
    """A retry under no schema may cite what it was not offered: a claim citing only what a claim that
    stands cites is left out, and the record says so."""
    def executor(observations, attempt, user):
        alert, gc = point(observations, "HighMemoryUsage firing"), point(observations, "Full GC 次数")
        if attempt == 1:
            return {"claims": [{"claim_type": "observation", "evidence_bindings": [alert], "claim_text": ALERT_CLAIM},
                               {"claim_type": "negative_observation", "evidence_bindings": [gc],
                                "claim_text": "order-service 的日志中未检索到 Full GC。"}], "missing_info": []}
        return claim("observation", "", alert)

    lm = good_lm({**cases["high_memory_positive"], "question": MIXED_QUESTION}, planner=MIXED_CALLS,
                 executor=executor)
    result = diagnose(MIXED_QUESTION, lm=lm, db=store)
    record = store.get_session(result.session_id)
    first, second = record.executor_attempts
    assert [c.claim_text for c in second.executor_output.claims] == [ALERT_CLAIM] and second.drafts == []
    assert [n.rule for n in record.notes if n.rule == REPEATS_KEPT] == [REPEATS_KEPT]
    assert [c.claim.claim_text for c in result.claims if c.verification_status == "verified"] == [ALERT_CLAIM]


def test_no_retry_when_what_stands_cites_every_ref_left(cases, store):
    """Code refused one of two claims on the same alert: what passed answers, and a new attempt could
    only point at that alert again, so none is asked for."""
    def executor(observations, attempt, user):
        label = point(observations, "HighCPUUsage")
        return {"claims": [{"claim_type": "observation", "evidence_bindings": [label],
                            "claim_text": "payment-service 的 HighCPUUsage 告警正在触发，当前 92%"},
                           {"claim_type": "observation", "evidence_bindings": [label],
                            "claim_text": "payment-service 的 HighCPUUsage 告警当前 95%"}], "missing_info": []}

    lm = good_lm(cpu_case(cases), planner=planner(CPU_LOOKUP), executor=executor)
    result = diagnose(CPU_QUESTION, lm=lm, db=store)
    record = store.get_session(result.session_id)
    (only,) = record.executor_attempts
    assert only.used and record.usage["executor"].lm_calls == 1
    assert result.verdict == "PASS" and [c.verification_status for c in result.claims] == ["verified", "downgraded"]


def test_a_line_the_second_look_found_reaches_the_retry_s_menu(cases, store):
    question = "Did order-service log any database connection timeouts?"
    seen = []

    def executor(observations, attempt, user):
        seen.append(observations)
        if attempt == 1:
            (no_hit,) = [r for r in refs_in(observations) if r.raw_path is None]
            return claim("negative_observation", "order-service 的日志中没有数据库超时记录", no_hit.label)
        return claim("observation", "order-service logged: HikariPool-1 - Connection is not available, request timed "
                     "out after 30000ms", point(observations, "HikariPool-1"))

    result = diagnose(question, lm=order_logs_lm(cases, question, "database timeout", executor), db=store)
    assert "HikariPool-1" not in seen[0] and "HikariPool-1" in seen[1]
    record = store.get_session(result.session_id)
    assert record.executor_attempts[1].retry_context.failed_rules == ["verdict.second_look"]
    assert result.verdict == "PASS" and "30000ms" in result.answer
    # The line is verified now, so it is no longer listed as a possible match.
    assert "may be what was asked about" not in result.answer


def test_an_attempt_that_wrote_no_claim_beside_a_search_that_found_nothing_gets_the_second_look(cases, store):
    """The 1.5B on a broad question: no claim, and "nothing found" put in missing_info. That is an
    all-clear by omission, so code looks again as for a negative observation, and a line it finds
    reaches the retry's menu."""
    question = "Did order-service log any database connection timeouts?"
    told = []

    def executor(observations, attempt, user):
        told.append(field_value(user, "retry_context"))
        if attempt == 1:
            return {"claims": [], "hypotheses": [], "recommended_actions": [],
                    "missing_info": [{"info_id": "missing-1", "description": "未找到任何数据库连接超时日志。"}]}
        return claim("observation", "order-service logged: HikariPool-1 - Connection is not available, request timed "
                     "out after 30000ms", point(observations, "HikariPool-1"))

    result = diagnose(question, lm=order_logs_lm(cases, question, "database timeout", executor), db=store)
    record = store.get_session(result.session_id)
    assert len(record.executor_attempts) == 2
    assert record.executor_attempts[1].retry_context.failed_rules == ["verdict.second_look"]
    assert "Refused: the output\n- verdict.second_look" in told[1] and "HikariPool-1" in told[1]
    assert result.verdict == "PASS" and "30000ms" in result.answer


def test_an_attempt_that_wrote_no_claim_is_not_retried_when_the_second_look_finds_nothing(cases, store):
    question = "Did order-service log any disk quota errors?"

    def executor(observations, attempt, user):
        return {"claims": [], "hypotheses": [], "recommended_actions": [], "missing_info": []}

    result = diagnose(question, lm=order_logs_lm(cases, question, "disk quota", executor), db=store)
    record = store.get_session(result.session_id)
    assert len(record.executor_attempts) == 1 and result.verdict == "LOW_CONFID"
    # The look was made and recorded, and found nothing.
    assert [n for n in record.notes if n.rule == "verdict.second_look_search"]


def test_a_retry_that_keeps_saying_nothing_was_found_while_citing_the_line_is_not_verified(cases, store):
    """The 1.5B's retry after a second look: the claim made an observation citing the line found,
    with its "nothing found" text kept. Code reads what the text says, whatever the type."""
    question = "Did order-service log any database connection timeouts?"

    def executor(observations, attempt, user):
        if attempt == 1:
            (no_hit,) = [r for r in refs_in(observations) if r.raw_path is None]
            return claim("negative_observation", "No database connection timeout log lines were found for order-service.",
                         no_hit.label)
        return claim("observation", "No database connection timeout log lines were found for order-service.",
                     point(observations, "HikariPool-1"))

    result = diagnose(question, lm=order_logs_lm(cases, question, "database timeout", executor), db=store)
    record = store.get_session(result.session_id)
    assert [f.rule for f in record.executor_attempts[1].blocked] == ["verdict.absence_on_hit"]
    assert result.verdict == "LOW_CONFID" and not [c for c in result.claims if c.verification_status == "verified"]
    # What was found is still named, as found and not verified.
    assert "HikariPool-1 - Connection is not available" in result.answer


def test_a_healthy_pool_called_exhausted_is_refused_and_the_retry_told_why_answers_right(store):
    """What the 1.5B verifier passed on ledger-service: code refuses "已耗尽" on a line whose
    measure is below its limit, tells the retry so, and the retry's "未耗尽" is the answer."""
    from devset import devset_world, load_devset

    with devset_world():
        case = next(c for c in load_devset() if c["case_id"] == "near_miss_ledger_zh")
    told = []

    def executor(observations, attempt, user):
        stats = point(observations, "HikariCP pool stats")
        if attempt == 1:
            return claim("observation", "ledger-service 的连接池已耗尽：active=14/50, waiting=0。", stats)
        told.append(field_value(user, "retry_context"))
        return claim("observation", "ledger-service 的连接池未耗尽：active=14/50, waiting=0。", stats)

    with devset_world():
        result = diagnose(case["question"], lm=good_lm(case, executor=executor), db=store, compiled=False)
    assert "verdict.below_limit" in told[0] and "14/50" in told[0]
    assert result.verdict == "PASS" and "未耗尽" in result.answer and "已耗尽" not in result.answer
    first, second = store.get_session(result.session_id).executor_attempts
    assert [f.rule for f in first.blocked] == ["verdict.below_limit"] and second.used


def _near_miss(case_id: str = "near_miss_ledger_zh") -> dict:
    from devset import load_devset

    return next(c for c in load_devset() if c["case_id"] == case_id)


def _ledger_pool(store, first_text: str, *retry_points: str):
    """near_miss_ledger_zh, whose first attempt writes `first_text` citing the slow-query line beside the
    pool stats, and whose retry points, with no text, at the lines named (`stats`, `slow`)."""
    from devset import devset_world

    case, told = _near_miss(), []

    def executor(observations, attempt, user):
        labels = {"stats": point(observations, "HikariCP pool stats"), "slow": point(observations, "Slow query")}
        if attempt == 1:
            return claim("observation", first_text, labels["slow"])
        told.append(field_value(user, "retry_context"))
        return claim("observation", "", *(labels[name] for name in retry_points))

    with devset_world():
        result = diagnose(case["question"], lm=good_lm(case, executor=executor), db=store, compiled=False)
    return result, store.get_session(result.session_id), told


def test_a_claim_refused_only_for_citing_the_line_beside_its_figures_stands_where_the_retry_points(store):
    """per_kind's first attempts said "not exhausted" with the figures of the pool line and cited the
    line beside it; the retry pointed at the pool line with no text, so the "no" was lost (three
    held-out near misses of results/20261207T160757Z). Code said where the figures are, the retry
    pointed there alone, so the refused claim's own words stand on that line, checked again."""
    text = "ledger-service 的连接池未耗尽：active=14/50, waiting=0。"
    result, record, told = _ledger_pool(store, text, "stats")
    first, second = record.executor_attempts
    (move,) = second.retry_context.relocated
    assert move.repointable and "14/50" in " ".join(move.written) and move.holding in told[0]
    assert [d.claim_text for d in second.drafts] == [""]
    assert [c.claim_text for c in second.executor_output.claims] == [text]
    assert ["HikariCP pool stats" in b.evidence_excerpt for b in second.executor_output.claims[0].evidence_bindings] == [True]
    assert "Slow query" in first.executor_output.claims[0].evidence_bindings[0].evidence_excerpt
    assert second.used and result.verdict == "PASS" and "未耗尽" in result.answer
    assert [n.rule for n in record.notes if n.rule == "executor.repointed"] == ["executor.repointed"]


def test_a_retry_that_points_at_more_than_the_line_holding_the_figures_keeps_code_s_quote(store):
    """Pointing at the pool line and the slow-query line is not the move code named: the retry's
    claim is code's quote, and the refused words are not used."""
    result, record, _ = _ledger_pool(store, "ledger-service 的连接池未耗尽：active=14/50, waiting=0。", "stats", "slow")
    second = record.executor_attempts[1]
    assert all("未耗尽" not in c.claim_text for c in second.executor_output.claims)
    assert "executor.repointed" not in [n.rule for n in record.notes]


def test_a_repointed_claim_is_checked_again_on_the_line_it_now_cites(store):
    """"已耗尽" with the pool's figures, cited on the line beside them, is refused only for the
    figures; moved onto the pool line, code reads them below their limit and refuses it there."""
    result, record, _ = _ledger_pool(store, "ledger-service 的连接池已耗尽：active=14/50, waiting=0。", "stats")
    second = record.executor_attempts[1]
    assert [c.claim_text for c in second.executor_output.claims] == ["ledger-service 的连接池已耗尽：active=14/50, waiting=0。"]
    assert "verdict.below_limit" in [f.rule for f in second.blocked]
    assert result.verdict != "PASS" and "已耗尽" not in result.answer


def test_no_word_of_an_attempt_the_gatekeeper_rejected_is_used_again(store):
    """A fabricated quote in one claim discredits the attempt: the other claim, refused only for
    citing the line beside its figures, does not stand where the retry points."""
    from devset import devset_world

    case = _near_miss()

    def executor(observations, attempt, user):
        stats, slow = point(observations, "HikariCP pool stats"), point(observations, "Slow query")
        if attempt == 2:
            return claim("observation", "", stats)
        invocation = int(slow.split()[0].lstrip("#"))
        fabricated = {"tool_name": "query_logs", "source_invocation_id": invocation, "raw_path": slow.split()[1],
                      "evidence_excerpt": "HikariCP pool exhausted: active=50/50"}
        return {"claims": [
            {"claim_type": "observation", "evidence_bindings": [slow], "claim_text": "ledger-service 的连接池未耗尽：active=14/50, waiting=0。"},
            {"claim_type": "observation", "evidence_bindings": [fabricated], "claim_text": "ledger-service 的连接池已耗尽。"}],
            "hypotheses": [], "missing_info": [], "recommended_actions": []}

    with devset_world():
        result = diagnose(case["question"], lm=good_lm(case, executor=executor), db=store, compiled=False)
    record = store.get_session(result.session_id)
    first, second = record.executor_attempts
    assert first.gatekeeper_result.severity == "reject"
    assert any(m.repointable for m in second.retry_context.relocated)
    assert all("未耗尽" not in c.claim_text for c in second.executor_output.claims)
    assert "executor.repointed" not in [n.rule for n in record.notes]


def test_a_claim_is_repointable_only_when_one_ref_holds_all_it_wrote_and_nothing_else_refused_it():
    def moves(rules: list[str], offered: dict[str, str]):
        claim = Claim(claim_id="c1", claim_type="observation", claim_text="pool active=14/50, waiting=0",
                      evidence_bindings=[EvidenceBinding(tool_name="query_logs", source_invocation_id=1,
                                                         raw_path="$.logs[0]", evidence_excerpt="Slow query took 900ms")])
        context = RetryContext(attempt=1, failed_rules=rules, errors=[Finding(rule=r, claim_id="c1", message="-") for r in rules])
        return [(m.holding, m.repointable) for m in relocated(context, [claim], offered)]

    stats = "HikariCP pool stats: active=14/50, idle=36, waiting=0"
    one = {"#1 $.logs[0]": "Slow query took 900ms", "#1 $.logs[1]": stats}
    assert moves(["verdict.ungrounded_number"], one) == [("#1 $.logs[1]", True)]
    assert moves(["verdict.ungrounded_number", "verdict.ungrounded_name"], one) == [("#1 $.logs[1]", True)]
    assert moves(["verdict.ungrounded_number", "verdict.off_topic"], one) == [("#1 $.logs[1]", False)]
    assert moves(["verdict.ungrounded_number"], {**one, "#1 $.logs[2]": stats}) == [
        ("#1 $.logs[1]", False), ("#1 $.logs[2]", False)]
    assert moves(["verdict.ungrounded_number"], {**one, "#1 $.logs[1]": "HikariCP pool stats: active=14/50"}) == [
        ("#1 $.logs[1]", False)]


def test_a_search_that_left_lines_unread_is_not_retried():
    """No wording can prove an absence the search did not read for."""
    assert "verdict.unread_search" not in REVISABLE
    assert {"verdict.state_conflict", "verdict.absence_on_hit", "verdict.ungrounded_number", "verdict.misbound_number",
            "verdict.off_topic", "verdict.ungrounded_name", "verdict.second_look", "verdict.below_limit"} <= REVISABLE


def test_a_state_denied_on_the_alert_that_shows_it_is_verified_without_a_retry(cases, store):
    question = "api-gateway 现在还有 HighErrorRate 告警在触发吗？只确认这一点。"

    def executor(observations, attempt, user):
        return claim("observation", "api-gateway 现在没有 HighErrorRate 告警在触发。", point(observations, "HighErrorRate"))

    lm = good_lm({**cases["narrow_forbidden"], "question": question}, executor=executor, planner=lambda user: {
        "plan": {"target_services": ["api-gateway"], "topics": ["HighErrorRate"]},
        "tool_calls": [{"tool_name": "query_metrics", "service": "api-gateway", "alert_name": "HighErrorRate"}]})
    result = diagnose(question, lm=lm, db=store)
    record = store.get_session(result.session_id)
    assert result.verdict == "PASS" and len(record.executor_attempts) == 1
    assert "HighErrorRate resolved, service=api-gateway" in result.answer


def test_a_verified_negative_reads_as_an_answer_in_both_languages(cases, store):
    for question, said in (("Does payment-service have a HighMemoryUsage alert?",
                            "- payment-service has no HighMemoryUsage alert (the lookup found none)"),
                           ("payment-service 有 HighMemoryUsage 告警吗？", "- payment-service 没有 HighMemoryUsage 告警（查询未找到）")):
        def executor(observations, attempt, user):
            (no_hit,) = [r for r in refs_in(observations) if r.raw_path is None]
            return claim("negative_observation", "未找到 payment-service 的 HighMemoryUsage 告警", no_hit.label)

        lm = good_lm({**cases["hikaricp_negative"], "question": question}, executor=executor, planner=lambda user: {
            "plan": {"target_services": [], "topics": []},
            "tool_calls": [{"tool_name": "query_metrics", "service": "payment-service", "alert_name": "HighMemoryUsage"}]})
        result = diagnose(question, lm=lm, db=store)
        assert result.verdict == "PASS", result.answer
        assert said in result.answer and "No real evidence found" not in result.answer
        assert "未检索到真实证据" not in result.answer


def test_claim_drafts_of_both_attempts_are_kept(cases, store):
    def executor(observations, attempt, user):
        label = point(observations, "HighCPUUsage")
        return claim("observation", "payment-service 的 HighCPUUsage 告警已恢复" if attempt == 1 else
                     "payment-service 的 HighCPUUsage 告警正在触发", label)

    result = diagnose(CPU_QUESTION, lm=good_lm(cpu_case(cases), planner=planner(CPU_LOOKUP), executor=executor),
                      db=store)
    drafts = [a.drafts for a in store.get_session(result.session_id).executor_attempts]
    assert [[ClaimDraft.model_validate(d).claim_text for d in ds] for ds in drafts] == [
        ["payment-service 的 HighCPUUsage 告警已恢复"], ["payment-service 的 HighCPUUsage 告警正在触发"]]


def test_the_retry_is_asked_anew_and_never_shown_the_refused_attempt_as_an_answer(store):
    """Shown its refused answer as the turn before, beside the same inputs, the 1.5B copied it word for
    word in five of seven retries (bench-20261202T024922Z). The retry is asked with its own
    instructions and the worked revisions in its language; the refused claim is in the retry context only, as an
    attempt not to repeat, with what it cited."""
    seen = []

    def respond(stage, user, demos):
        if stage == "plan":
            return {"plan": {"target_services": ["payment-service"], "topics": []}, "tool_calls": [CPU_LOOKUP]}
        if stage == "claims":
            seen.append((user, demos))
            label = point(field_value(user, "observations"), "HighCPUUsage")
            text = "payment-service 的 HighCPUUsage 告警已恢复" if len(seen) == 1 else "payment-service 的 HighCPUUsage 告警正在触发"
            return claim("observation", text, label)
        return {"judgement": "supported", "reason": ""}

    lm = scripted_lm(respond)
    result = diagnose(CPU_QUESTION, lm=lm, db=store)
    assert result.verdict == "PASS"
    (first_user, first_demos), (second_user, second_demos) = seen
    executor_systems = [system for (stage, _), system in zip(lm.engine.calls, lm.engine.systems) if stage == "claims"]
    assert " ".join(RETRY_INSTRUCTIONS.split()) in " ".join(executor_systems[1].split())
    assert "This is a new attempt" not in executor_systems[0]
    # The shipped demos, then the worked revisions, each in the question's language (two turns each);
    # no demo holds the refused claim.
    revisions = for_language(retry_demos(), "zh")
    assert len(revisions) == 3 and {d.language for d in retry_demos()} == {"zh", "en"}
    assert second_demos[:len(first_demos)] == first_demos and len(second_demos) == len(first_demos) + 2 * len(revisions)
    assert all("[[ ## language ## ]]\nzh" in d for d in second_demos if "[[ ## language ## ]]" in d)
    assert not [d for d in second_demos if "告警已恢复" in d]
    told = field_value(second_user, "retry_context")
    label = point(field_value(second_user, "observations"), "HighCPUUsage")
    assert f"Refused claim-1: the observation citing {label}\n" in told and "告警已恢复" not in told
    assert "- verdict.state_conflict: the statement says the alert is not firing" in told
    # What the claim cited is said last, nearest to where the model writes.
    assert told.endswith(f"- {label} shows: HighCPUUsage firing, service=payment-service, current=92%, "
                         "threshold=80%, duration=12m")


def test_a_retry_that_writes_the_refused_claims_again_is_no_revision(cases, store):
    """Counted as no revision: the record says so, and the attempt it repeats is the one used; still
    only one more call."""
    def executor(observations, attempt, user):
        return claim("observation", "payment-service 的 HighCPUUsage 告警已经恢复了", point(observations, "HighCPUUsage"))

    lm = good_lm(cpu_case(cases), planner=planner(CPU_LOOKUP), executor=executor)
    result = diagnose(CPU_QUESTION, lm=lm, db=store)
    record = store.get_session(result.session_id)
    first, second = record.executor_attempts
    assert (first.repeated, second.repeated) == (False, True) and (first.used, second.used) == (True, False)
    assert record.usage["executor"].lm_calls == 2 and result.verdict == "LOW_CONFID"
    (note,) = [n for n in record.notes if n.rule == "executor.retry"]
    assert "word for word (no revision)" in note.message and "attempt 1 is used" in note.message


def test_a_negative_refused_for_its_wording_still_gets_the_second_look(cases, store):
    """The real-logs ask: the planner searched words the logs do not use, the all-clear was refused
    (off topic), and the second look never ran, so the retry had no line to cite. Now it runs for
    every negative resting on a log no-hit, and the retry is pointed at what it found."""
    question = "Did order-service log HikariCP connection timeouts?"
    told, seen = [], []

    def executor(observations, attempt, user):
        told.append(field_value(user, "retry_context"))
        seen.append(observations)
        if attempt == 1:
            (no_hit,) = [r for r in refs_in(observations) if r.raw_path is None]
            return claim("negative_observation", "No connection count log lines were found for order-service.",
                         no_hit.label)
        return claim("observation", "order-service logged a connection timeout: HikariPool-1 - Connection is not "
                     "available, request timed out after 30000ms", point(observations, "HikariPool-1"))

    result = diagnose(question, lm=order_logs_lm(cases, question, "连接数", executor), db=store)
    record = store.get_session(result.session_id)
    first = record.executor_attempts[0]
    assert [f.rule for f in first.blocked] == ["verdict.off_topic", "verdict.second_look"]
    assert "HikariPool-1" in seen[1] and f"found {point(seen[1], 'HikariPool-1')}:" in told[1]
    assert result.verdict == "PASS" and "30000ms" in result.answer
    assert record.usage["executor"].lm_calls == 2


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_worked_revisions_quote_the_checks_as_they_word_their_findings(language):
    """Each demo's findings are what the checks say of its refused claim, and its revision points at a
    ref whose quote they let through; the states go both ways, so no state word is the lesson; each
    language has all three; no demo shows the refused claim's text."""
    resolved, firing, looked = for_language(retry_demos(), language)
    (_, resolved_text), (_, firing_text), (_, looked_text) = (r[0][language] for r in REVISIONS)
    target = Target(services=("checkout-service",), topics=())
    for demo, refused, state, expected in ((resolved, resolved_text, "resolved", [STILL_FIRING]),
                                           (firing, firing_text, "firing", [STATE_CONFLICT])):
        ref = demo.invocations[0].retrieval_details.evidence_refs[0]
        assert ref.text.startswith(f"DiskPressure {state}")
        assert state_conflicts(refused, {state}, [ref.text]) == expected
        assert all(f"verdict.state_conflict: {m}" in demo.retry_context for m in expected)
        (revision,), _ = Menu(demo.invocations).expand(demo.claims, language)
        assert demo.claims[0].claim_text == "" and f"DiskPressure {state}" in revision.claim_text
        assert state_conflicts(revision.claim_text, {state}, [ref.text]) == []
        assert off_topic(revision.claim_text, [ref.text], target) is None
    assert off_topic(resolved_text, [], target) == UNNAMED and UNNAMED in resolved.retry_context
    assert not [d for d, text in ((resolved, resolved_text), (firing, firing_text), (looked, looked_text))
                if text in d.retry_context]
    assert looked.claims[0].evidence_bindings == ["#6 $.logs[0]"] and "found #6 $.logs[0]" in looked.retry_context


@pytest.mark.parametrize("narrowed", [True, False])
def test_a_claim_cut_off_at_the_schema_s_length_is_asked_again_shorter(cases, store, monkeypatch, narrowed):
    """Under the narrowed schema a claim text ends at its cap, often mid-word (slow_orders_endpoint_en:
    "GET /api/v1/usersorders"): that is not the statement the model was writing, so it is refused as
    cut off, and the retry is told to say it in fewer words. Unnarrowed, the same length is no cut."""
    monkeypatch.setattr("program.stages.pipeline.narrows", lambda lm: narrowed)
    long = ("payment-service 的 HighCPUUsage 告警正在触发，当前 92%，" * 20)[:TEXT_MAX_CHARS]
    told = []

    def executor(observations, attempt, user):
        told.append(field_value(user, "retry_context"))
        return claim("observation", long if attempt == 1 else "payment-service 的 HighCPUUsage 告警正在触发，当前 92%",
                     point(observations, "HighCPUUsage firing"))

    result = diagnose(CPU_QUESTION, lm=good_lm(cpu_case(cases), planner=planner(CPU_LOOKUP), executor=executor), db=store)
    record = store.get_session(result.session_id)
    assert result.verdict == "PASS"
    if narrowed:
        first, second = record.executor_attempts
        assert [f.rule for f in first.blocked] == ["verdict.cut_off"] and second.used
        assert f"cut off at {TEXT_MAX_CHARS} characters" in told[1] and long not in told[1]
        assert result.claims[0].claim.claim_text.endswith("当前 92%")
    else:
        (only,) = record.executor_attempts
        assert only.blocked == [] and result.claims[0].claim.claim_text == long


def test_a_retry_points_and_code_quotes_what_it_points_at(cases, store, monkeypatch):
    """The retry writes no text, under a schema that allows none: the 1.5B echoed the question's
    presumption in every retry it wrote ("was resolved this morning, current=91%" of a firing alert,
    bench-20261202T115841Z). Code quotes the alert pointed at, in the answer's language, and that
    quote is what is checked and verified."""
    monkeypatch.setattr("program.stages.pipeline.narrows", lambda lm: True)

    def executor(observations, attempt, user):
        label = point(observations, "HighCPUUsage firing")
        return claim("observation", "payment-service 的 HighCPUUsage 告警已经恢复了" if attempt == 1 else "", label)

    lm = good_lm(cpu_case(cases), planner=planner(CPU_LOOKUP), executor=executor)
    result = diagnose(CPU_QUESTION, lm=lm, db=store)
    record = store.get_session(result.session_id)
    first, second = record.executor_attempts
    assert second.used and second.drafts[0].claim_text == ""
    (verified,) = result.claims
    assert verified.claim.claim_text == "证据显示：HighCPUUsage firing, service=payment-service, current=92%, " \
                                        "threshold=80%, duration=12m"
    assert result.verdict == "PASS"
    html = render_session(record, store.list_invocations(result.session_id))
    assert html.count("wrote no text: the claim is code's quote of what it pointed at") == 1


def test_a_retry_that_cites_again_what_lacked_the_facts_it_was_told_where_to_find_is_refused(cases, store):
    """Told that the pool stats it wrote are on another line, the retry points at the timeout line it
    cited before: code's quote of that line is not what the refused claim answered, and nothing is
    verified; the record says where the facts were."""
    labels = {}

    def executor(observations, attempt, user):
        labels.update(timeout=point(observations, "Connection is not available"), stats=point(observations, "pool stats"))
        return claim("observation", "order-service 的 HikariCP 连接池已耗尽：active=50/50, waiting=32。"
                     if attempt == 1 else "", labels["timeout"])

    question = "确认 order-service 是否存在 HikariCP 连接池耗尽。"
    result = diagnose(question, lm=order_logs_lm(cases, question, "HikariCP", executor), db=store)
    assert result.verdict == "LOW_CONFID"
    first, second = store.get_session(result.session_id).executor_attempts
    (moved,) = second.retry_context.relocated
    assert (moved.cited, moved.holding) == ([labels["timeout"]], labels["stats"])
    assert [f.message for f in second.blocked if f.rule == CITED_AGAIN] == [
        f"attempt 1 wrote HikariCP, active=50/50, waiting=32 citing {labels['timeout']}, which lacks them; they are "
        f"in {labels['stats']}, and this claim cites {labels['timeout']} again"]


def test_only_a_retry_s_schema_forbids_claim_text():
    """The first attempt writes its claims; the retry's schema allows claim_text only empty."""
    calls = retry_demos()[0].invocations
    menu = Menu(calls)
    for pointing, allowed in ((False, {"type": "string", "maxLength": TEXT_MAX_CHARS}), (True, {"const": ""})):
        schema = citation_patch(menu, narrow=True, pointing=pointing)(
            {"properties": {"claims": {"type": "array"}}, "$defs": {"ClaimDraft": {}}})
        assert [b["properties"]["claim_text"] for b in schema["$defs"]["ClaimDraft"]["anyOf"]] == [allowed]


def test_a_retry_is_told_where_the_numbers_it_wrote_are(cases, store):
    """The numbers of the pool stats written on the timeout line beside them: refused, and the retry
    is told which line holds them, and points at it."""
    told, labels = [], {}

    def executor(observations, attempt, user):
        told.append(field_value(user, "retry_context"))
        labels.update(timeout=point(observations, "Connection is not available"), stats=point(observations, "pool stats"))
        if attempt == 1:
            return claim("observation", "order-service 的 HikariCP 连接池已耗尽：active=50/50, waiting=32。",
                         labels["timeout"])
        return claim("observation", "", labels["stats"])

    question = "确认 order-service 是否存在 HikariCP 连接池耗尽。"
    result = diagnose(question, lm=order_logs_lm(cases, question, "HikariCP", executor), db=store)
    assert told[0] == "none" and "verdict.ungrounded_number" in told[1]
    assert f"- HikariCP, active=50/50, waiting=32, which it wrote, are in {labels['stats']}" in told[1].splitlines()
    assert result.verdict == "PASS" and "active=50/50" in result.answer


def test_a_number_of_its_own_is_located_beside_a_name_that_holds_its_digits():
    """5 beside active=50/50 is a number the claim wrote, not part of the name, and the retry is told
    where each is; the 1 of /api/v1 is said once, with the path."""
    def written(text: str, cited: str, offered: dict[str, str]):
        claim = Claim(claim_id="c1", claim_type="observation", claim_text=text, evidence_bindings=[EvidenceBinding(
            tool_name="query_logs", source_invocation_id=1, raw_path="$.logs[0]", evidence_excerpt=cited)])
        return _where_written_is(claim, offered)[0]

    timeout = "HikariPool-1 - Connection is not available, request timed out after 30000ms"
    assert written("连接池已耗尽：active=50/50，5 个线程在等待", timeout, {
        "#1 $.logs[0]": timeout, "#1 $.logs[1]": "HikariCP pool stats: active=50/50",
        "#1 $.logs[2]": "HikariPool-1 - threads waiting=5"}) == [
        ("#1 $.logs[1]", ["active=50/50"]), ("#1 $.logs[2]", ["5"])]
    other = "Slow request: GET /api/v1/users/7 took 2000ms"
    located = written("GET /api/v1/checkout/preview took 2950ms", other, {
        "#1 $.logs[0]": other, "#1 $.logs[1]": "Slow request: GET /api/v1/checkout/preview took 2950ms"})
    assert len(located) == 1 and "1" not in located[0][1] and "2950ms" in located[0][1]


def test_an_asked_thing_left_unsaid_beside_a_search_that_found_nothing_is_asked_for_again(cases, store):
    """Two things asked, one answered: the alert, and not the log search that found nothing (both
    English `mixed` cases of per_kind in results/20261207T120521Z). Code tells the retry what was
    left unanswered and where "nothing found" is; the alert's claim stands."""
    question = "Only confirm whether order-service has a HighMemoryUsage alert firing, and whether its logs show OutOfMemoryError."
    told = []

    def executor(observations, attempt, user):
        told.append(field_value(user, "retry_context"))
        if attempt == 1:
            return claim("observation", "order-service's HighMemoryUsage alert is firing: current=91%.",
                         point(observations, "HighMemoryUsage firing"))
        (no_hit,) = [r.label for r in refs_in(observations) if r.raw_path is None]
        return claim("negative_observation", "", no_hit)

    calls = planner({"tool_name": "query_metrics", "service": "order-service", "alert_name": "HighMemoryUsage"},
                    {"tool_name": "query_logs", "query": "OutOfMemoryError", "service": "order-service"})
    lm = good_lm({**cases["high_memory_positive"], "question": question}, planner=calls, executor=executor)
    result = diagnose(question, lm=lm, db=store)
    record = store.get_session(result.session_id)
    first, second = record.executor_attempts
    assert second.used and second.retry_context.failed_rules == ["verdict.unanswered"]
    assert second.retry_context.kept == ["claim-1"]
    assert "Left unanswered:\n- verdict.unanswered: the question asks about " in told[1]
    assert "found nothing, and no claim says so" in told[1] and "query='OutOfMemoryError'" in told[1]
    assert [c.claim.claim_type for c in result.claims] == ["observation", "negative_observation"]
    assert result.claims[0].verification_status == "verified"
    # The "nothing found" gets the second look, as every negative does.
    assert any(n.rule == "verdict.second_look_search" for n in record.notes)


def test_an_answer_that_speaks_of_every_asked_thing_is_not_asked_for_again(cases, store):
    question = "Only confirm whether order-service has a HighMemoryUsage alert firing, and whether its logs show OutOfMemoryError."

    def executor(observations, attempt, user):
        (no_hit,) = [r.label for r in refs_in(observations) if r.raw_path is None]
        return {"claims": [
            {"claim_type": "observation", "evidence_bindings": [point(observations, "HighMemoryUsage firing")],
             "claim_text": "order-service's HighMemoryUsage alert is firing: current=91%."},
            {"claim_type": "negative_observation", "evidence_bindings": [no_hit],
             "claim_text": "No OutOfMemoryError was found in order-service logs."}], "missing_info": []}

    calls = planner({"tool_name": "query_metrics", "service": "order-service", "alert_name": "HighMemoryUsage"},
                    {"tool_name": "query_logs", "query": "OutOfMemoryError", "service": "order-service"})
    lm = good_lm({**cases["high_memory_positive"], "question": question}, planner=calls, executor=executor)
    result = diagnose(question, lm=lm, db=store)
    record = store.get_session(result.session_id)
    assert len(record.executor_attempts) == 1 and not [n for n in record.notes if n.rule == "verdict.unanswered"]


def test_a_retry_whose_lm_call_fails_does_not_take_the_place_of_the_attempt_it_keeps(cases, store):
    """The failed retry holds only what stood before it, so it ties with that attempt; the attempt
    the LM answered is used, and the failure is a note, not an error of the run."""
    question = "Only confirm whether order-service has a HighMemoryUsage alert firing, and whether its logs show OutOfMemoryError."

    def executor(observations, attempt, user):
        if attempt == 2:
            return TimeoutError("the LM did not answer in time")
        return claim("observation", "order-service's HighMemoryUsage alert is firing: current=91%.",
                     point(observations, "HighMemoryUsage firing"))

    calls = planner({"tool_name": "query_metrics", "service": "order-service", "alert_name": "HighMemoryUsage"},
                    {"tool_name": "query_logs", "query": "OutOfMemoryError", "service": "order-service"})
    lm = good_lm({**cases["high_memory_positive"], "question": question}, planner=calls, executor=executor)
    result = diagnose(question, lm=lm, db=store)
    record = store.get_session(result.session_id)
    first, second = record.executor_attempts
    assert (first.used, second.used) == (True, False) and second.retry_context.kept == ["claim-1"]
    assert result.verdict == "PASS" and not [e for e in result.errors if e.rule.startswith("lm.")]
    (failed,) = [n for n in record.notes if n.rule.startswith("lm.")]
    assert "executor LM call failed" in failed.message

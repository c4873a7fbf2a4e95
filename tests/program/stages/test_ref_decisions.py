"""The citation step judges each ref before it cites (issue 28, step 2): one decision per ref offered,
from a closed set, under the grammar and before the claims; only the refs decided "answers" stay
cited; the decisions go into the audit record and onto its page."""

import json

import pytest

from devset import devset_world, load_devset
from devset.gold import refs_in
from devset.recorded import record
from program.entry.api import diagnose
from program.entry.page import render_session
from program.evidence.citations import DISAGREES, SET_ASIDE, Menu
from program.evidence.parsing import salvage_executor_output
from program.evidence.screen import SET_ASIDE_AS
from program.lm.adapter import citation_patch
from program.lm.wire import schema_grammar_text
from contracts import ANSWERS, ClaimDraft, EvidenceBinding
from signatures.demos import executor_demos
from signatures.diagnosis import CiteEvidence, narrow_citation
from tests.program.lm.test_adapter import _sent
from tests.support.good_lm import good_lm
from tools.functions import TOOLBOX
from tools.recorder import ToolInvocationRecorder

QUESTION = "只排查 checkout-service 是否有连接池耗尽的日志。"
# In the devset's world the pool search returns checkout-service's healthy pool stats and a slow
# query that mentions HikariCP: no field tells which answers, so the executor decides.
SEARCH = {"tool_name": "query_logs", "query": "连接池耗尽", "service": "checkout-service"}
HEALTHY = "checkout-service 的连接池没有耗尽：active=6/30, waiting=0。"


def label_of(observations: str, needle: str) -> str:
    return next(r.label for r in refs_in(observations) if needle in r.text)


def both_lines_lm(cases, decide):
    """An executor that cites both lines of the search in one claim, after the decisions `decide` gives."""
    def executor(observations, attempt, user):
        stats, query = label_of(observations, "pool stats"), label_of(observations, "Slow query")
        return {"ref_decisions": [{"ref": ref, "decision": d} for ref, d in decide(stats, query).items()],
                "claims": [{"claim_type": "observation", "evidence_bindings": [stats, query], "claim_text": HEALTHY}],
                "missing_info": []}

    return good_lm({**cases["high_memory_positive"], "question": QUESTION}, executor=executor, planner=lambda user: {
        "plan": {"target_services": ["checkout-service"], "topics": ["连接池耗尽"]}, "tool_calls": [SEARCH]})


def test_a_ref_decided_irrelevant_is_set_aside_and_the_claim_on_the_answer_passes(cases, store):
    lm = both_lines_lm(cases, lambda stats, query: {stats: "answers", query: "irrelevant"})
    with devset_world():
        result = diagnose(QUESTION, lm=lm, db=store)
    assert result.verdict == "PASS"
    (claim,) = result.claims
    assert [b.evidence_excerpt for b in claim.claim.evidence_bindings] == [
        "[11:20][INFO][checkout-service] HikariCP pool stats: active=6/30, idle=24, waiting=0"]
    record_ = store.get_session(result.session_id)
    used = next(a for a in record_.executor_attempts if a.used)
    assert sorted(used.ref_decisions.values()) == ["answers", "irrelevant"]
    # The LM's own bindings stay in the record as it wrote them; what code set aside is said.
    assert len(used.drafts[0].evidence_bindings) == 2
    (note,) = [n for n in record_.notes if n.rule == SET_ASIDE]
    assert "irrelevant" in note.message
    html = render_session(record_, store.list_invocations(result.session_id))
    assert 'class="decisions"' in html and "irrelevant" in html and "Slow query detected" in html


def test_without_the_decision_the_line_that_does_not_answer_stays_cited(cases, store):
    """The decision is what took the slow query out of the claim's citations."""
    lm = both_lines_lm(cases, lambda stats, query: {stats: "answers", query: "answers"})
    with devset_world():
        result = diagnose(QUESTION, lm=lm, db=store)
    (claim,) = result.claims
    assert ["Slow query" in b.evidence_excerpt for b in claim.claim.evidence_bindings] == [False, True]
    assert not [n for n in store.get_session(result.session_id).notes if n.rule == SET_ASIDE]


def test_code_sets_aside_an_earlier_state_and_the_page_says_why(cases, store):
    """A resolved alert beside a firing one of the same name and service is set aside by its state
    field before the executor is asked, and the audit page shows it with the reason."""
    question = "只确认 checkout-service 的 HighErrorRate 告警现在是否仍在触发"
    shown = []

    def executor(observations, attempt, user):
        shown.append(observations)
        return {"ref_decisions": [], "claims": [{"claim_type": "observation", "claim_text": "",
                                                 "evidence_bindings": [label_of(observations, "firing")]}],
                "missing_info": []}

    lm = good_lm({**cases["high_memory_positive"], "question": question}, executor=executor, planner=lambda user: {
        "plan": {"target_services": ["checkout-service"], "topics": ["HighErrorRate"]},
        "tool_calls": [{"tool_name": "query_metrics", "service": "checkout-service", "alert_name": "HighErrorRate"}]})
    with devset_world():
        result = diagnose(question, lm=lm, db=store)
    assert result.verdict == "PASS" and "HighErrorRate resolved" not in shown[0]
    record_ = store.get_session(result.session_id)
    (aside,) = record_.executor_attempts[0].set_aside
    assert aside.decision == "earlier_state" and aside.reason.startswith("it is resolved, and HighErrorRate on "
                                                                        "checkout-service fires in #")
    html = render_session(record_, store.list_invocations(result.session_id))
    assert 'class="decisions set-aside"' in html and "HighErrorRate resolved" in html


def test_a_claim_that_cites_only_refs_decided_not_answering_is_kept_whole_for_the_checks(store):
    recorder = ToolInvocationRecorder(store, "s", TOOLBOX)
    inv = recorder.call("query_metrics", alert_name="HighMemoryUsage")
    menu = Menu(recorder.invocations)
    mine, other = menu.refs
    drafts = [ClaimDraft(claim_type="observation", evidence_bindings=[f"{other} §1"], claim_text="x"),
              ClaimDraft(claim_type="observation", evidence_bindings=[mine], claim_text="y")]
    kept, set_aside = menu.answering(drafts, {mine: "answers", other: "earlier_state"})
    # A clause label is judged by its whole ref; decisions and claim disagree, and the claim stands.
    assert kept == drafts and [f.rule for f in set_aside] == [DISAGREES]
    mixed = ClaimDraft(claim_type="observation", evidence_bindings=[f"{other} §1", mine], claim_text="w")
    kept, set_aside = menu.answering([mixed], {mine: "answers", other: "earlier_state"})
    assert kept[0].evidence_bindings == [mine] and [f.rule for f in set_aside] == [SET_ASIDE]
    # A ref it decided nothing about keeps its binding.
    draft = ClaimDraft(claim_type="observation", evidence_bindings=[mine, other], claim_text="z")
    assert menu.answering([draft], {})[0] == [draft]
    assert menu.answering([draft], {other: "other_service"})[0][0].evidence_bindings == [mine]
    # A quoted binding is never set aside: a decision must not spare a fabricated excerpt the gatekeeper.
    forged = EvidenceBinding(tool_name=inv.tool_name, source_invocation_id=inv.id,
                             raw_path=menu.citations[other].raw_path, evidence_excerpt="current=99%, made up")
    draft = ClaimDraft(claim_type="observation", evidence_bindings=[mine, forged], claim_text="z")
    assert menu.answering([draft], {other: "irrelevant"})[0] == [draft]


def test_the_schema_asks_for_one_decision_per_ref_before_any_claim(store):
    recorder = ToolInvocationRecorder(store, "s", TOOLBOX)
    recorder.call("query_metrics", alert_name="HighMemoryUsage")
    recorder.call("query_logs", query="nothing like this at all", service="order-service")
    menu = Menu(recorder.invocations)
    schema = _sent(narrow_citation(CiteEvidence), citation_patch(menu, narrow=True))
    items = schema["properties"]["ref_decisions"]["prefixItems"]
    # Whole refs and no-hits, not their clauses, in the order the observations show them.
    assert [i["properties"]["ref"]["const"] for i in items] == menu.refs
    assert len(menu.refs) == 3 and menu.refs[-1].endswith("no-hit") and not any("§" in r for r in menu.refs)
    assert all(i["properties"]["decision"]["enum"][0] == ANSWERS and len(i["properties"]["decision"]["enum"]) == 6
               for i in items)
    assert schema["required"][:2] == ["ref_decisions", "claims"]
    grammar = schema_grammar_text(json.dumps(schema))
    root = grammar.split("root ::=")[1].splitlines()[0]
    assert root.index("ref-decisions") < root.index("claims"), root


def test_decisions_that_do_not_parse_are_dropped_by_name_and_the_rest_kept():
    text = json.dumps({"ref_decisions": [{"ref": "#1 $.alerts[0]", "decision": "answers"},
                                         {"ref": "#1 $.alerts[1]", "decision": "maybe"}],
                       "claims": [{"claim_type": "observation", "evidence_bindings": ["#1 $.alerts[0]"]}]})
    kept, parse = salvage_executor_output(text, ("ref_decisions", "claims", "missing_info"))
    assert kept["ref_decisions"] == {"#1 $.alerts[0]": "answers"}
    assert parse.status == "repaired" and "ref_decisions[1] dropped" in parse.detail


def test_every_shipped_demo_passes_over_a_ref_and_cites_only_what_it_decided_answers():
    answering_positions, shown, set_aside = set(), set(), ""
    for demo in executor_demos():
        decided = {j.ref: j.decision for j in demo.ref_decisions}
        # A decision on every ref shown, in the order shown, and on nothing code set aside.
        assert list(decided) == list(dict.fromkeys(r.label for r in refs_in(demo.observations)))
        aside = "".join(line for line in demo.observations.splitlines() if "set aside by code" in line)
        assert any(d != ANSWERS for d in decided.values()) or aside
        cited = {b for c in demo.claims for b in c.evidence_bindings}
        assert cited == {r for r, d in decided.items() if d == ANSWERS}
        answering_positions |= {r.split("[")[-1] for r in cited if "[" in r}
        shown |= set(decided.values())
        set_aside += aside
    # Neither citing every ref nor one position is the lesson; what no field tells apart is decided
    # by the executor, and what code sets aside is shown set aside.
    assert len(answering_positions) >= 3
    assert "irrelevant" in shown
    assert all(why in set_aside for why in SET_ASIDE_AS.values())


@pytest.fixture(scope="module")
def recorded():
    with devset_world():
        return record(load_devset(), TOOLBOX)


def test_the_devset_gold_decides_every_ref_it_is_shown_and_cites_only_answers(recorded):
    for case_id, evidence in recorded.items():
        example = evidence.example()
        decided = {j["ref"]: j["decision"] for j in example.ref_decisions}
        assert list(decided) == Menu(evidence.invocations, screening=evidence.screening).refs, case_id
        answering = {r for r, d in decided.items() if d == ANSWERS}
        cited = {b.split(" §")[0] for c in example.claims for b in c.evidence_bindings}
        assert cited <= answering, case_id
        for wrong in evidence.case["wrong_refs"]:
            for ref in refs_in(evidence.observations):
                if ref.tool_name == wrong["tool_name"] and any(n in ref.text for n in wrong["needles"]):
                    assert decided[ref.label] != ANSWERS, (case_id, ref.label)


def test_no_shipped_demo_teaches_a_claim_the_checks_refuse(store):
    """Each demo's claims, expanded as code expands the executor's, pass the gatekeeper and every code
    check: the zh demo's "连接池没有耗尽" of a healthy pool line is a state the line shows, not an absence."""
    from program.evidence.checks import CitationCheck, check_citations
    from program.evidence.relevance import Target
    from contracts import ExecutorOutput, ParseStatus

    for number, demo in enumerate(executor_demos()):
        recorder = ToolInvocationRecorder(store, f"demo-{number}", TOOLBOX.with_tools(*(
            TOOLBOX.get(inv.tool_name).answered_by(lambda inv=inv, **_: inv.output) for inv in demo.invocations)))
        calls = [recorder.call(inv.tool_name, **inv.input) for inv in demo.invocations]
        relabel = {f"#{inv.id} ": f"#{call.id} " for inv, call in zip(demo.invocations, calls, strict=True)}
        drafts = [c.model_copy(update={"evidence_bindings": [
            next(new + b[len(old):] for old, new in relabel.items() if b.startswith(old)) for b in c.evidence_bindings]})
            for c in demo.claims]
        claims, refused = Menu(calls).expand(drafts, demo.language)
        checked = check_citations(store, TOOLBOX, CitationCheck(
            session_id=f"demo-{number}", question=demo.question, output=ExecutorOutput(claims=claims),
            parse_status=ParseStatus(status="valid", detail="-"), refused=tuple(refused),
            target=Target(services=tuple(demo.plan.target_services), topics=())))
        assert checked.gate.status == "pass" and checked.blockers == {}, (demo.question, checked.gate.errors, checked.blockers)

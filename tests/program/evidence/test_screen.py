"""Code sets aside what a ref's own fields or names tell apart, before the executor is asked
(program/evidence/screen.py): another service's ref, what the user excluded, another alert or
endpoint than a narrow question names. Such a ref is not shown, not decided and not citable, and a
claim that cites it anyway is blocked."""

import pytest

from program.evidence.checks import SET_ASIDE, CitationCheck, check_citations
from program.evidence.citations import Menu
from program.evidence.relevance import Target
from program.evidence.scope import Exclusion, read_scope
from program.evidence.screen import Screen, endpoints
from program.store.audit import AuditStore
from contracts import ExecutorOutput, ParseStatus
from tools.catalog import active_catalog
from tools.functions import TOOLBOX
from tools.recorder import ToolInvocationRecorder, observed_refs, render_observations

ALERT = {"name": "HighMemoryUsage", "state": "firing", "service": "order-service", "current": "91%",
         "threshold": "85%", "duration": "15m", "description": "JVM heap 3.8GB/4GB; Full GC 15 times in 15m"}


def planted(store, *outputs):
    """A session whose calls answer with these outputs, through the real recorder."""
    recorder = ToolInvocationRecorder(store, "s", TOOLBOX.with_tools(*(
        TOOLBOX.get(tool).answered_by(lambda output=output, **_: output) for tool, output in outputs)))
    for tool, output in outputs:
        recorder.call(tool)
    return recorder.invocations


def alerts(*items):
    return "query_metrics", {"success": True, "alerts": list(items)}


def logs(*messages, service="checkout-service"):
    return "query_logs", {"success": True, "logs": [
        {"timestamp": "2026-07-08T11:1{n}:00", "level": "WARN", "service": service, "message": m}
        for n, m in enumerate(messages)]}


def screen(services=("order-service",), alerts_named=(), excluded=(), narrow=True, question=""):
    return Screen(target=Target(services=services, topics=(), alerts=alerts_named), excluded=Exclusion(tuple(excluded)),
                  narrow=narrow, asked=read_scope(question, active_catalog()).asked)


@pytest.fixture
def store():
    return AuditStore("sqlite://")


def test_the_recorder_keeps_each_refs_declared_service_and_name(store):
    (inv,) = planted(store, alerts(ALERT, {**ALERT, "service": "x" * 200}, {**ALERT, "service": 7}))
    refs = inv.retrieval_details.evidence_refs
    assert [(r.service, r.name) for r in refs] == [
        ("order-service", "HighMemoryUsage"), (None, "HighMemoryUsage"), (None, "HighMemoryUsage")]
    # A log line's service is often read from where its file lies: the log tool declares no field.
    (line,) = planted(store, logs("boom"))[-1:]
    assert [(r.service, r.name) for r in line.retrieval_details.evidence_refs] == [(None, None)]


def test_another_services_alert_is_set_aside_even_when_it_names_the_asked_one(store):
    other = {**ALERT, "service": "payment-service", "description": "most of it on calls to order-service"}
    invocations = planted(store, alerts(other, ALERT))
    screening = screen()(invocations)
    (aside,) = screening.set_aside
    assert (aside.label, aside.decision, aside.reason) == (
        "#1 $.alerts[0]", "other_service", "its service is payment-service, not order-service")
    shown = render_observations(invocations, screening.hidden())
    assert [r.label for r in map(_label, observed_refs(shown))] == ["#1 $.alerts[1]"]
    assert "(set aside by code, not citable: 1 ref of another service)" in shown
    menu = Menu(invocations, screening=screening)
    assert menu.refs == ["#1 $.alerts[1]"] and not any(label.startswith("#1 $.alerts[0]") for label in menu.offered)


def test_a_lookup_made_for_the_asked_service_keeps_what_its_source_matched(store):
    """A source asked for the asked service's alerts may label one otherwise (a sub-component's);
    it matched it to the asked service, and code does not overrule it."""
    worker = {**ALERT, "service": "order-worker"}
    recorder = ToolInvocationRecorder(store, "s", TOOLBOX.with_tools(TOOLBOX.get("query_metrics").answered_by(
        lambda **_: alerts(worker)[1])))
    recorder.call("query_metrics", service="order-service")
    recorder.call("query_metrics", alert_name="HighMemoryUsage")
    screening = screen()(recorder.invocations)
    assert list(screening.refs) == ["#2 $.alerts[0]"]


def test_no_log_line_is_set_aside_for_its_service(store):
    """syslog holds every program's lines under one file's name: a line's service is not one code overrules."""
    invocations = planted(store, logs("kernel: Out of memory: Killed process 812 (java) of order-service",
                                      service="syslog"))
    assert screen()(invocations).refs == {}


def test_no_target_service_sets_nothing_aside(store):
    invocations = planted(store, alerts({**ALERT, "service": "payment-service"}))
    assert screen(services=())(invocations).set_aside == []


def test_an_excluded_line_is_set_aside_whole_and_an_alert_only_in_its_excluded_clauses(store):
    invocations = planted(store, alerts(ALERT), logs("Slow request: GET /a/b took 2950ms during a Full GC pause",
                                                     "Slow request: GET /a/b took 2700ms"))
    screening = screen(services=("order-service", "checkout-service"), excluded=("full gc",))(invocations)
    assert list(screening.refs) == ["#2 $.logs[0]"]
    # The alert's third clause speaks of Full GC: it and the whole alert are off the menu, its other clauses on it.
    menu = Menu(invocations, screening=screening)
    assert "#1 $.alerts[0]" in menu.refs and "#1 $.alerts[0]" not in menu.offered
    assert {"#1 $.alerts[0] §1", "#1 $.alerts[0] §2"} <= set(menu.offered) and "#1 $.alerts[0] §3" not in menu.offered
    (partly,) = [a for a in screening.set_aside if a.label == "#1 $.alerts[0]"]
    assert partly.reason == "its clauses §3 speak of full gc, which the user excluded"


def test_a_narrow_question_sets_aside_other_alerts_and_other_endpoints(store):
    invocations = planted(store, alerts(ALERT, {**ALERT, "name": "HighCPUUsage"}),
                          logs("Slow request: GET /api/v1/orders/42/items took 3100ms",
                               "Slow request: GET /api/v1/ordersummary took 2000ms",
                               "Slow request: POST /api/v1/users/login took 900ms",
                               "upstream timed out while reading response header",
                               "slow log written to /var/log/app/slow.log"))
    question = "Only check slow requests on /api/v1/orders, and whether HighMemoryUsage fires."
    found = screen(services=("order-service", "checkout-service"), alerts_named=("HighMemoryUsage",),
                   question=question)(invocations)
    # A line under the asked endpoint is asked about; one that names no endpoint is for the executor to judge.
    assert {label: a.decision for label, a in found.refs.items()} == {
        "#1 $.alerts[1]": "other_topic", "#2 $.logs[1]": "other_topic", "#2 $.logs[2]": "other_topic"}
    broad = screen(services=("order-service", "checkout-service"), alerts_named=("HighMemoryUsage",),
                   narrow=False, question=question)(invocations)
    assert broad.refs == {}


@pytest.mark.parametrize(("text", "named"), [
    ("Only check /api/v1/checkout/preview.", {"/api/v1/checkout/preview"}),
    ("GET /api/v1/users/?page=2 HTTP/1.1", {"/api/v1/users"}),
    ('"GET /static/app.js HTTP/1.1" 200 512 "http://shop.example/cart/view" "Mozilla/5.0 (X11; Linux x86_64)"',
     {"/static/app.js"}),
    ("shop.example/cart/view and 10.0.0.7:8080/health", set()),
])
def test_endpoints_are_paths_that_stand_alone(text, named):
    assert endpoints(text) == named


def test_a_path_of_another_tree_is_no_other_endpoint(store):
    """A question about a log file, whose lines name request paths: those are not other files."""
    invocations = planted(store, logs("upstream timed out: GET /api/v1/orders", "wrote /var/log/app/slow.log"))
    found = screen(services=("checkout-service",), question="只确认 /var/log/nginx/error.log 里有没有超时")(invocations)
    assert list(found.refs) == ["#1 $.logs[1]"]


def test_a_claim_that_quotes_a_ref_set_aside_is_blocked(store):
    other = {**ALERT, "service": "payment-service", "description": "most of it on calls to order-service"}
    invocations = planted(store, alerts(other, ALERT))
    ref = invocations[0].retrieval_details.evidence_refs[0]
    output = ExecutorOutput.model_validate({"claims": [{
        "claim_id": "claim-1", "claim_type": "observation", "claim_text": "order-service HighMemoryUsage firing, 91%",
        "evidence_bindings": [{"tool_name": "query_metrics", "source_invocation_id": invocations[0].id,
                               "raw_path": ref.raw_path, "evidence_excerpt": ref.text}]}]})
    check = CitationCheck(session_id="s", question="只确认 order-service 是否存在 HighMemoryUsage 告警", output=output,
                          parse_status=ParseStatus(status="valid", detail="-"),
                          target=Target(services=("order-service",), topics=()), screen=screen())
    checked = check_citations(store, TOOLBOX, check)
    assert checked.gate.status == "pass"
    assert [(f.rule, f.message) for f in checked.blockers["claim-1"] if f.rule == SET_ASIDE] == [(
        SET_ASIDE, "it cites #1 $.alerts[0], which code set aside as other_service: its service is payment-service, "
                   "not order-service")]
    unscreened = check_citations(store, TOOLBOX, CitationCheck(**{**check.__dict__, "screen": None}))
    assert SET_ASIDE not in {f.rule for f in unscreened.blockers.get("claim-1", [])}


def _label(ref):
    class Labelled:
        label = f"#{ref.invocation_id} {ref.raw_path}"
    return Labelled


def test_an_alert_that_is_over_beside_one_that_fires_is_an_earlier_state(store):
    resolved = {**ALERT, "state": "resolved", "current": "70%"}
    other_resolved = {**ALERT, "state": "resolved", "service": "checkout-service"}
    invocations = planted(store, alerts(resolved, ALERT, other_resolved))
    found = screen(services=("order-service", "checkout-service"))(invocations)
    # checkout-service's resolved alert has no firing one beside it: it is what that alert is now.
    assert {label: (a.decision, a.reason) for label, a in found.refs.items()} == {"#1 $.alerts[0]": (
        "earlier_state", "it is resolved, and HighMemoryUsage on order-service fires in #1 $.alerts[1]")}


def test_a_resolved_alert_is_an_earlier_state_whichever_lookup_read_it(store):
    """A later lookup filtered by state shows only the resolved episode: the firing one read before
    it is still what the alert is now."""
    resolved = {**ALERT, "state": "resolved", "current": "70%"}
    assert list(screen()(in_turn(store, "s1", alerts(ALERT), alerts(resolved))).refs) == ["#2 $.alerts[0]"]
    assert list(screen()(in_turn(store, "s2", alerts(resolved), alerts(ALERT))).refs) == ["#3 $.alerts[0]"]


def in_turn(store, session, *outputs):
    """A session whose calls of one tool answer with these outputs, one per call."""
    answers = [output for _, output in outputs]
    recorder = ToolInvocationRecorder(store, session, TOOLBOX.with_tools(
        TOOLBOX.get(outputs[0][0]).answered_by(lambda **_: answers.pop(0))))
    for _ in outputs:
        recorder.call(outputs[0][0])
    return recorder.invocations


def test_two_instances_of_one_alert_are_two_alerts(store):
    """Where the items carry their labels (Prometheus), pod-2's resolved alert is no earlier state of
    pod-1's firing one."""
    pod = {**ALERT, "labels": {"alertname": "HighMemoryUsage", "service": "order-service", "pod": "order-1"}}
    other_pod = {**pod, "state": "resolved", "labels": {**pod["labels"], "pod": "order-2"}}
    same_pod = {**pod, "state": "resolved"}
    found = screen()(planted(store, alerts(pod, other_pod, same_pod)))
    assert list(found.refs) == ["#1 $.alerts[2]"]


def test_service_names_compare_as_their_spellings_do(store):
    fullwidth = {**ALERT, "service": "ｏrder-service "}
    assert screen()(planted(store, alerts(fullwidth))).refs == {}


def test_an_alert_the_question_names_as_a_topic_is_asked_about(store):
    """"…HighMemoryUsage 告警，以及是否发生 OOM": PodOOMKilled is the OOM asked about, not another alert."""
    oom = {**ALERT, "name": "PodOOMKilled", "description": "container java killed"}
    target = Target(services=("order-service",), topics=(("oom", "oomkilled", "podoomkilled"),),
                    alerts=("HighMemoryUsage",))
    found = Screen(target=target, narrow=True)(planted(store, alerts(ALERT, oom, {**ALERT, "name": "HighCPUUsage"})))
    assert list(found.refs) == ["#1 $.alerts[2]"]


@pytest.mark.parametrize("question", [
    "只确认 /api/v1/orders接口的慢请求",
    "只确认 /api/v1/orders/{id} 的慢请求",
    "Only check slow requests on /api/v1/orders/:id.",
    "Only check slow requests on /API/v1/Orders.",
])
def test_the_asked_endpoint_is_read_whatever_follows_it_or_stands_for_its_ids(store, question):
    invocations = planted(store, logs("Slow request: GET /api/v1/orders/42 took 3100ms",
                                      "Slow request: GET /api/v1/users/7 took 2000ms"))
    found = screen(services=("checkout-service",), question=question)(invocations)
    assert list(found.refs) == ["#1 $.logs[1]"]


def test_a_route_template_in_a_line_stands_for_the_asked_id(store):
    """Micrometer names a request by its route: uri=/api/v1/orders/{id} is the asked /api/v1/orders/42."""
    invocations = planted(store, logs("http.server.requests uri=/api/v1/orders/{id} p99=3.1s",
                                      "http.server.requests uri=/api/v1/users/{id} p99=2.0s"))
    found = screen(services=("checkout-service",), question="只确认 /api/v1/orders/42 的慢请求")(invocations)
    assert list(found.refs) == ["#1 $.logs[1]"]


def test_citing_the_clean_clause_of_a_partly_excluded_ref_passes_and_its_excluded_clause_does_not(store):
    invocations = planted(store, alerts(ALERT))
    screening = screen(excluded=("full gc",))(invocations)
    ref = invocations[0].retrieval_details.evidence_refs[0]
    assert screening.refused(invocations[0].id, ref.raw_path, "HighMemoryUsage firing, service=order-service") is None
    refused = screening.refused(invocations[0].id, ref.raw_path, "JVM heap 3.8GB/4GB; Full GC 15 times in 15m")
    assert refused is not None and refused.decision == "excluded"

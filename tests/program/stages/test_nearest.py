"""The nearest worked example (program/stages/nearest.py): chosen by the question's wording with its
services masked, only in the answer's language, shown last and once, and saved and loaded with the
program diagnose() runs."""

import json

import dspy
import pytest

from contracts import PlannerOutput
from program.stages.compiled import COMPILED_REFUSED, load_program, newest_compiled, save_program
from program.stages.executor import Cite
from program.stages.nearest import NearestDemo, masked
from signatures.demos import for_language, retry_demos
from tests.support.good_lm import good_lm


def example(case_id, question, service, language):
    plan = PlannerOutput(scope="narrow", target_services=[service], topics=[])
    return dspy.Example(case_id=case_id, language=language, question=question, plan=plan, claims=[]).with_inputs(
        "language", "question", "plan")


POOL = [
    example("pair", "只确认 cart-service 的 HighErrorRate 告警现在是否仍在触发。", "cart-service", "zh"),
    example("pool", "只确认 cart-service 是否有连接池耗尽的日志。", "cart-service", "zh"),
    example("pair", "Only confirm whether cart-service's HighErrorRate alert is still firing.", "cart-service", "en"),
    example("pool", "Only confirm whether cart-service logs show connection pool exhaustion.", "cart-service", "en"),
]


def plan_for(service):
    return PlannerOutput(scope="narrow", target_services=[service], topics=[])


def test_the_target_services_are_masked_and_the_rest_folded():
    assert masked("只确认 Billing-Service 的ＨｉｇｈErrorRate", ["billing-service"]) == "只确认 <service> 的higherrorrate"
    # The longer name first: one service's name inside another's is not masked apart.
    assert masked("api-gateway-v2 and api-gateway", ["api-gateway", "api-gateway-v2"]) == "<service> and <service>"
    # A placeholder written is not masked again, whatever the other names.
    assert masked("only check service and order-service", ["order-service", "service"]) == \
        "only check <service> and <service>"


@pytest.mark.parametrize("question, language, nearest", [
    ("只排查 ledger-service 是否有连接池耗尽的日志。", "zh", "pool"),
    ("只排查 ledger-service 的 HighLatency 告警现在是否仍在触发。", "zh", "pair"),
    ("Only check whether ledger-service logs show connection pool exhaustion.", "en", "pool"),
    ("Only check whether ledger-service's HighLatency alert is still firing.", "en", "pair"),
])
def test_the_nearest_is_the_example_asked_alike_in_the_answer_s_language(question, language, nearest):
    chosen = NearestDemo(POOL).nearest(question, plan_for("ledger-service"), language)
    assert (chosen.case_id, chosen.language) == (nearest, language)


def test_a_service_s_name_does_not_decide_nearness():
    # Unmasked, the question that shares the long service name would be nearest.
    pool = [example("named", "只确认 recommendation-service 的告警。", "recommendation-service", "zh"),
            example("asked", "只确认 X 是否有连接池耗尽的日志。", "X", "zh")]
    question = "只确认 recommendation-service 是否有连接池耗尽的日志。"
    assert NearestDemo(pool).nearest(question, plan_for("recommendation-service"), "zh").case_id == "asked"


def test_an_empty_pool_or_none_in_the_language_gives_no_demo_and_changes_nothing():
    assert NearestDemo().nearest("anything", plan_for("x"), "en") is None
    assert NearestDemo(POOL[:2]).nearest("Only check x.", plan_for("x"), "en") is None
    cite = Cite()
    question = "只确认 order-service 是否存在 HighMemoryUsage 告警"
    assert cite.demos_for(question, plan_for("order-service"), "zh") == for_language(cite.predict.demos, "zh")


def test_the_nearest_is_shown_last_and_once_before_a_retry_s_worked_revisions():
    cite = Cite()
    cite.predict.demos = [POOL[1], POOL[0], POOL[3]]
    cite.nearest = NearestDemo(POOL)
    question = "只排查 ledger-service 是否有连接池耗尽的日志。"
    assert [d.case_id for d in cite.demos_for(question, plan_for("ledger-service"), "zh")] == ["pair", "pool"]
    retried = cite.demos_for(question, plan_for("ledger-service"), "zh", retry=True)
    assert retried[:2] == [POOL[0], POOL[1]] and retried[2:] == for_language(retry_demos(), "zh")


def test_optimizers_do_not_tune_the_pool_and_a_reset_copy_empties_it():
    cite = Cite()
    cite.nearest = NearestDemo(POOL)
    assert [name for name, _ in cite.named_predictors()] == ["predict"]
    assert cite.reset_copy().nearest.pool == [] and len(cite.nearest.pool) == 4


def test_the_pool_is_saved_and_loaded_with_the_program(cases, tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_COMPILED_DIR", str(tmp_path))
    cite = Cite()
    cite.nearest = NearestDemo(POOL)
    lm = good_lm(cases["high_memory_positive"])
    path = save_program(cite, "20260101T000000Z", lm)
    loaded, note = load_program(None, lm)
    assert note.rule == "compiled.used"
    pool = loaded.executor.nearest.pool
    assert [(e["case_id"], e["language"]) for e in pool] == [(e.case_id, e.language) for e in POOL]
    for question, language in (("只排查 ledger-service 是否有连接池耗尽的日志。", "zh"),
                               ("Only check whether ledger-service's HighLatency alert is still firing.", "en")):
        before = cite.demos_for(question, plan_for("ledger-service"), language)
        after = loaded.executor.demos_for(question, plan_for("ledger-service"), language)
        assert [d["question"] for d in after] == [d["question"] for d in before]



@pytest.mark.parametrize("damage", [
    lambda pool: pool.append({"case_id": "no question"}),
    lambda pool: pool[0].update(question=None),
    lambda pool: pool[0].update(language="fr"),
    lambda pool: pool[0]["plan"].update(target_services=3),
    lambda pool: pool[0].update(plan=None),
])
def test_a_pool_that_nearest_could_not_read_is_refused_at_load(cases, tmp_path, monkeypatch, damage):
    """Refused there, the diagnosis runs uncompiled and says why; loaded, every citation step would fail."""
    monkeypatch.setenv("DIAGNOSIS_COMPILED_DIR", str(tmp_path))
    cite = Cite()
    cite.nearest = NearestDemo(POOL)
    lm = good_lm(cases["high_memory_positive"])
    path = save_program(cite, "20260101T000000Z", lm)
    state = json.loads(path.read_text())
    damage(state["executor.nearest"]["pool"])
    path.write_text(json.dumps(state))
    assert newest_compiled() == path
    program, note = load_program(None, lm)
    assert program is None and note.rule == COMPILED_REFUSED and "nearest-demo pool" in note.message

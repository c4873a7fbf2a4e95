"""The verifier judges a claim against its excerpts alone: it is never shown the question, whose
presumption ("is X still firing?") the 1.5B judged by instead of the excerpt (bench-20261202T080257Z:
"user-service's HighMemoryUsage alert is resolved" against "HighMemoryUsage resolved, …" was
"over-reaches" when the question presumed it fired)."""

from program.entry.api import diagnose
from tests.support.good_lm import good_lm
from tests.support.scripted import field_value

QUESTION = "Only confirm that order-service's HighMemoryUsage alert has recovered."


def test_the_verifier_is_not_shown_the_question_and_the_executor_is(cases, store):
    seen = []
    lm = good_lm({**cases["high_memory_positive"], "question": QUESTION})
    respond = lm.engine.responder

    def recording(stage, user, demos):
        seen.append((stage, user, demos))
        return respond(stage, user, demos)

    lm.engine.responder = recording
    diagnose(QUESTION, lm=lm, db=store)
    judged = [(user, demos) for stage, user, demos in seen if stage == "judgement"]
    cited = [user for stage, user, _ in seen if stage == "claims"]
    assert judged and cited
    assert all(field_value(user, "question") == QUESTION for user in cited)
    for user, demos in judged:
        assert field_value(user, "question") == "" and QUESTION not in user and "## question ##" not in user
        assert field_value(user, "claim") and demos and not [d for d in demos if field_value(d, "question")]

"""The worked example nearest the question asked (k=1 nearest neighbour), as a part of the citation
module that DSPy saves and loads with it.

DSPy's KNNFewShot picks demos per question too, but it replaces the module's `forward` with a
closure over its training set and vectorizer, so what it compiles cannot be saved, and diagnose()
could not load it. Here the pool is a `Parameter` of the module: `Module.save` writes it beside the
predictor's demos and `Module.load` reads it back, while `named_predictors()` (what optimizers
tune) does not see it.

Nearness is read from the question's wording, with the services it targets masked (a held-out
service never occurs in a training question, and its name says nothing of what is asked): the
characters' edit similarity (rapidfuzz), which reads Chinese and English alike, needs no model and
gives the same neighbour on every machine. Only the examples in the answer's language compete.
"""

from __future__ import annotations

import re

from dspy.predict.parameter import Parameter
from dspy.predict.predict import serialize_object
from pydantic import TypeAdapter, ValidationError
from rapidfuzz import fuzz, process

from contracts import Language, PlannerOutput
from tools.text.folding import fold

SERVICE = "<service>"


def masked(question: str, services: list[str]) -> str:
    """The question folded, each of the target `services` written as one placeholder, in one pass
    (the longer name first), so that a placeholder written is never masked again."""
    names = sorted({fold(s) for s in services if s.strip()}, key=len, reverse=True)
    text = fold(question)
    return re.sub("|".join(map(re.escape, names)), SERVICE, text) if names else text


def _services(plan) -> list[str]:
    """The plan's target services, whether the plan is a contract or, as a loaded demo holds it, a dict."""
    found = plan.get("target_services") if isinstance(plan, dict) else getattr(plan, "target_services", None)
    return list(found or [])


def same_case(a, b) -> bool:
    return a.get("case_id") is not None and (a.get("case_id"), a.get("language")) == (b.get("case_id"), b.get("language"))


class NearestDemo(Parameter):
    """A pool of gold examples; `nearest` gives the one whose question reads most like the one asked."""

    def __init__(self, pool: list | None = None):
        self.pool = list(pool or [])

    def reset(self) -> None:
        self.pool = []

    def nearest(self, question: str, plan, language: str):
        """The pool's example in `language` nearest the question, or None when the pool has none."""
        candidates = [e for e in self.pool if e.get("language") == language]
        if not candidates:
            return None
        choices = [masked(e["question"], _services(e.get("plan"))) for e in candidates]
        # Ties go to the earlier example, so the same pool gives the same neighbour every time.
        _, _, index = process.extractOne(masked(question, _services(plan)), choices, scorer=fuzz.ratio)
        return candidates[index]

    def dump_state(self, json_mode: bool = True) -> dict:
        # As dspy.Predict dumps its demos, so that a loaded pool reads like loaded demos.
        return {"pool": [{key: serialize_object(value) for key, value in example.items()} for example in self.pool]}

    def load_state(self, state: dict) -> NearestDemo:
        pool = state.get("pool") if isinstance(state, dict) else None
        if not isinstance(pool, list) or not all(_usable(e) for e in pool):
            raise ValueError("the nearest-demo pool is not a list of examples, each with a question, a language "
                             "and a plan")
        self.pool = pool
        return self


def _usable(example) -> bool:
    """What `nearest` reads of a loaded example, checked at load against its contracts: a malformed
    file is refused there, rather than failing the citation step of every diagnosis."""
    if not isinstance(example, dict) or not isinstance(example.get("question"), str):
        return False
    try:
        TypeAdapter(Language).validate_python(example.get("language"))
        PlannerOutput.model_validate(example.get("plan"))
    except ValidationError:
        return False
    return True

"""The plan stage: the planner's predictor with its demos. One LM call gives the plan and the first
round of tool calls."""

from __future__ import annotations

import dspy

from program.evidence.scope import exclusion_candidates
from program.lm.adapter import chain, choices_patch, length_patch, tool_call_patch
from program.stages.run import Run, ask
from signatures.demos import planner_demos
from signatures.diagnosis import PlanDiagnosis, for_toolbox
from tools.declaration import Toolbox

PLAN_LIMITS = {"target_services": 3, "topics": 3, "excluded_topics": 6}
PLAN_CHOSEN_EXCLUSIONS = 2


class Plan(dspy.Predict):
    """A predictor itself, so that a saved program names it `planner` as it always has."""

    usage_key = "planner"

    def __init__(self, toolbox: Toolbox):
        # Output budgets per stage keep a looping model from running to the context limit.
        super().__init__(for_toolbox(PlanDiagnosis, toolbox), max_tokens=300)
        self.demos = planner_demos()

    def step(self, run: Run) -> list:
        """The tool calls the planner asks for (none when it failed); the plan goes to the run and its record."""
        # The planner may read exclusions the question's clauses do not mark, but only among the names
        # the question spells: free to write, a small planner invents them.
        candidates = tuple(c for c in exclusion_candidates(run.question, run.catalog)
                           if c not in run.scope.excluded_topics)
        patch = chain(length_patch(PLAN_LIMITS),
                      choices_patch("PlanDraft", "excluded_topics", candidates, PLAN_CHOSEN_EXCLUSIONS),
                      tool_call_patch(run.catalog, run.toolbox, min_calls=1, asked=run.asked_names))
        pred = ask(run, self.usage_key, self, question=run.question, config=run.config(patch))
        calls = []
        if pred is not None:
            run.use_plan(pred.plan)
            calls = list(pred.tool_calls)
        run.record.planner_output = run.plan
        return calls

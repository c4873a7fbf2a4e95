"""The gather stage: more rounds of tool calls, only where they can help (a broad question, or a
plan that gathered nothing)."""

from __future__ import annotations

import dspy

from program.lm.adapter import tool_call_patch
from program.stages.run import Run, ask
from program.stages.tool_calls import call_tools
from signatures.diagnosis import GatherEvidence, for_toolbox
from tools.declaration import Toolbox
from tools.recorder import render_observations


class Gather(dspy.Predict):
    """A predictor itself, so that a saved program names it `gather` as it always has. Its usage
    key in the record is the executor's tool rounds."""

    usage_key = "executor_tools"

    def __init__(self, toolbox: Toolbox):
        super().__init__(for_toolbox(GatherEvidence, toolbox), max_tokens=250)

    def step(self, run: Run, rounds: int, calls_per_round: int) -> None:
        """Up to `rounds` - 1 more rounds after the plan's, until one asks for nothing new."""
        patch = tool_call_patch(run.catalog, run.toolbox, asked=run.asked_names)
        for _ in range(rounds - 1):
            if run.scope.narrow and run.recorder.invocations:
                return
            pred = ask(run, self.usage_key, self, question=run.question, plan=run.plan, config=run.config(patch),
                       observations=render_observations(run.recorder.invocations))
            if pred is None or not call_tools(run, pred.tool_calls, calls_per_round):
                return

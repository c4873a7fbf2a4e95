"""The diagnosis program: plan (with the first tool calls) -> gather -> cite, then the hook and the
gatekeeper -> judge -> compose -> audit record. Each stage is a module of its own (plan.py,
gather.py, cite.py with executor.py, judge.py, compose.py); the run's state, its record and its
endings are run.py's.

Every LM stage call goes through one wrapper (`program.stages.run.ask`): an LM error, a timeout or
unparseable output is recorded as a finding and the run fails closed (LOW_CONFID or REJECT), it
never crashes and never passes.
"""

from __future__ import annotations

import uuid

import dspy

from program.evidence.language import question_language
from program.stages.cite import cite_and_check
from program.stages.executor import Cite
from program.stages.compose import Compose
from program.lm.engine import narrows, preflight, schema_note
from program.stages.gather import Gather
from program.stages.judge import Judge
from program.stages.named_alerts import named_alert_calls
from program.stages.plan import Plan
from program.stages.run import Run, RunStore
from program.stages.tool_calls import call_tools
from program.lm.usage import counting_calls
from program.store.audit import AuditStore
from contracts import Finding
from tools.declaration import Toolbox
from tools.functions import TOOLBOX


# Executor attempts per diagnosis: the first, and one more when code refused what a new attempt can fix.
EXECUTOR_ATTEMPTS = 2


# Where a saved program keeps the citation step's pool of nearest examples.
NEAREST = "executor.nearest"


class Diagnosis(dspy.Module):
    """Planner (with the first tool calls) -> more tool rounds for broad questions -> executor
    citations -> hook and gatekeeper -> code checks -> verifier, one claim at a time -> composer.

    The predictors keep the names a saved program is stored under: planner, gather,
    executor.predict, verifier, composer; beside them, executor.nearest holds the citation step's
    pool of nearest examples (empty unless a compiled program filled it)."""

    def __init__(self, store: RunStore | None = None, *, max_tool_rounds: int = 2, max_calls_per_round: int = 4,
                 max_executor_attempts: int = EXECUTOR_ATTEMPTS, constrain: bool | None = None,
                 citation: Cite | None = None, toolbox: Toolbox = TOOLBOX):
        """citation: the citation step to run (optimize.py passes the one it compiled)."""
        super().__init__()
        # The declared tools: what the planner is told about and may call, and what the checks know.
        self.toolbox = toolbox
        self.planner = Plan(toolbox)
        self.gather = Gather(toolbox)
        self.executor = citation or Cite()
        self.verifier = Judge()
        self.composer = Compose()
        self._store = store
        self.max_tool_rounds = max_tool_rounds
        self.max_calls_per_round = max_calls_per_round
        self.max_executor_attempts = max_executor_attempts
        self.progress = None  # optional callable(stage_name) for a UI
        # Narrow each response schema to real citations and names; None: for the LMs that take it (narrows).
        self.constrain = constrain

    def load_state(self, state: dict, **kwargs) -> None:
        # A file saved before the citation step had a pool holds none: it loads with an empty one.
        super().load_state({NEAREST: {"pool": []}, **state}, **kwargs)

    @property
    def store(self) -> RunStore:
        if self._store is None:
            self._store = AuditStore()
        return self._store

    @store.setter
    def store(self, store: RunStore) -> None:
        self._store = store

    def forward(self, question: str, session_id: str | None = None, language: str | None = None,
                notes: list[Finding] | None = None) -> dspy.Prediction:
        """language: zh or en, the answer's (the sentences code writes and what the LM stages write);
        None: the question's own. notes: what the caller decided before the run (which compiled
        program runs, or why none), for the record."""
        lm = dspy.settings.lm
        run = Run(question=question, session_id=session_id or f"diag-{uuid.uuid4().hex[:12]}",
                  lm_model=getattr(lm, "model", "") or "", store=self.store, toolbox=self.toolbox,
                  language=language or question_language(question), progress=self.progress,
                  constrain=self.constrain if self.constrain is not None else narrows(lm))
        run.record.notes.extend(notes or ())
        # A session id names one run: one already recorded is refused before this run writes anything.
        run.store.claim_session(run.record)
        with counting_calls():
            return run.guarded(lambda: self._run(run))

    def _run(self, run: Run) -> dspy.Prediction:
        run.report("preflight")
        if problem := preflight(dspy.settings.lm):
            return run.fail(Finding(rule=problem[0], message=problem[1]))
        if note := schema_note(dspy.settings.lm):
            run.record.notes.append(note)
        run.read_sources()
        planned = self.planner.step(run)
        # Alerts first: the executor quotes the observations in order, and the alert is the primary evidence.
        call_tools(run, [*named_alert_calls(run, self.toolbox, planned), *planned], self.max_calls_per_round)
        self.gather.step(run, self.max_tool_rounds, self.max_calls_per_round)
        checked = cite_and_check(run, self.executor, self.max_executor_attempts)
        evaluation, claim_results = self.verifier.step(run, checked)
        composer = self.composer.step(run, evaluation.verdict, claim_results, checked)
        return run.finish(evaluation, claim_results, composer)

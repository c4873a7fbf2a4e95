"""One diagnosis while it runs: its state, its audit record, and the three ways it ends (finish,
fail, interrupted), written against `RunStore`, the part of a store a run uses (the audit store,
`program.store.audit.AuditStore`, is one).

Making a run reads nothing: the sources are read in `read_sources`, which runs inside `guarded`,
the run's fail-closed path, so whatever a source does ends in the record, never in a traceback.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import dspy

from program.evidence.answer import deterministic_answer
from program.evidence.language import say
from program.evidence.relevance import question_target, unknown_names
from program.evidence.scope import read_scope, with_proposed_exclusions
from program.evidence.screen import Screen
from program.evidence.verdict import CitedRef
from program.lm.adapter import narrowing
from program.stages.stage_errors import stage_error
from program.lm.usage import counted
from program.store.audit import INTERNAL_ERROR, TRACEBACK
from program.store.processes import this_process
from contracts import ComposerOutput, Finding, Language, PlanDraft, PlannerOutput, ToolInvocation
from contracts.record import DiagnosisResult, DiagnosisSession, SelfEvaluation, StageUsage
from tools.catalog import active_catalog
from tools.declaration import Toolbox
from tools.recorder import InvocationStore, ToolInvocationRecorder, call_text, citation_label


class RunStore(InvocationStore, Protocol):
    """Where a run claims its session id, keeps its record and its tool calls, and reads them back."""

    def claim_session(self, record: DiagnosisSession) -> None: ...

    def save_session(self, record: DiagnosisSession) -> None: ...

    def list_invocations(self, session_id: str) -> list[ToolInvocation]: ...

    def get_invocations(self, ids: Iterable[int]) -> dict[int, ToolInvocation]: ...


@dataclass
class Run:
    """The state of one diagnosis while it runs, and how it ends up in the audit record."""

    question: str
    session_id: str
    lm_model: str
    store: RunStore
    toolbox: Toolbox
    language: Language
    # Narrow each stage's response schema to this session's citations and names.
    constrain: bool = False
    # Told the usage key of each stage as it starts, and "preflight"; for a UI.
    progress: Callable[[str], None] | None = None
    usage: dict[str, StageUsage] = field(default_factory=dict)
    errors: list[Finding] = field(default_factory=list)
    cited: dict[str, list[CitedRef]] = field(default_factory=dict)
    # Lines a second look found that may answer what a negative observation says is absent.
    possible_matches: list[str] = field(default_factory=list)
    # The second looks made, by (tool, service): their lines, or why the search failed.
    looked: dict[tuple[str, str | None], tuple[list[str], str | None]] = field(default_factory=dict)

    def __post_init__(self):
        self.record = DiagnosisSession(session_id=self.session_id, query=self.question, process=this_process(),
                                       created_at=datetime.now(UTC), lm_model=self.lm_model, language=self.language)
        self.recorder = ToolInvocationRecorder(self.store, self.session_id, self.toolbox)

    def report(self, step: str) -> None:
        if self.progress is not None:
            self.progress(step)

    @contextmanager
    def stage(self, key: str) -> Iterator[None]:
        """A stage as the user and the record see it: reported as it starts, its usage counted."""
        self.report(key)
        with counted(self.usage, key, self.record.notes):
            yield

    def config(self, patch) -> dict:
        """The config of a stage's call: its schema narrowed while constraining."""
        return narrowing(patch) if self.constrain else {}

    def guarded(self, body: Callable[[], dspy.Prediction]) -> dspy.Prediction:
        """`body`'s prediction, or the run failed closed: a bug in deterministic code must not surface
        as a crash or a PASS, and an interrupt leaves the record saying so."""
        try:
            return body()
        except Exception as exc:
            # The traceback is kept in the record rather than printed.
            self.record.notes.append(Finding(rule=TRACEBACK, message=traceback.format_exc()))
            return self.fail(Finding(rule=INTERNAL_ERROR, message=f"{type(exc).__name__}: {exc}"))
        except BaseException:
            # Ctrl-C or a shutdown: the record says so on the way out, then the interrupt goes on.
            self.interrupted()
            raise

    def read_sources(self) -> None:
        """One reading of the active sources' names and of the question's scope per run, used by
        every stage and check."""
        self.catalog = active_catalog()
        self.record.notes.extend(Finding(rule="source.unavailable", message=problem)
                                 for problem in self.catalog.problems)
        self.scope = read_scope(self.question, self.catalog)
        self.target = question_target(self.question, self.catalog).without(self.scope.exclusion)
        self.plan = PlannerOutput(scope="narrow" if self.scope.narrow else "broad",
                                  excluded_topics=list(self.scope.excluded_topics))

    @property
    def screen(self) -> Screen:
        """What code sets aside of this run's calls before the executor is asked."""
        return Screen.of(self.target, self.scope, self.catalog.services)

    @property
    def asked_names(self) -> dict[str, tuple[str, ...]]:
        """The question's service-like names no source knows, by the catalog field they would be in."""
        return {"services": unknown_names(self.question, self.catalog)}

    def use_plan(self, planned: PlanDraft) -> None:
        """The planner's plan, with the scope code read from the question: scope has one owner. The
        planner's exclusions are taken where they are the question's own words and leave it a target."""
        self.scope, refused = with_proposed_exclusions(self.scope, planned.excluded_topics, self.question,
                                                       self.catalog, [*planned.target_services, *planned.topics])
        self.target = question_target(self.question, self.catalog).without(self.scope.exclusion)
        if refused:
            self.record.notes.append(Finding(rule="planner.exclusion_refused", message="; ".join(refused)))
        self.plan = PlannerOutput(scope="narrow" if self.scope.narrow else "broad",
                                  target_services=planned.target_services, topics=planned.topics,
                                  excluded_topics=list(self.scope.excluded_topics))

    def failed_calls(self) -> list[ToolInvocation]:
        return [inv for inv in self.recorder.invocations if inv.retrieval_details.evidence_status == "failed"]

    def _close(self, status: str, verdict: str, composer: ComposerOutput, evaluation=None) -> DiagnosisSession:
        record = self.record
        record.self_evaluation = SelfEvaluation(verifier_evaluation=evaluation) if evaluation else None
        record.composer_output = composer
        record.answer = composer.user_facing_answer
        record.verdict = verdict
        record.usage = self.usage
        record.errors = self.errors
        record.status = status
        self.store.save_session(record)
        return record

    def _prediction(self, result: DiagnosisResult) -> dspy.Prediction:
        return dspy.Prediction(verdict=result.verdict, answer=result.answer, result=result, record=self.record,
                               invocations=list(self.recorder.invocations))

    def finish(self, evaluation, claim_results, composer: ComposerOutput) -> dspy.Prediction:
        self._close("completed", evaluation.verdict, composer, evaluation)
        return self._prediction(DiagnosisResult(
            session_id=self.session_id, verdict=evaluation.verdict, answer=composer.user_facing_answer,
            language=self.language,
            claims=claim_results, gatekeeper_result=evaluation.gatekeeper_result, composer_status=composer.status,
            usage=self.usage, errors=self.errors))

    def interrupted(self) -> None:
        self.errors.append(Finding(rule="pipeline.interrupted", message="the run was interrupted before it finished"))
        self.record.errors = self.errors
        self.record.status = "interrupted"
        self.store.save_session(self.record)

    def fail(self, finding: Finding) -> dspy.Prediction:
        """Record only what happened: the last gatekeeper result if the gatekeeper ran, else none."""
        self.errors.append(finding)
        attempts = self.record.executor_attempts
        gate = attempts[-1].gatekeeper_result if attempts else None
        if finding.rule.startswith("lm."):
            # Not a finding about the evidence: nothing was looked at, and the answer says so.
            answer = say(self.language, "not_run", message=finding.message)
        else:
            answer = deterministic_answer("LOW_CONFID", [], [finding.rule], language=self.language,
                                          **searches(self))
        composer = ComposerOutput(status="fallback", user_facing_answer=answer, reasons=[finding.message])
        self._close("failed", "LOW_CONFID", composer)
        return self._prediction(DiagnosisResult(
            session_id=self.session_id, verdict="LOW_CONFID", answer=answer, language=self.language,
            gatekeeper_result=gate,
            composer_status=composer.status, usage=self.usage, errors=self.errors))


def searches(run: Run) -> dict:
    """What the lookups did, as an answer that verified nothing reports it (deterministic_answer's
    `failed_calls`, `unread`, `found` and `set_aside`)."""
    # A run that failed before it read its sources has no target, and nothing was set aside.
    aside = run.screen(run.recorder.invocations).refs if hasattr(run, "target") else {}
    return {"failed_calls": [call_text(inv) for inv in run.failed_calls()], "unread": unread_searches(run),
            "found": found_refs(run, aside), "set_aside": len(aside)}


def found_refs(run: Run, aside: dict[str, object]) -> list[str]:
    """What the lookups of current fact found, for an answer that verified nothing: the refs the
    claims cite, then the other refs of those lookups, the ones naming a target service first,
    less those code set aside (`aside`, by label: another service's, what the user excluded)."""
    cited = [ref.text for refs in run.cited.values() for ref in refs if not ref.no_hit and not ref.indirect]
    services = getattr(getattr(run, "target", None), "services", ())
    direct = [ref.text for inv in run.recorder.invocations
              if (declaration := run.toolbox.get(inv.tool_name)) is not None and declaration.evidence == "direct"
              for ref in inv.retrieval_details.evidence_refs if citation_label(inv.id, ref.raw_path) not in aside]
    direct.sort(key=lambda text: not any(service in text for service in services))
    return list(dict.fromkeys(cited + direct))


def unread_searches(run: Run) -> list[tuple[str, tuple[str, ...]]]:
    """Searches that found nothing without reading every line in their scope, with what went unread."""
    return [(call_text(inv), tuple(inv.retrieval_details.unread)) for inv in run.recorder.invocations
            if inv.retrieval_details.evidence_status == "no_evidence" and inv.retrieval_details.unread]


def ask(run: Run, key: str, predict: dspy.Predict, **inputs) -> dspy.Prediction | None:
    """One LM stage's call under its usage key, failing closed: an LM error, a timeout or output that
    does not parse becomes a finding in the run's errors, and None."""
    try:
        with run.stage(key):
            return predict(**inputs)
    except Exception as exc:
        run.errors.append(stage_error(key, exc))
        return None

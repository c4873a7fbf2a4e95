"""The diagnosis program: planner -> executor tool use -> executor citations -> VerifierInputHook
(backfill, trace summary, gatekeeper) -> verifier -> composer -> audit record.

Every LM stage is wrapped: an LM error, a timeout or unparseable output is recorded as a finding
and the run fails closed (LOW_CONFID or REJECT), it never crashes and never passes.
"""

from __future__ import annotations

import time
import traceback
import uuid
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dspy
from dspy.utils.callback import BaseCallback

from program.store.audit import INTERNAL_ERROR, TRACEBACK, AuditStore, this_process
from program.evidence.answer import contexts, deterministic_answer, fact_line, scan_answer
from program.evidence.checks import Checked, check_citations
from program.evidence.language import question_language, say
from program.evidence.relevance import question_target, question_words
from program.evidence.scope import exclusion_candidates, mentions, read_scope, with_proposed_exclusions
from program.evidence.verdict import (
    SECOND_LOOK_SHARE,
    CitedRef,
    enforce,
    ranked_lines,
    second_look_blocker,
)
from program.lm.adapter import (
    chain,
    choices_patch,
    judgement_patch,
    length_patch,
    narrowing,
    tool_call_patch,
)
from program.lm.citation import Cite
from program.lm.engine import is_embedded, preflight
from program.lm.stage_errors import stage_error
from signatures.contracts import (
    Claim,
    ClaimJudgement,
    ComposerOutput,
    DiagnosisResult,
    DiagnosisSession,
    ExecutorAttempt,
    Finding,
    Language,
    PlanDraft,
    PlannerOutput,
    RetryContext,
    SelfEvaluation,
    StageUsage,
    ToolInvocation,
)
from signatures.demos import judge_demos, planner_demos
from signatures.diagnosis import (
    ComposeAnswer,
    GatherEvidence,
    JudgeClaim,
    PlanDiagnosis,
    for_toolbox,
)
from tools.calls import tool_call_contract
from tools.catalog import active_catalog
from tools.declaration import Toolbox
from tools.functions import TOOLBOX
from tools.recorder import ToolInvocationRecorder, call_text, render_observations

PLAN_LIMITS = {"target_services": 3, "topics": 3, "excluded_topics": 6}
PLAN_CHOSEN_EXCLUSIONS = 2
_current_stage: ContextVar[StageUsage | None] = ContextVar("diagnosis_stage", default=None)


class _CallCounter(BaseCallback):
    """Counts LM calls (cache hits included) for whichever stage is running in this context."""

    def on_lm_start(self, call_id, instance, inputs):
        usage = _current_stage.get()
        if usage is not None:
            usage.lm_calls += 1


CALL_COUNTER = _CallCounter()


class Diagnosis(dspy.Module):
    """Planner (with the first tool calls) -> more tool rounds for broad questions -> executor
    citations -> hook and gatekeeper -> code checks -> verifier, one claim at a time -> composer."""

    def __init__(self, store: AuditStore | None = None, *, max_tool_rounds: int = 2, max_calls_per_round: int = 4,
                 max_executor_attempts: int = 2, constrain: bool | None = None, citation: Cite | None = None,
                 toolbox: Toolbox = TOOLBOX):
        """citation: the citation step to run (optimize.py passes the one it compiled)."""
        super().__init__()
        # The declared tools: what the planner is told about and may call, and what the checks know.
        self.toolbox = toolbox
        # Output budgets per stage keep a looping model from running to the context limit.
        self.planner = dspy.Predict(for_toolbox(PlanDiagnosis, toolbox), max_tokens=300)
        self.planner.demos = planner_demos()
        self.gather = dspy.Predict(for_toolbox(GatherEvidence, toolbox), max_tokens=250)
        self.executor = citation or Cite()
        self.verifier = dspy.Predict(JudgeClaim, max_tokens=120)
        self.verifier.demos = judge_demos()
        self.composer = dspy.Predict(ComposeAnswer, max_tokens=250)
        self._store = store
        self.max_tool_rounds = max_tool_rounds
        self.max_calls_per_round = max_calls_per_round
        self.max_executor_attempts = max_executor_attempts
        self.progress = None  # optional callable(stage_name) for a UI
        # Narrow each response schema to real citations and names; None: only for the embedded model.
        self.constrain = constrain

    def _constraining(self) -> bool:
        if self.constrain is not None:
            return self.constrain
        return is_embedded(dspy.settings.lm)

    def _narrowing(self, patch) -> dict:
        """The config of a stage's call: its schema narrowed while constraining."""
        return narrowing(patch) if self._constraining() else {}

    @property
    def store(self) -> AuditStore:
        if self._store is None:
            self._store = AuditStore()
        return self._store

    @store.setter
    def store(self, store: AuditStore) -> None:
        self._store = store

    @contextmanager
    def _stage(self, usage: dict[str, StageUsage], name: str):
        entry = usage.setdefault(name, StageUsage())
        if self.progress is not None:
            self.progress(name)
        token = _current_stage.set(entry)
        started = time.perf_counter()
        try:
            with dspy.track_usage() as tracker:
                yield
        finally:
            for totals in tracker.get_total_tokens().values():
                entry.prompt_tokens += int(totals.get("prompt_tokens") or 0)
                entry.completion_tokens += int(totals.get("completion_tokens") or 0)
            entry.seconds = round(entry.seconds + time.perf_counter() - started, 3)
            _current_stage.reset(token)

    def forward(self, question: str, session_id: str | None = None, language: str | None = None,
                notes: list[Finding] | None = None) -> dspy.Prediction:
        """language: zh or en for the sentences code writes; None: the question's own. notes: what the
        caller decided before the run (which compiled program runs, or why none), for the record."""
        callbacks = [*dspy.settings.callbacks, CALL_COUNTER] if CALL_COUNTER not in dspy.settings.callbacks else None
        run = _Run(question=question, session_id=session_id or f"diag-{uuid.uuid4().hex[:12]}",
                   lm_model=getattr(dspy.settings.lm, "model", "") or "", store=self.store, toolbox=self.toolbox,
                   language=language or question_language(question))
        run.record.notes.extend(notes or ())
        # A session id names one run: one already recorded is refused before this run writes anything.
        run.store.claim_session(run.record)
        with dspy.context(callbacks=callbacks) if callbacks else nullcontext():
            if self.progress is not None:
                self.progress("preflight")
            problem = preflight(dspy.settings.lm)
            if problem:
                return run.fail(Finding(rule=problem[0], message=problem[1]))
            try:
                return self._run(run)
            except Exception as exc:
                # A bug in deterministic code must not surface as a crash or a PASS: record it, with the
                # traceback kept in the record rather than printed, and fail closed.
                run.record.notes.append(Finding(rule=TRACEBACK, message=traceback.format_exc()))
                return run.fail(Finding(rule=INTERNAL_ERROR, message=f"{type(exc).__name__}: {exc}"))
            except BaseException:
                # Ctrl-C or a shutdown: the record says so on the way out, then the interrupt goes on.
                run.interrupted()
                raise

    def _run(self, run: _Run) -> dspy.Prediction:
        run.read_sources()
        self._plan(run)
        self._gather(run)
        checked = self._cite_and_check(run)
        evaluation, claim_results = self._verify(run, checked)
        composer = self._compose(run, evaluation.verdict, claim_results, checked)
        return run.finish(evaluation, claim_results, composer)

    def _plan(self, run: _Run) -> None:
        """The plan and the first round of tool calls come from one LM call."""
        calls = []
        # The planner may read exclusions the question's clauses do not mark, but only among the names
        # the question spells: free to write, a small planner invents them.
        candidates = tuple(c for c in exclusion_candidates(run.question, run.catalog)
                           if c not in run.scope.excluded_topics)
        patch = chain(length_patch(PLAN_LIMITS),
                      choices_patch("PlanDraft", "excluded_topics", candidates, PLAN_CHOSEN_EXCLUSIONS),
                      tool_call_patch(run.catalog, self.toolbox, min_calls=1))
        try:
            with self._stage(run.usage, "planner"):
                pred = self.planner(question=run.question, config=self._narrowing(patch))
            run.use_plan(pred.plan)
            calls = list(pred.tool_calls)
        except Exception as exc:
            run.errors.append(stage_error("planner", exc))
        run.record.planner_output = run.plan
        # Alerts first: the executor quotes the observations in order, and the alert is the primary evidence.
        self._call_tools(run, [*self._named_alert_calls(run, calls), *calls])

    def _named_alert_calls(self, run: _Run, calls: list) -> list:
        """An alert the question names, on a service it names, is always looked up: the planner may
        choose more evidence, but never less than the question itself spells out."""
        # The tool that looks alerts up: the one whose declaration takes a service and an alert name.
        alerts_tool = next((d.name for d in self.toolbox
                            if {"service", "alert_name"} <= set(d.catalog_values)), None)
        if alerts_tool is None:
            return []
        call = tool_call_contract(self.toolbox)
        asked = {(c.service, (c.alert_name or "").casefold()) for c in calls if c.tool_name == alerts_tool}
        added = []
        for service in run.target.services:
            for alert in run.target.alerts:
                if (service, alert.casefold()) not in asked:
                    added.append(call(tool_name=alerts_tool, service=service, alert_name=alert))
        if added:
            run.record.notes.append(Finding(rule="planner.named_alert_added", message="the question names "
                                      + ", ".join(f"{c.alert_name} on {c.service}" for c in added)
                                      + ", which the planner did not query; code added the lookup"))
        return added

    def _gather(self, run: _Run) -> None:
        """More rounds only where they can help: a broad question, or a plan that gathered nothing."""
        patch = tool_call_patch(run.catalog, self.toolbox)
        for _ in range(self.max_tool_rounds - 1):
            if run.scope.narrow and run.recorder.invocations:
                return
            try:
                with self._stage(run.usage, "executor_tools"):
                    calls = self.gather(question=run.question, plan=run.plan, config=self._narrowing(patch),
                                        observations=render_observations(run.recorder.invocations)).tool_calls
            except Exception as exc:
                run.errors.append(stage_error("executor_tools", exc))
                return
            if not self._call_tools(run, calls):
                return

    def _call_tools(self, run: _Run, calls: list) -> bool:
        """Run the calls that were not made before; False when there was nothing new to run."""
        run.record.tool_requests.append([{"tool_name": c.tool_name, **c.arguments()} for c in calls])
        done = {(inv.tool_name, tuple(sorted(inv.input.items()))) for inv in run.recorder.invocations}
        fresh = []
        for call in calls:
            key = (call.tool_name, tuple(sorted(call.arguments().items())))
            service = call.arguments().get("service")
            if isinstance(service, str) and mentions(service, run.scope.excluded_terms):
                # What the user excluded is never looked up, whoever asked for it.
                run.record.notes.append(Finding(rule="planner.excluded_call_skipped", message=(
                    f"{call.tool_name}(service={service!r}) was not run: the user excluded {service}")))
                continue
            if key not in done:
                done.add(key)
                fresh.append(call)
        if len(fresh) > self.max_calls_per_round:
            run.errors.append(Finding(rule="executor.too_many_tool_calls",
                                      message=f"asked for {len(fresh)} calls; ran the first {self.max_calls_per_round}"))
        for call in fresh[: self.max_calls_per_round]:
            run.recorder.call(call.tool_name, **call.arguments())
        return bool(fresh)

    def _cite_and_check(self, run: _Run) -> Checked:
        """Executor citations, then the checks that follow them; one bounded retry after a gatekeeper reject."""
        retry_context: RetryContext | None = None
        for attempt in range(1, self.max_executor_attempts + 1):
            retry_text = "none" if retry_context is None else retry_context.model_dump_json()
            with self._stage(run.usage, "executor"):
                cited = self.executor(question=run.question, plan=run.plan, invocations=run.recorder.invocations,
                                      narrow=run.scope.narrow, retry_context=retry_text,
                                      constrain=self._constraining())
            if cited.error is not None:
                run.errors.append(cited.error)
            checked = check_citations(
                run.store, session_id=run.session_id, question=run.question, output=cited.output,
                parse_status=cited.parse_status, invocations=run.recorder.invocations, target=run.target,
                toolbox=self.toolbox, refused=cited.refused, excluded_terms=run.scope.excluded_terms,
                names=run.catalog.names, topics=run.catalog.topic_groups(), retry_context=retry_context)
            run.record.executor_attempts.append(ExecutorAttempt(
                attempt=attempt, drafts=cited.drafts, executor_output=cited.output, parse_status=cited.parse_status,
                gatekeeper_result=checked.gate, retry_context=retry_context))
            if checked.gate.severity != "reject":
                break
            retry_context = RetryContext(attempt=attempt, failed_rules=checked.gate.failed_rules,
                                         errors=checked.gate.errors)
        run.record.executor_output = checked.verifier_input.executor_structured_output
        run.record.tool_trace_summary = checked.verifier_input.tool_trace_summary
        run.cited = checked.cited
        return checked

    def _verify(self, run: _Run, checked: Checked):
        """Code checks first; the verifier LM judges only claims that code could still verify."""
        gate, claims, blockers = checked.gate, checked.claims, checked.blockers
        if gate.severity == "none":
            self._second_look(run, [c for c in claims if c.claim_id not in blockers and c.claim_id not in checked.failed],
                              blockers)
        judgements: dict[str, ClaimJudgement] = {}
        verifier_ran = False
        if gate.severity == "none":
            for claim in checked.verifiable:
                verifier_ran = True
                judgement = self._judge(run, claim)
                if judgement is not None:
                    judgements[claim.claim_id] = judgement
        # A failed lookup of current fact leaves the question unanswered where it asked: an alert whose
        # lookup failed is not answered by a log line, so it caps the verdict like a failed LM stage.
        # A failed runbook lookup (indirect evidence, never grounds for PASS) is only noted.
        for inv in run.failed_calls():
            declaration = self.toolbox.get(inv.tool_name)
            finding = Finding(rule="tools.call_failed", message=f"#{inv.id} {call_text(inv)} failed: "
                              f"{inv.retrieval_details.message or 'no message'}")
            (run.errors if declaration is None or declaration.evidence == "direct" else run.record.notes).append(finding)
        stage_errors = [e for e in run.errors if e.rule.startswith(("lm.", "tools."))]
        return enforce(gate, claims, judgements, blockers, stage_errors, verifier_ran=verifier_ran)

    def _second_look(self, run: _Run, claims: list[Claim], blockers: dict[str, list[Finding]]) -> None:
        """A verified "nothing found" is only as good as the search behind it, whose words a small
        LM chose. Before a negative observation may be verified, code searches the target's own
        lines again with the question's words, and a plausible match blocks the all-clear."""
        words = question_words(run.question, run.catalog)
        looked: dict[tuple[str, str | None], tuple[list[str], str | None]] = {}
        for claim in claims:
            if claim.claim_type != "negative_observation":
                continue
            possible, failed = [], None
            for tool in sorted({ref.tool_name for ref in run.cited.get(claim.claim_id, []) if ref.no_hit}):
                declaration = self.toolbox.get(tool)
                if declaration is None or declaration.second_look is None:
                    continue
                for service in run.target.services or (None,):
                    if (tool, service) not in looked:
                        looked[tool, service] = self._look_again(run, declaration, words, service)
                    lines, problem = looked[tool, service]
                    possible += lines
                    failed = failed or problem
            if finding := second_look_blocker(claim.claim_id, possible, failed):
                blockers.setdefault(claim.claim_id, []).append(finding)
                run.possible_matches.extend(line for line in possible if line not in run.possible_matches)

    def _look_again(self, run: _Run, declaration, words: str, service: str | None) -> tuple[list[str], str | None]:
        arguments = {declaration.second_look: words, "min_share": SECOND_LOOK_SHARE}
        if service is not None and "service" in declaration.tool_arguments:
            arguments["service"] = service
        invocation = run.recorder.call(declaration.name, **arguments)
        run.record.notes.append(Finding(rule="verdict.second_look_search", message=(
            f"before an all-clear, code searched again with the question's words: #{invocation.id} "
            f"{declaration.name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())}) -> "
            f"{invocation.retrieval_details.evidence_status}")))
        if invocation.retrieval_details.evidence_status == "failed":
            return [], invocation.retrieval_details.message or "the search failed"
        return ranked_lines(invocation, declaration.items), None

    def _judge(self, run: _Run, claim: Claim) -> ClaimJudgement | None:
        try:
            with self._stage(run.usage, "verifier"):
                pred = self.verifier(question=run.question, claim=f"{claim.claim_type}: {claim.claim_text}",
                                     excerpts=contexts(claim, run.cited), config=self._narrowing(judgement_patch))
        except Exception as exc:
            run.errors.append(stage_error("verifier", exc))
            return None
        return ClaimJudgement.judged(claim.claim_id, pred.judgement, pred.reason)

    def _compose(self, run: _Run, verdict: str, claim_results, checked: Checked) -> ComposerOutput:
        output = checked.verifier_input.executor_structured_output
        verified = [r.claim for r in claim_results if r.verification_status == "verified"]
        not_verified = [r.claim for r in claim_results if r.verification_status != "verified"]
        fallback = deterministic_answer(verdict, verified, checked.gate.failed_rules, cited=run.cited,
                                        excluded_terms=run.scope.excluded_terms, language=run.language,
                                        possible_matches=run.possible_matches,
                                        failed_calls=[call_text(inv) for inv in run.failed_calls()])
        if verdict != "PASS" or all(c.claim_type == "negative_observation" for c in verified):
            # Nothing positive to phrase: the deterministic answer says exactly what was and was not found.
            return ComposerOutput(status="deterministic", user_facing_answer=fallback,
                                  reasons=["no positive verified claim to phrase; the composer LM was not asked"])
        if run.scope.narrow:
            # A narrow question asks to confirm one thing: its verified claims, with their evidence, are the answer.
            return ComposerOutput(status="deterministic", user_facing_answer=fallback,
                                  reasons=["narrow question: the verified claims are the answer; the composer LM was not asked"])
        try:
            with self._stage(run.usage, "composer"):
                answer = self.composer(question=run.question, verified_facts=[fact_line(c, run.cited) for c in verified],
                                       hypotheses=[h.hypothesis_text for h in output.hypotheses],
                                       missing_info=[m.description for m in output.missing_info],
                                       config=self._narrowing(length_patch({}))).answer
        except Exception as exc:
            finding = stage_error("composer", exc)
            run.errors.append(finding)
            return ComposerOutput(status="fallback", user_facing_answer=fallback, reasons=[finding.message])
        ref_texts = [ref.text for inv in run.recorder.invocations for ref in inv.retrieval_details.evidence_refs]
        reasons = scan_answer(answer, verified=verified, blocked=not_verified, excluded_terms=run.scope.excluded_terms,
                              ref_texts=ref_texts, names=run.catalog.names, cited=run.cited,
                              topics=run.catalog.topic_groups())
        if reasons:
            return ComposerOutput(status="replaced", user_facing_answer=fallback, reasons=reasons)
        return ComposerOutput(status="valid", user_facing_answer=answer)


@dataclass
class _Run:
    """The state of one diagnosis while it runs, and how it ends up in the audit record."""

    question: str
    session_id: str
    lm_model: str
    store: AuditStore
    toolbox: Toolbox
    language: Language
    usage: dict[str, StageUsage] = field(default_factory=dict)
    errors: list[Finding] = field(default_factory=list)
    cited: dict[str, list[CitedRef]] = field(default_factory=dict)
    # Lines a second look found that may answer what a negative observation says is absent.
    possible_matches: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.record = DiagnosisSession(session_id=self.session_id, query=self.question, process=this_process(),
                                       created_at=datetime.now(UTC), lm_model=self.lm_model, language=self.language)
        self.recorder = ToolInvocationRecorder(self.store, self.session_id, self.toolbox)

    def read_sources(self) -> None:
        """One reading of the active sources' names and of the question's scope per run, used by
        every stage and check. It runs once the record is stored, inside the run's fail-closed path:
        a source is read here, and what it does must end in the record, never in a traceback."""
        self.catalog = active_catalog()
        self.record.notes.extend(Finding(rule="source.unavailable", message=problem)
                                 for problem in self.catalog.problems)
        self.scope = read_scope(self.question, self.catalog)
        self.target = question_target(self.question, self.catalog).without(self.scope.excluded_terms)
        self.plan = PlannerOutput(scope="narrow" if self.scope.narrow else "broad",
                                  excluded_topics=list(self.scope.excluded_topics))

    def use_plan(self, planned: PlanDraft) -> None:
        """The planner's plan, with the scope code read from the question: scope has one owner. The
        planner's exclusions are taken where they are the question's own words and leave it a target."""
        self.scope, refused = with_proposed_exclusions(self.scope, planned.excluded_topics, self.question,
                                                       self.catalog, [*planned.target_services, *planned.topics])
        self.target = question_target(self.question, self.catalog).without(self.scope.excluded_terms)
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
                                          failed_calls=[call_text(inv) for inv in self.failed_calls()])
        composer = ComposerOutput(status="fallback", user_facing_answer=answer, reasons=[finding.message])
        self._close("failed", "LOW_CONFID", composer)
        return self._prediction(DiagnosisResult(
            session_id=self.session_id, verdict="LOW_CONFID", answer=answer, language=self.language,
            gatekeeper_result=gate,
            composer_status=composer.status, usage=self.usage, errors=self.errors))

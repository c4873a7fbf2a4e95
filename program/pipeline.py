"""The diagnosis program: planner -> executor tool use -> executor citations -> VerifierInputHook
(backfill, trace summary, gatekeeper) -> verifier -> composer -> audit record.

Every LM stage is wrapped: an LM error, a timeout or unparseable output is recorded as a finding
and the run fails closed (LOW_CONFID or REJECT), it never crashes and never passes.
"""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

import dspy
from dspy.utils.callback import BaseCallback

from program.adapter import citation_patch, constrained, length_patch, tool_call_patch
from program.answer import deterministic_answer, scan_answer
from program.audit import AuditStore
from program.hook import VerifierInputHook
from program.parsing import salvage_executor_output
from program.scope import read_scope
from program.verdict import enforce
from signatures.contracts import (
    ComposerOutput,
    DiagnosisResult,
    DiagnosisSession,
    ExecutorAttempt,
    ExecutorOutput,
    Finding,
    ParseStatus,
    PlannerOutput,
    RetryContext,
    SelfEvaluation,
    StageUsage,
    VerifierOutput,
)
from signatures.diagnosis import CiteEvidence, ComposeAnswer, GatherEvidence, PlanDiagnosis, VerifyClaims
from tools.recorder import ToolInvocationRecorder, render_observations
from tools.world import get_world

PLAN_LIMITS = {"target_services": 4, "topics": 4, "excluded_topics": 8, "evidence_plan": 4}
_current_stage: ContextVar[StageUsage | None] = ContextVar("diagnosis_stage", default=None)


class _CallCounter(BaseCallback):
    """Counts LM calls (cache hits included) for whichever stage is running in this context."""

    def on_lm_start(self, call_id, instance, inputs):
        usage = _current_stage.get()
        if usage is not None:
            usage.lm_calls += 1


CALL_COUNTER = _CallCounter()


def _is_connection_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return any(k in text for k in ("connection", "connect", "unreachable", "timed out", "timeout", "apiconnection",
                                   "name resolution", "refused"))


def _stage_error(stage: str, exc: BaseException) -> Finding:
    if isinstance(exc, dspy.AdapterParseError):
        return Finding(rule=f"lm.{stage}.unparseable", message=f"{stage} output did not parse: {str(exc)[:300]}")
    rule = "lm.unreachable" if _is_connection_error(exc) else f"lm.{stage}.error"
    return Finding(rule=rule, message=f"{stage} LM call failed: {type(exc).__name__}: {str(exc)[:300]}")


class Diagnosis(dspy.Module):
    def __init__(self, store: AuditStore | None = None, *, max_tool_rounds: int = 2, max_calls_per_round: int = 4,
                 max_executor_attempts: int = 2, constrain: bool | None = None):
        super().__init__()
        # Output budgets per stage keep a looping model from running to the context limit.
        self.planner = dspy.Predict(PlanDiagnosis, max_tokens=200)
        self.gather = dspy.Predict(GatherEvidence, max_tokens=250)
        self.executor = dspy.Predict(CiteEvidence, max_tokens=700)
        self.verifier = dspy.Predict(VerifyClaims, max_tokens=300)
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
        return str(getattr(dspy.settings.lm, "model", "")).startswith("embedded/")

    def _patch(self, patch):
        return constrained(patch if self._constraining() else None)

    @property
    def store(self) -> AuditStore:
        if self._store is None:
            self._store = AuditStore()
        return self._store

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

    def forward(self, question: str, session_id: str | None = None) -> dspy.Prediction:
        callbacks = [*dspy.settings.callbacks, CALL_COUNTER] if CALL_COUNTER not in dspy.settings.callbacks else None
        with dspy.context(callbacks=callbacks) if callbacks else _null():
            return self._run(question, session_id or f"diag-{uuid.uuid4().hex[:12]}")

    def _run(self, question: str, session_id: str) -> dspy.Prediction:
        store = self.store
        lm = dspy.settings.lm
        record = DiagnosisSession(session_id=session_id, query=question, created_at=datetime.now(UTC),
                                  lm_model=getattr(lm, "model", "") or "")
        store.save_session(record)
        usage: dict[str, StageUsage] = {}
        errors: list[Finding] = []
        recorder = ToolInvocationRecorder(store, session_id)

        scope = read_scope(question)
        plan = PlannerOutput(scope="narrow" if scope.narrow else "broad", excluded_topics=list(scope.excluded_topics))
        try:
            with self._stage(usage, "planner"), self._patch(length_patch(PLAN_LIMITS)):
                plan = self.planner(question=question).plan
        except Exception as exc:
            errors.append(_stage_error("planner", exc))
        scope = read_scope(question, plan.excluded_topics)
        record.planner_output = plan

        world = get_world()
        tool_patch = tool_call_patch(sorted(world.service_names), [a["name"] for a in world.alerts])
        for _ in range(self.max_tool_rounds):
            try:
                with self._stage(usage, "executor_tools"), self._patch(tool_patch):
                    calls = self.gather(question=question, plan=plan,
                                        observations=render_observations(recorder.invocations)).tool_calls
            except Exception as exc:
                errors.append(_stage_error("executor_tools", exc))
                break
            done = {(inv.tool_name, tuple(sorted(inv.input.items()))) for inv in recorder.invocations}
            fresh = [c for c in calls if (c.tool_name, tuple(sorted(c.arguments().items()))) not in done]
            if not fresh:
                break  # no calls, or only repeats of calls already made
            if len(fresh) > self.max_calls_per_round:
                errors.append(Finding(rule="executor.too_many_tool_calls",
                                      message=f"asked for {len(fresh)} calls; ran the first {self.max_calls_per_round}"))
            for call in fresh[: self.max_calls_per_round]:
                recorder.call(call.tool_name, **call.arguments())

        hook = VerifierInputHook(store)
        retry_context: RetryContext | None = None
        for attempt in range(1, self.max_executor_attempts + 1):
            output, parse_status = self._cite(question, plan, recorder, retry_context, usage, errors)
            verifier_input = hook.run(session_id=session_id, original_query=question, executor_output=output,
                                      parse_status=parse_status, retry_context=retry_context)
            gate = verifier_input.gatekeeper_result
            record.executor_attempts.append(ExecutorAttempt(attempt=attempt, executor_output=output,
                                                            parse_status=parse_status, gatekeeper_result=gate,
                                                            retry_context=retry_context))
            if gate.severity != "reject":
                break
            retry_context = RetryContext(attempt=attempt, failed_rules=gate.failed_rules, errors=gate.errors)
        output = verifier_input.executor_structured_output
        record.executor_output = output
        record.tool_trace_summary = verifier_input.tool_trace_summary

        lm_verdict: VerifierOutput | None = None
        # Nothing to judge when the citations were rejected or there are no claims: code decides.
        if gate.severity != "reject" and output.claims:
            try:
                with self._stage(usage, "verifier"), self._patch(length_patch({"claim_judgements": len(output.claims)})):
                    pred = self.verifier(verifier_input=verifier_input)
                lm_verdict = VerifierOutput(verdict=pred.verdict, groundedness_score=min(1.0, max(0.0, float(pred.groundedness_score))),
                                            claim_judgements=pred.claim_judgements, reason=pred.reason)
            except Exception as exc:
                errors.append(_stage_error("verifier", exc))
        evaluation, claim_results = enforce(gate, output.claims, lm_verdict, [e for e in errors if e.rule.startswith("lm.")])
        record.self_evaluation = SelfEvaluation(verifier_evaluation=evaluation)
        verdict = evaluation.verdict

        verified = [r.claim for r in claim_results if r.verification_status == "verified"]
        not_verified = [r.claim for r in claim_results if r.verification_status != "verified"]
        fallback = deterministic_answer(question, verdict, verified, output.missing_info, gate.failed_rules,
                                        scope.excluded_terms)
        try:
            with self._stage(usage, "composer"), self._patch(length_patch({})):
                answer = self.composer(
                    question=question, verdict=verdict,
                    verified_facts=[f"{c.claim_text} (evidence: {'; '.join(b.evidence_excerpt for b in c.evidence_bindings)})"
                                    for c in verified],
                    hypotheses=[h.hypothesis_text for h in output.hypotheses],
                    missing_info=[m.description for m in output.missing_info],
                ).answer
            ref_texts = [ref.text for inv in recorder.invocations for ref in inv.retrieval_details.evidence_refs]
            reasons = scan_answer(answer, verified=verified, blocked=not_verified,
                                  excluded_terms=scope.excluded_terms, ref_texts=ref_texts)
            composer = (ComposerOutput(status="valid", user_facing_answer=answer) if not reasons else
                        ComposerOutput(status="replaced", user_facing_answer=fallback, reasons=reasons))
        except Exception as exc:
            finding = _stage_error("composer", exc)
            errors.append(finding)
            composer = ComposerOutput(status="fallback", user_facing_answer=fallback, reasons=[finding.message])

        record.composer_output = composer
        record.answer = composer.user_facing_answer
        record.verdict = verdict
        record.usage = usage
        record.errors = errors
        record.status = "completed"
        store.save_session(record)
        result = DiagnosisResult(session_id=session_id, verdict=verdict, answer=composer.user_facing_answer,
                                 claims=claim_results, gatekeeper_result=gate, composer_status=composer.status,
                                 usage=usage, errors=errors)
        return dspy.Prediction(verdict=verdict, answer=result.answer, result=result, record=record,
                               invocations=list(recorder.invocations))

    def _cite(self, question, plan, recorder, retry_context, usage, errors) -> tuple[ExecutorOutput, ParseStatus]:
        retry_text = "none" if retry_context is None else retry_context.model_dump_json()
        try:
            with self._stage(usage, "executor"), self._patch(citation_patch(recorder.invocations)):
                pred = self.executor(question=question, plan=plan, observations=render_observations(recorder.invocations),
                                     retry_context=retry_text)
            return (ExecutorOutput(claims=pred.claims, hypotheses=pred.hypotheses, missing_info=pred.missing_info,
                                   recommended_actions=pred.recommended_actions),
                    ParseStatus(status="valid", detail="parsed executor evidence contract"))
        except dspy.AdapterParseError as exc:
            errors.append(_stage_error("executor", exc))
            return salvage_executor_output(exc.lm_response)
        except Exception as exc:
            errors.append(_stage_error("executor", exc))
            return ExecutorOutput(), ParseStatus(status="invalid", detail=f"executor LM call failed: {type(exc).__name__}")


@contextmanager
def _null():
    yield

"""The cite stage of a run: the citation module (`program.lm.citation.Cite`), then the checks that
follow it, with one bounded retry after a gatekeeper reject."""

from __future__ import annotations

from program.evidence.checks import Checked, check_citations
from program.lm.citation import Cite
from program.lm.run import Run
from signatures.contracts import ExecutorAttempt, RetryContext


def cite_and_check(run: Run, cite: Cite, attempts: int) -> Checked:
    """The checked citations of the last attempt, each attempt in the record."""
    retry_context: RetryContext | None = None
    for attempt in range(1, attempts + 1):
        retry_text = "none" if retry_context is None else retry_context.model_dump_json()
        with run.stage(cite.usage_key):
            cited = cite(question=run.question, plan=run.plan, invocations=run.recorder.invocations,
                         narrow=run.scope.narrow, retry_context=retry_text, constrain=run.constrain)
        if cited.error is not None:
            run.errors.append(cited.error)
        checked = check_citations(
            run.store, session_id=run.session_id, question=run.question, output=cited.output,
            parse_status=cited.parse_status, invocations=run.recorder.invocations, target=run.target,
            toolbox=run.toolbox, refused=cited.refused, excluded_terms=run.scope.excluded_terms,
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

"""The executor's citation step as one module: what the pipeline runs and what `optimize.py` tunes.

It renders the session's calls with the label of every citation, narrows the response schema to
what this session's evidence allows (under constraints), asks its one predictor, salvages output
that does not parse, and expands each label into the binding it names. What it returns goes to
`program.evidence.checks.check_citations`, in the pipeline and in the devset metric alike.
"""

from __future__ import annotations

import dspy

from program.evidence.citations import Menu
from program.evidence.parsing import salvage_executor_output
from program.lm.adapter import citation_patch, narrowing
from program.lm.engine import narrows
from program.lm.stage_errors import stage_error
from signatures.contracts import ExecutorOutput, Finding, ParseStatus, PlannerOutput, ToolInvocation
from signatures.demos import executor_demos
from signatures.diagnosis import CiteEvidence, narrow_citation
from tools.recorder import render_observations

LISTS = ("hypotheses", "missing_info", "recommended_actions")


class Cite(dspy.Module):
    """Claims bound to this session's citations. Returns a Prediction with `output` (the expanded
    ExecutorOutput), `parse_status`, `drafts` (the claims as the LM wrote them), `refused`
    (labels that name no citation) and `error` (the LM stage's failure, or None)."""

    # The stage's name in the record: its usage key and the stem of its rules (a recorded name).
    usage_key = "executor"

    def __init__(self, max_tokens: int = 900):
        super().__init__()
        self.predict = dspy.Predict(CiteEvidence, max_tokens=max_tokens)
        self.predict.demos = executor_demos()

    def forward(self, question: str, plan: PlannerOutput, invocations: list[ToolInvocation], narrow: bool,
                retry_context: str = "none", constrain: bool | None = None) -> dspy.Prediction:
        """constrain: narrow the response schema to this session's labels; None: for the LMs that take it (narrows)."""
        menu = Menu(invocations)
        if not menu.citations:
            # Nothing can be cited, so asking the LM would only invite invention.
            rule, what = (("executor.nothing_to_cite", "every tool call failed") if invocations
                          else ("executor.no_evidence_gathered", "no tool call was made"))
            return self._result(ExecutorOutput(), ParseStatus(status="valid", detail=f"{what}; executor not called"),
                                error=Finding(rule=rule, message=f"{what}, so the executor had nothing to cite"))
        signature = narrow_citation(self.predict.signature) if narrow else self.predict.signature
        if constrain is None:
            constrain = narrows(dspy.settings.lm)
        config = narrowing(citation_patch(menu, narrow=narrow)) if constrain else {}
        try:
            pred = self.predict(signature=signature, config=config, question=question, plan=plan,
                                retry_context=retry_context, observations=render_observations(invocations))
        except dspy.AdapterParseError as exc:
            parts, parse = salvage_executor_output(exc.lm_response, tuple(signature.output_fields))
            return self._result(parts, parse, menu, error=stage_error(self.usage_key, exc))
        except Exception as exc:  # an LM error or timeout: nothing was cited
            return self._result(ExecutorOutput(), ParseStatus(status="invalid", detail=(
                f"executor LM call failed: {type(exc).__name__}")), error=stage_error(self.usage_key, exc))
        parts = {name: list(getattr(pred, name, None) or []) for name in ("claims", *LISTS)}
        return self._result(parts, ParseStatus(status="valid", detail="parsed executor evidence contract"), menu)

    @staticmethod
    def _result(parts: dict | ExecutorOutput, parse: ParseStatus, menu: Menu | None = None,
                error: Finding | None = None) -> dspy.Prediction:
        if isinstance(parts, ExecutorOutput):
            return dspy.Prediction(output=parts, parse_status=parse, drafts=[], refused=[], error=error)
        drafts = parts.get("claims", [])
        claims, refused = menu.expand(drafts)
        output = ExecutorOutput(claims=claims, **{name: parts.get(name, []) for name in LISTS})
        return dspy.Prediction(output=output, parse_status=parse, drafts=drafts, refused=refused, error=error)

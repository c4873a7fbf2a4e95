"""The executor's citation step as one module: what the pipeline runs and what `optimize.py` tunes.

It renders the session's calls with the label of every citation, narrows the response schema to
what this session's evidence allows (under constraints), asks its one predictor, salvages output
that does not parse, and expands each label into the binding it names. What it returns goes to
`program.evidence.checks.check_citations`, in the pipeline and in the devset metric alike.

Given a `review` (the checks, as an assertion), it asks once more when code refused something a new
attempt can fix, told why in the checks' own words, as dspy.Assert's backtracking did and as
dspy.Refine does with a reward function. It does not use dspy.Refine itself: Refine and BestOfN
sample every rollout at temperature 1.0 (this program decodes greedily, and its transcripts replay),
Refine writes its feedback with one more LM call over the program's source code instead of the
checks' findings, and it reruns the module on the same inputs, where a second look's new lines must
reach the next attempt's menu. Both attempts are returned; the one the checks score higher is used.
"""

from __future__ import annotations

from collections.abc import Callable

import dspy

from program.evidence.checks import Review, retry_text
from program.evidence.citations import Menu
from program.evidence.language import question_language
from program.evidence.parsing import salvage_executor_output
from program.lm.adapter import citation_patch, narrowing
from program.lm.engine import narrows
from program.lm.stage_errors import stage_error
from contracts import ExecutorOutput, Finding, Language, ParseStatus, PlannerOutput, RetryContext, ToolInvocation
from signatures.demos import executor_demos, for_language
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
                retry_context: str = "none", language: Language | None = None, constrain: bool | None = None,
                review: Callable[[dspy.Prediction, RetryContext | None], Review] | None = None,
                attempts: int = 2) -> dspy.Prediction:
        """language: the answer's, which the claims are written in and the demos shown are in; None: the
        question's own. constrain: narrow the response schema to this session's labels; None: for the
        LMs that take it (narrows). review: the checks of one attempt, given the retry context it was asked with; with it,
        at most `attempts` attempts, and the prediction also carries `attempts` (each attempt's
        prediction with its retry context and review) and `chosen` (the index of the one used)."""
        language = language or question_language(question)
        first = self.attempt(question, plan, invocations, narrow, retry_context, constrain, language=language)
        if review is None:
            return first
        tried = [(first, None, review(first, None))]
        asked = [(invocations, retry_context)]
        while len(tried) < attempts and (context := tried[-1][2].retry) is not None:
            previous, _, reviewed = tried[-1]
            told = retry_text(context, previous.output.claims, reviewed.new_calls)
            # The attempt refused is the turn before this one: what it was shown and what it wrote.
            turn = self._turn(narrow, language, question, plan, *asked[-1], previous)
            again = self.attempt(question, plan, reviewed.invocations, narrow, told, constrain, turn, reviewed.withheld,
                                 language=language)
            asked.append((reviewed.invocations, told))
            tried.append((again, context, review(again, context)))
        # The later attempt wins a tie: it was told why.
        chosen = max(range(len(tried)), key=lambda n: (tried[n][2].score, n))
        return dspy.Prediction(**tried[chosen][0].toDict(), attempts=tried, chosen=chosen)

    def _turn(self, narrow: bool, language: Language, question: str, plan: PlannerOutput,
              invocations: list[ToolInvocation], retry_context: str, attempt: dspy.Prediction) -> dspy.Example:
        signature = narrow_citation(self.predict.signature) if narrow else self.predict.signature
        written = {"claims": attempt.drafts, **{name: getattr(attempt.output, name) for name in LISTS}}
        return dspy.Example(language=language, question=question, plan=plan,
                            observations=render_observations(invocations), retry_context=retry_context,
                            **{k: written[k] for k in signature.output_fields})

    def attempt(self, question: str, plan: PlannerOutput, invocations: list[ToolInvocation], narrow: bool,
                retry_context: str, constrain: bool | None, turn: dspy.Example | None = None,
                withheld: tuple[str, ...] = (), *, language: Language) -> dspy.Prediction:
        """One call of the predictor on this session's menu, less the `withheld` labels; `turn`: the
        attempt before it, shown as the turn before this one."""
        menu = Menu(invocations, withheld)
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
            demos = for_language(self.predict.demos, language)
            pred = self.predict(signature=signature, config=config, demos=[*demos, turn] if turn is not None else demos,
                                language=language, question=question, plan=plan, retry_context=retry_context,
                                observations=render_observations(invocations))
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

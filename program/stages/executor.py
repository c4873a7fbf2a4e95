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

A new attempt revises; it does not start over. The claims code let through stand in its output as
they were (`RetryContext.kept`), and the refs they cite are not offered to it again: asked to point
after some claims were refused, the 1.5B pointed at the alert again and nothing else, so the retry
either left the refused claims unrevised or lost a claim that had passed (seven cases of
results/20261207T120521Z). When what stands cites every ref left, no new attempt is asked for.

The new attempt is asked differently where it matters, through DSPy's per-call seams: it points
and writes nothing. The signature's instructions say so (`signatures.diagnosis.retry_citation`),
the narrowed schema allows its claims no text (`citation_patch(pointing=True)`), and code quotes
what each claim points at (`Menu.expand`), as the Citations API extracts a quote. Asked to write a
refused claim anew, the 1.5B echoed the question's presumption in every presumed-state retry. The
retry context names the refused claims with their findings, what they cited shows and the labels
of what a second look found, never their text, and three worked revisions that point come after
the demos (`signatures.demos.retry_demos`). A retry that still writes the same claims (an LM given
no schema may write a text) is recorded as no revision. One text is kept: a claim refused only for
citing a ref that lacks what it wrote, when the retry points at the one ref that holds all of it
(`_repointed`); its words were not what code refused.
"""

from __future__ import annotations

from collections.abc import Callable

import dspy

from program.evidence.checks import Review, relocated, retry_text
from program.evidence.citations import Menu
from program.evidence.language import question_language
from program.evidence.parsing import DECISIONS, salvage_executor_output
from program.evidence.screen import Screen
from program.lm.adapter import TEXT_MAX_CHARS, citation_patch, narrowing
from program.lm.engine import narrows
from program.stages.nearest import NearestDemo, same_case
from program.stages.stage_errors import stage_error
from contracts import (
    Claim, EvidenceBinding, ExecutorOutput, Finding, Language, ParseStatus, PlannerOutput, RetryContext, SetAside, ToolInvocation)
from signatures.demos import executor_demos, for_language, retry_demos
from signatures.diagnosis import CiteEvidence, narrow_citation, retry_citation
from tools.recorder import canonical_label, citation_label, render_observations

LISTS = ("hypotheses", "missing_info", "recommended_actions")
# A retry's claim that only cites again what a claim standing from the attempt before cites.
REPEATS_KEPT = "executor.repeats_kept"
# A retry's claim that points at the ref holding all a refused claim wrote, and takes its text.
REPOINTED = "executor.repointed"


class Cite(dspy.Module):
    """Claims bound to this session's citations. Returns a Prediction with `output` (the expanded
    ExecutorOutput, which on a retry begins with the claims that stand from the attempt before),
    `parse_status`, `drafts` (the claims as the LM wrote them, less those a retry wrote again of what
    stands), `written` (all it wrote), `decisions` (what
    it decided of each ref, by label), `set_aside` (the bindings of refs it decided do not answer,
    which code took out of its claims), `screened` (what code set aside before asking it), `refused`
    (labels that name no citation), `error` (the LM stage's failure, or None) and `text_cap` (the
    longest claim text the narrowed schema allowed; None when it was not narrowed)."""

    # The stage's name in the record: its usage key and the stem of its rules (a recorded name).
    usage_key = "executor"

    def __init__(self, max_tokens: int = 900):
        super().__init__()
        self.predict = dspy.Predict(CiteEvidence, max_tokens=max_tokens)
        self.predict.demos = executor_demos()
        # Empty unless a compiled program put its training examples here (optimize.py's `knn`).
        self.nearest = NearestDemo()
        # Not the predictor's: an optimizer tunes the first attempt's demos, and these show a revision.
        self.retry_demos = retry_demos()

    def forward(self, question: str, plan: PlannerOutput, invocations: list[ToolInvocation], narrow: bool,
                retry_context: str = "none", language: Language | None = None, constrain: bool | None = None,
                review: Callable[[dspy.Prediction, RetryContext | None], Review] | None = None,
                attempts: int = 2, screen: Screen | None = None) -> dspy.Prediction:
        """language: the answer's, which the claims are written in and the demos shown are in; None: the
        question's own. constrain: narrow the response schema to this session's labels; None: for the
        LMs that take it (narrows). review: the checks of one attempt, given the retry context it was asked with; with it,
        at most `attempts` attempts, and the prediction also carries `attempts` (each attempt's
        prediction with its retry context and review) and `chosen` (the index of the one used). screen:
        what code sets aside of the calls before the LM is asked (program.evidence.screen), on every
        attempt's calls; None: every ref is offered."""
        language = language or question_language(question)
        first = self.attempt(question, plan, invocations, narrow, retry_context, constrain, language=language,
                             screen=screen)
        if review is None:
            return first
        tried = [(first, None, review(first, None))]
        while len(tried) < attempts and (context := tried[-1][2].retry) is not None:
            previous, _, reviewed = tried[-1]
            kept = _standing(reviewed)
            withheld = reviewed.withheld + _cited_labels(kept, _menu(reviewed.invocations, (), screen))
            menu = _menu(reviewed.invocations, withheld, screen)
            if kept and not menu.offered:
                # What stands cites every ref left: a new attempt could only say it again.
                break
            context = context.model_copy(update={"kept": [c.claim_id for c in kept], "relocated": relocated(
                context, previous.output.claims, {label: menu.citations[label].excerpt
                                                  for label in menu.hits if label in menu.refs})})
            told = retry_text(context, previous.output.claims, reviewed.found)
            # After a gatekeeper reject no word of the attempt is used again, as none of it stands.
            refused = {} if reviewed.checked.gate.severity == "reject" else {c.claim_id: c for c in previous.output.claims}
            repointable = [m for m in context.relocated if m.repointable and m.claim_id in refused]
            # A ref that holds all of two refused claims stands neither: which one the retry meant is unknown.
            moves = {m.holding: refused[m.claim_id] for m in repointable
                     if [n.holding for n in repointable].count(m.holding) == 1}
            again = self.attempt(question, plan, reviewed.invocations, narrow, told, constrain, retry=True,
                                 withheld=withheld, language=language, screen=screen, kept=kept, moves=moves)
            # Under greedy decoding a small model may write the refused claims again unchanged: that is
            # no revision, and it never wins a tie against the attempt it repeats.
            again.repeated = _same_claims(again.written, previous.written)
            tried.append((again, context, review(again, context)))
        # Otherwise the later attempt wins a tie: it was told why. One whose LM call failed holds only
        # what stood before it, and its error must not become the run's.
        chosen = max(range(len(tried)), key=lambda n: (
            tried[n][2].score, -1 if tried[n][0].get("repeated") or (n and tried[n][0].error is not None) else n))
        return dspy.Prediction(**dict(tried[chosen][0].items()), attempts=tried, chosen=chosen)

    def attempt(self, question: str, plan: PlannerOutput, invocations: list[ToolInvocation], narrow: bool,
                retry_context: str, constrain: bool | None, retry: bool = False,
                withheld: tuple[str, ...] = (), *, language: Language, screen: Screen | None = None,
                kept: list[Claim] = (), moves: dict[str, Claim] | None = None) -> dspy.Prediction:
        """One call of the predictor on this session's menu, less the `withheld` labels and what the
        `screen` sets aside, shown the demos in the answer's `language`. retry: the attempt after a
        refusal, asked with the retry's instructions and its worked examples. kept: the claims of the
        attempt before that code let through, which stand first in this one's output. moves: the ref
        (label) that holds all a refused claim wrote, by label, for the claims refused only for that
        (`Relocated.repointable`)."""
        menu = _menu(invocations, withheld, screen)
        screening = menu.screening
        if not menu.offered:
            # Nothing can be cited, so asking the LM would only invite invention.
            why = [f"{aside.label}: {aside.reason}" for aside in screening.set_aside]
            why += [f"{label}: a second look contradicted it" for label in withheld if label in menu.citations]
            rule, what = (("executor.all_set_aside", f"code set aside every ref the tool calls found ({'; '.join(why[:3])}"
                           f"{'; …' if len(why) > 3 else ''})") if menu.citations else
                          ("executor.nothing_to_cite", "every tool call failed") if invocations
                          else ("executor.no_evidence_gathered", "no tool call was made"))
            return self._result(ExecutorOutput(), ParseStatus(status="valid", detail=f"{what}; executor not called"),
                                error=Finding(rule=rule, message=f"{what}, so the executor had nothing to cite"),
                                screened=screening.set_aside)
        signature = retry_citation(self.predict.signature) if retry else self.predict.signature
        signature = narrow_citation(signature) if narrow else signature
        if constrain is None:
            constrain = narrows(dspy.settings.lm)
        config = narrowing(citation_patch(menu, narrow=narrow, pointing=retry)) if constrain else {}
        # A pointing retry writes no text: the quote code writes for it has no cap to reach.
        cap = TEXT_MAX_CHARS if constrain and not retry else None
        demos = []
        try:
            demos = self.demos_for(question, plan, language, retry)
            pred = self.predict(signature=signature, config=config, demos=demos, language=language,
                                question=question, plan=plan, retry_context=retry_context,
                                observations=render_observations(invocations, screening.hidden()))
        except dspy.AdapterParseError as exc:
            parts, parse = salvage_executor_output(exc.lm_response, tuple(signature.output_fields))
            return self._result(parts, parse, menu, error=stage_error(self.usage_key, exc), text_cap=cap,
                                language=language, demos=demos, kept=kept, moves=moves)
        except Exception as exc:  # an LM error or timeout: nothing was cited
            return self._result(ExecutorOutput(claims=list(kept)), ParseStatus(status="invalid", detail=(
                f"executor LM call failed: {type(exc).__name__}")), error=stage_error(self.usage_key, exc),
                                screened=screening.set_aside, demos=demos)
        parts = {name: list(getattr(pred, name, None) or []) for name in ("claims", *LISTS)}
        parts[DECISIONS] = {j.ref: j.decision for j in getattr(pred, DECISIONS, None) or []}
        return self._result(parts, ParseStatus(status="valid", detail="parsed executor evidence contract"), menu,
                            text_cap=cap, language=language, demos=demos, kept=kept, moves=moves)

    def demos_for(self, question: str, plan: PlannerOutput, language: Language, retry: bool = False) -> list:
        """The demos shown for this question, in its answer's language: the predictor's, then the
        example of the pool nearest the question (last, nearest the question; not twice), then, for a
        retry, the worked revisions."""
        shown = for_language(self.predict.demos, language)
        if (near := self.nearest.nearest(question, plan, language)) is not None:
            shown = [d for d in shown if not same_case(d, near)] + [near]
        return shown + (for_language(self.retry_demos, language) if retry else [])

    @staticmethod
    def _result(parts: dict | ExecutorOutput, parse: ParseStatus, menu: Menu | None = None,
                error: Finding | None = None, text_cap: int | None = None,
                language: Language | None = None, screened: list[SetAside] = (),
                demos: list = (), kept: list[Claim] = (), moves: dict[str, Claim] | None = None) -> dspy.Prediction:
        shown = [demo.get("question", "") for demo in demos]
        if isinstance(parts, ExecutorOutput):
            return dspy.Prediction(output=parts, parse_status=parse, drafts=[], written=[], refused=[], error=error,
                                   text_cap=None, decisions={}, set_aside=[], screened=list(screened), demos=shown)
        drafts = written = parts.get("claims", [])
        # Only the refs it judged an answer; a decision on a label not on the menu decides nothing.
        offered = set(menu.refs)
        decisions = {key: d for label, d in parts.get(DECISIONS, {}).items() if (key := canonical_label(label)) in offered}
        answering, set_aside = menu.answering(drafts, decisions)
        drafts, answering, repeats = _new_claims(drafts, answering, kept, menu)
        answering, repointed = _repointed(answering, moves or {}, menu)
        claims, refused = menu.expand(answering, language, taken={c.claim_id for c in kept})
        output = ExecutorOutput(claims=[*kept, *claims], **{name: parts.get(name, []) for name in LISTS})
        return dspy.Prediction(output=output, parse_status=parse, drafts=drafts, written=written, refused=refused, error=error,
                               text_cap=text_cap, decisions=decisions, set_aside=set_aside + repeats + repointed,
                               screened=menu.screening.set_aside, demos=shown)


def _menu(invocations: list[ToolInvocation], withheld: tuple[str, ...], screen: Screen | None) -> Menu:
    """What an attempt may cite: the session's citations less the `withheld` labels and what `screen` sets aside."""
    return Menu(invocations, withheld, screen(invocations) if screen is not None else None)


def _standing(reviewed: Review) -> list[Claim]:
    """The claims of a reviewed attempt that code let through, unless the gatekeeper rejected it: a
    fabricated citation discredits the whole attempt."""
    return [] if reviewed.checked.gate.severity == "reject" else reviewed.checked.verifiable


def _refs_of(claims: list[Claim]) -> set[tuple[int, str | None]]:
    return {(b.source_invocation_id, b.raw_path) for c in claims for b in c.evidence_bindings}


def _cited_labels(claims: list[Claim], menu: Menu) -> tuple[str, ...]:
    """Every label of `menu` that names a ref the claims cite, its clauses included."""
    cited = _refs_of(claims)
    return tuple(label for label, c in menu.citations.items() if (c.invocation_id, c.raw_path) in cited)


def _new_claims(drafts: list, answering: list, kept: list[Claim], menu: Menu) -> tuple[list, list, list[Finding]]:
    """The drafts (as written, and as they answer) that say something besides what stands in `kept`,
    and a finding for each one left out: a draft every label of which names a ref a kept claim cites
    repeats what stands (a retry under no schema may cite what it was not offered)."""
    standing = _refs_of(kept)

    def ref(binding: str | EvidenceBinding) -> tuple[int | None, str | None] | None:
        if isinstance(binding, EvidenceBinding):
            return binding.source_invocation_id, binding.raw_path
        citation = menu.lookup(binding)
        return None if citation is None else (citation.invocation_id, citation.raw_path)

    def repeats(draft) -> bool:
        refs = [ref(binding) for binding in draft.evidence_bindings]
        return bool(kept) and bool(refs) and all(r in standing for r in refs)

    left = [n for n, draft in enumerate(answering) if not repeats(draft)]
    findings = [Finding(rule=REPEATS_KEPT, claim_id=draft.claim_id or None, message=(
        f"claim {n + 1} as written ({draft.claim_type}, {draft.claim_text!r}) cites only what claims that stand "
        f"from the attempt before cite; it was left out")) for n, draft in enumerate(drafts) if n not in left]
    return [drafts[n] for n in left], [answering[n] for n in left], findings


def _repointed(drafts: list, moves: dict[str, Claim], menu: Menu) -> tuple[list, list[Finding]]:
    """The drafts, each that points with no text at the one ref alone (label) that holds all a
    refused claim wrote (`moves`) taking that claim's text and type, and a finding for each. The
    text was refused only for citing a ref that lacks what it wrote, and a retry writes no text:
    per_kind's first attempts answered "not exhausted" with the figures of the pool line and cited
    the line beside it (three held-out near misses of results/20261207T160757Z); two retries pointed
    at the pool line, so code's quote of it was the answer and the "no" was lost. The claim is
    checked again on what it now cites, like any other, and stands once."""
    moved, findings, left = [], [], dict(moves)
    for draft in drafts:
        citations = [None if isinstance(b, EvidenceBinding) else menu.lookup(b) for b in draft.evidence_bindings]
        cited = {citation_label(c.invocation_id, c.raw_path) for c in citations if c is not None}
        holding = cited.pop() if len(cited) == 1 and None not in citations else None
        refused = left.get(holding) if holding is not None else None
        if refused is None or draft.claim_text.strip():
            moved.append(draft)
            continue
        del left[holding]
        moved.append(draft.model_copy(update={"claim_text": refused.claim_text, "claim_type": refused.claim_type}))
        findings.append(Finding(rule=REPOINTED, claim_id=draft.claim_id, message=(
            f"the retry pointed at {holding} alone, which holds all that {refused.claim_id} wrote and cited "
            f"elsewhere, so {refused.claim_id}'s text stands on it and is checked again")))
    return moved, findings


def _same_claims(drafts: list, before: list) -> bool:
    """The same claims in the same order, whatever each draft's form (a model or a dict)."""
    def written(draft) -> dict:
        fields = draft.model_dump() if hasattr(draft, "model_dump") else dict(draft)
        return {k: v for k, v in fields.items() if k != "claim_id"}
    return bool(before) and [written(d) for d in drafts] == [written(d) for d in before]

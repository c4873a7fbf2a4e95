"""Gatekeeper: deterministic checks that every evidence binding cites something real.

It judges citations, never claims. Fabrication (unknown or foreign invocation, wrong tool, a
raw_path the invocation does not have, an excerpt that is not in the ref) is ``reject``; missing
or incomplete citations are ``low_confid``. Every binding of every claim and recommended action is
checked and kept in ``checked_bindings``.

Command line::

    python -m program.evidence.gatekeeper --session-id S --invocations INV.json --executor-output OUT.json

prints the GatekeeperResult as JSON; exit 0 on pass, 1 on fail, 2 on unreadable input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from program.evidence.injection import addresses_the_model, instruction_in
from program.evidence.characters import bidi_controls
from program.evidence.canonical import canonical
from program.evidence.matching import Match, match_excerpt, occurs_in_order
from contracts import (
    LOCATOR,
    SEVERITY_RANK,
    CheckedBinding,
    EvidenceBinding,
    ExecutorOutput,
    Finding,
    GatekeeperResult,
    ToolInvocation,
)
from tools.declaration import Toolbox
from tools.functions import TOOLBOX

# A label that names no citation of the session: the pointing form of a fabricated citation.
UNKNOWN_LABEL = "evidence.unknown_label"
BIDI_CONTROL = "evidence.bidi_control"
NO_HIT_ECHO = "evidence.no_hit_echo"
REJECT_RULES = frozenset(
    {
        "evidence.invocation_ref",
        "evidence.invocation_session",
        "evidence.tool_name",
        "evidence.raw_path",
        "evidence.excerpt_mismatch",
        UNKNOWN_LABEL,
    }
)


@dataclass
class _Verdict:
    severity: str
    rule: str | None = None
    message: str = ""
    matched_text: str | None = None
    context: str | None = None


def _passed(match: Match, where: str) -> _Verdict:
    """A quote that occurs in its ref passes, unless what a reader would be shown of it holds bidi
    controls, which make it display as something else ("\u202e91\u202c%" shows as "19%")."""
    if controls := bidi_controls(match.context or ""):
        return _Verdict("low_confid", BIDI_CONTROL, f"{where} holds bidirectional control characters "
                        f"({', '.join(controls)}), which change what a reader sees; it cannot support a claim",
                        matched_text=match.matched_text, context=match.context)
    return _Verdict("none", matched_text=match.matched_text, context=match.context)


@dataclass
class _Context:
    session_id: str
    invocations: Mapping[int, ToolInvocation]
    toolbox: Toolbox
    session_invocations: list[ToolInvocation] = field(default_factory=list)

    def locate_elsewhere(self, excerpt: str, skip: tuple[int, str | None]) -> str | None:
        """Where in this session the excerpt really occurs, to make a reject message actionable."""
        for inv in self.session_invocations:
            for ref in inv.retrieval_details.evidence_refs:
                if (inv.id, ref.raw_path) == skip:
                    continue
                if occurs_in_order(excerpt, ref.text) and match_excerpt(excerpt, ref.text).ok:
                    return f"; that text is at invocation {inv.id} ({inv.tool_name}) {ref.raw_path}"
        return None


def _check_binding(binding: EvidenceBinding, claim_type: str | None, ctx: _Context) -> _Verdict:
    inv = ctx.invocations.get(binding.source_invocation_id) if binding.source_invocation_id is not None else None
    found = _check_invocation(binding, inv, ctx)
    if found is not None:
        return found
    raw_path = (binding.raw_path or "").strip()
    if inv.retrieval_details.evidence_status == "no_evidence":
        return _check_no_hit(binding, claim_type, inv, raw_path)
    return _check_ref(binding, inv, raw_path, ctx)


def _check_invocation(binding: EvidenceBinding, inv: ToolInvocation | None, ctx: _Context) -> _Verdict | None:
    """Does the binding name a real, successful call of this session, of the tool it says? None: it does."""
    if binding.tool_name not in ctx.toolbox:
        return _Verdict("reject", "evidence.tool_name", f"tool_name {binding.tool_name!r} is not a known tool")
    if binding.source_invocation_id is None:
        return _Verdict("low_confid", "evidence.invocation_missing", "binding has no source_invocation_id")
    if inv is None:
        return _Verdict(
            "reject",
            "evidence.invocation_ref",
            f"source_invocation_id {binding.source_invocation_id} does not exist",
        )
    if inv.session_id != ctx.session_id:
        return _Verdict(
            "reject",
            "evidence.invocation_session",
            f"invocation {inv.id} belongs to session {inv.session_id!r}, not {ctx.session_id!r}",
        )
    if inv.tool_name != binding.tool_name:
        return _Verdict(
            "reject",
            "evidence.tool_name",
            f"binding says tool {binding.tool_name!r} but invocation {inv.id} was {inv.tool_name!r}",
        )
    details = inv.retrieval_details
    if not inv.success or details.evidence_status == "failed":
        return _Verdict(
            "low_confid",
            "evidence.invocation_failed",
            f"invocation {inv.id} failed ({details.message or 'no message'}); a failed call supports nothing",
        )
    return None


def _check_no_hit(binding: EvidenceBinding, claim_type: str | None, inv: ToolInvocation, raw_path: str) -> _Verdict:
    """A binding on a search that found nothing: only a negative observation may cite its message."""
    if raw_path:
        return _Verdict(
            "reject",
            "evidence.raw_path",
            f"raw_path {raw_path!r} cited, but invocation {inv.id} found nothing (evidence_status=no_evidence)",
        )
    if claim_type != "negative_observation":
        return _Verdict(
            "low_confid",
            "evidence.raw_path_missing",
            f"invocation {inv.id} found nothing; only a negative_observation may cite a no-hit",
        )
    match = match_excerpt(binding.evidence_excerpt, inv.retrieval_details.message)
    if match.ok and _only_the_search(match, inv):
        return _Verdict("low_confid", NO_HIT_ECHO,
                        f"the excerpt quotes only what invocation {inv.id} searched for, as its no-hit message echoes "
                        "it, not that nothing was found; quote the words that say nothing matched")
    if match.ok:
        return _passed(match, f"the no-hit message of invocation {inv.id}")
    severity = "low_confid" if match.too_weak else "reject"
    return _Verdict(severity, match.rule, f"{match.message} (no-hit message of invocation {inv.id})")


def _only_the_search(match: Match, inv: ToolInvocation) -> bool:
    """Does every letter and digit the excerpt quotes of a no-hit message belong to the arguments
    the message echoes (their names and values)? Then the quote states the search, which reads like
    a finding ("HikariCP 连接池耗尽"), not its result."""
    source = canonical(inv.retrieval_details.message).source
    echoed = [False] * len(source)
    for name, value in (inv.input or {}).items():
        for text in {str(name), str(value), repr(value)} - {""}:
            start = source.find(text)
            while start != -1:
                echoed[start:start + len(text)] = [True] * len(text)
                start = source.find(text, start + 1)
    quoted = [i for start, end in match.spans for i in range(start, min(end, len(source)))]
    return bool(quoted) and all(echoed[i] or not source[i].isalnum() for i in quoted)


def _check_ref(binding: EvidenceBinding, inv: ToolInvocation, raw_path: str, ctx: _Context) -> _Verdict:
    """A binding on a ref: a path the tool's declaration and this call both have, and a quote of its text."""
    if not raw_path:
        return _Verdict("low_confid", "evidence.raw_path_missing", f"binding on invocation {inv.id} has no raw_path")
    refs = {ref.raw_path: ref.text for ref in inv.retrieval_details.evidence_refs}
    if not refs:
        return _Verdict(
            "low_confid",
            "evidence.no_refs",
            f"invocation {inv.id} has no evidence_refs in retrieval_details; nothing to compare against",
        )
    declaration = ctx.toolbox.get(inv.tool_name)
    locator = LOCATOR.match(raw_path)
    # Checked even when the path is among the refs: a record whose refs do not follow the tool's
    # declaration was not written by the recorder.
    if locator is None or locator.group(1) != declaration.items or raw_path not in refs:
        if locator is None:
            why = f"is not one of the supported locators {ctx.toolbox.locators()}"
        elif locator.group(1) != declaration.items:
            why = f"cannot come from {inv.tool_name}, whose refs are {declaration.locator}"
        else:
            why = f"is not among invocation {inv.id}'s refs ({', '.join(refs)})"
        return _Verdict("reject", "evidence.raw_path", f"raw_path {raw_path!r} {why}")
    match = match_excerpt(binding.evidence_excerpt, refs[raw_path])
    if match.ok and addresses_the_model(refs[raw_path]):
        return _Verdict(
            "low_confid",
            "evidence.suspected_injection",
            f"{raw_path} of invocation {inv.id} contains text addressed to the model "
            f"({instruction_in(refs[raw_path])!r}); it is data and cannot support a claim",
            matched_text=match.matched_text,
            context=match.context,
        )
    if match.ok:
        return _passed(match, f"{raw_path} of invocation {inv.id}")
    if match.too_weak:
        return _Verdict("low_confid", match.rule, match.message)
    hint = ctx.locate_elsewhere(binding.evidence_excerpt, (inv.id, raw_path)) or ""
    return _Verdict("reject", match.rule, f"{match.message} at invocation {inv.id} {raw_path}{hint}")


def check(
    executor_output: ExecutorOutput,
    invocations: Iterable[ToolInvocation] | Mapping[int, ToolInvocation],
    session_id: str,
    *,
    backfilled: Iterable[tuple[str, int]] = (),
    prior_errors: Iterable[Finding] = (),
    prior_warnings: Iterable[Finding] = (),
    toolbox: Toolbox,
) -> GatekeeperResult:
    """Check every binding. `invocations` may include other sessions' calls (to tell foreign from
    unknown ids); `toolbox` declares the tools whose refs may be cited; `backfilled` names
    (owner_id, binding_index) pairs the hook filled in; `prior_errors` carries findings from before
    the check: malformed executor output (low confidence), labels that name no citation (reject)."""
    by_id = dict(invocations) if isinstance(invocations, Mapping) else {inv.id: inv for inv in invocations}
    ctx = _Context(
        session_id=session_id,
        invocations=by_id,
        toolbox=toolbox,
        session_invocations=sorted((i for i in by_id.values() if i.session_id == session_id), key=lambda i: i.id),
    )
    backfilled_set = set(backfilled)
    errors: list[Finding] = list(prior_errors)
    checked: list[CheckedBinding] = []

    if not executor_output.claims:
        errors.append(Finding(rule="evidence.no_claims", message="executor output has no claims to check"))
    owners = [("claim", c.claim_id, c.claim_type, c.evidence_bindings) for c in executor_output.claims]
    owners += [("action", a.action_id, None, a.evidence_bindings) for a in executor_output.recommended_actions]
    seen_ids: set[str] = set()
    for kind, owner_id, claim_type, bindings in owners:
        ids = {"claim_id": owner_id} if kind == "claim" else {"action_id": owner_id}
        if owner_id in seen_ids:
            errors.append(Finding(rule="executor.duplicate_id", message=f"{kind} id {owner_id!r} is used twice", **ids))
        seen_ids.add(owner_id)
        if kind == "claim" and not bindings:
            errors.append(
                Finding(rule="evidence.no_bindings", message=f"claim {owner_id!r} has no evidence_bindings", **ids)
            )
        for index, binding in enumerate(bindings):
            verdict = _check_binding(binding, claim_type, ctx)
            if verdict.severity != "none":
                errors.append(Finding(rule=verdict.rule, message=verdict.message, binding_index=index, **ids))
            checked.append(_checked(binding, index, verdict, (owner_id, index) in backfilled_set, ids))

    severity = "none"
    for finding in errors:
        rank = "reject" if finding.rule in REJECT_RULES else "low_confid"
        if SEVERITY_RANK[rank] > SEVERITY_RANK[severity]:
            severity = rank
    return GatekeeperResult(
        status="pass" if severity == "none" else "fail",
        severity=severity,
        checked_bindings=checked,
        failed_rules=list(dict.fromkeys(f.rule for f in errors)),
        warnings=list(prior_warnings),
        errors=errors,
    )


def _checked(binding: EvidenceBinding, index: int, verdict: _Verdict, backfilled: bool, ids: dict) -> CheckedBinding:
    return CheckedBinding(
        binding_index=index,
        tool_name=binding.tool_name,
        source_invocation_id=binding.source_invocation_id,
        raw_path=binding.raw_path,
        evidence_excerpt=binding.evidence_excerpt,
        status="pass" if verdict.severity == "none" else "fail",
        severity=verdict.severity,
        matched_text=verdict.matched_text,
        context=verdict.context,
        rule=verdict.rule,
        message=verdict.message or None,
        backfilled=backfilled,
        **ids,
    )


def _load(path: str, adapter: TypeAdapter, what: str):
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None
    try:
        return adapter.validate_json(text)
    except ValidationError as exc:
        raise ValueError(f"{what} file {path} does not match the contract:\n{exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m program.evidence.gatekeeper",
        description="Check an executor output's evidence bindings against recorded tool invocations.",
    )
    parser.add_argument("--session-id", required=True, help="the session the executor output belongs to")
    parser.add_argument("--invocations", required=True, help="JSON array of recorded tool invocations")
    parser.add_argument("--executor-output", required=True, help="JSON ExecutorOutput")
    args = parser.parse_args(argv)
    try:
        invocations = _load(args.invocations, TypeAdapter(list[ToolInvocation]), "invocations")
        output = _load(args.executor_output, TypeAdapter(ExecutorOutput), "executor-output")
        duplicates = sorted({inv.id for inv in invocations if sum(other.id == inv.id for other in invocations) > 1})
        if duplicates:
            # Which copy would be "the" invocation? A forged second copy must not silently win.
            raise ValueError(f"invocations file {args.invocations} has duplicate ids: {duplicates}")
    except ValueError as exc:
        print(f"gatekeeper: {exc}", file=sys.stderr)
        return 2
    result = check(output, invocations, args.session_id, toolbox=TOOLBOX)
    print(result.model_dump_json(indent=2))
    return 0 if result.status == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())

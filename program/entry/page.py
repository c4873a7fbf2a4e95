"""The audit page: one stored session as HTML for a person, served at ``GET /sessions/{session_id}``.

Each citation is shown inside the whole ref it quotes, the quoted part marked where the gatekeeper's
own matcher finds it (``program/evidence/matching.py``), so an auditor sees what was quoted and what
stood around it. Everything on the page came from a user, an LM or a tool, so every value is escaped
(Jinja2 autoescape), a character that changes what a reader sees (a bidirectional control, a
zero-width character) is shown by its code point, and the page allows no script at all: its
Content-Security-Policy, sent as a header and repeated in the page for a copy saved to a file,
permits only its own stylesheet.

The router reads the store from ``request.app.state.store`` (an ``AuditStore``).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from importlib.resources import files

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

from program.store.audit import TRACEBACK, AuditStore
from program.store.errors import AuditStoreError, UnreadableRecord
from program.evidence.characters import BIDI_CONTROLS
from program.evidence.gatekeeper import UNKNOWN_LABEL
from program.evidence.canonical import canonical
from program.evidence.citations import Menu
from program.evidence.matching import match_excerpt
from contracts import (
    STATUS_VERDICT,
    CheckedBinding,
    Claim,
    ClaimDraft,
    ClaimJudgement,
    ExecutorOutput,
    Finding,
    GatekeeperResult,
    ToolInvocation,
)
from contracts.record import DiagnosisSession, ExecutorAttempt
from tools.text.folding import ZERO_WIDTH
from tools.recorder import call_text, citation_label

STYLE = files("program.entry").joinpath("templates/page.css").read_text(encoding="utf-8")
# The one inline stylesheet is allowed by its hash: no other style, and no script, image or frame.
STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode("utf-8")).digest()).decode("ascii")
POLICY = f"default-src 'none'; style-src 'sha256-{STYLE_HASH}'; base-uri 'none'; form-action 'none'"
# frame-ancestors is obeyed only in a header, never in a <meta> policy.
HEADERS = {"Content-Security-Policy": f"{POLICY}; frame-ancestors 'none'", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer"}
# What a claim's final judgement means for it (program/evidence/verdict.py writes them).
CLAIM_STATUS = {verdict: status for status, verdict in STATUS_VERDICT.items()}
HIDDEN = BIDI_CONTROLS | ZERO_WIDTH


def _shown(value) -> Markup:
    """Every value the templates print: escaped, with the characters that hide or reorder text
    written out as code points."""
    if isinstance(value, Markup):
        return value
    text = "" if value is None else str(value)
    if not any(ch in HIDDEN for ch in text):
        return escape(text)
    return Markup("").join(Markup('<span class="hidden-char">U+{:04X}</span>').format(ord(ch)) if ch in HIDDEN
                           else escape(ch) for ch in text)


TEMPLATES = Environment(loader=PackageLoader("program.entry", "templates"), autoescape=True, finalize=_shown,
                        undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


@dataclass
class RefView:
    """One ref a claim cites, in full, with every passing quote of the claim marked in it."""

    label: str
    pieces: list[tuple[str, bool]] = field(default_factory=list)  # runs of the ref's text, True where quoted
    spans: list[tuple[int, int]] = field(default_factory=list)
    bindings: list[tuple[CheckedBinding, str]] = field(default_factory=list)  # with what was not found, if any
    missing: str = ""  # why the ref itself cannot be shown


@dataclass
class ClaimView:
    number: int  # its place among the attempt's claims, from 1
    claim: Claim
    status: str
    judgement: ClaimJudgement | None
    overrides: list[Finding]
    labels: list[str]
    refs: list[RefView]
    # The executor wrote no text: the claim's text is code's quote of what it pointed at.
    quoted: bool = False
    # It stands from the attempt before, which code let it through in; this attempt did not write it.
    kept: bool = False


def _cited_text(binding: CheckedBinding, invocations: dict[int, ToolInvocation]) -> tuple[str | None, str]:
    """The text a binding cites, as the gatekeeper compares it: a ref, or a no-hit's message."""
    inv = invocations.get(binding.source_invocation_id)
    if inv is None:
        return None, f"tool call #{binding.source_invocation_id} is not among this session's tool calls"
    details = inv.retrieval_details
    if binding.raw_path:
        text = next((ref.text for ref in details.evidence_refs if ref.raw_path == binding.raw_path), None)
        return text, "" if text is not None else f"tool call #{inv.id} has no ref {binding.raw_path}"
    if details.evidence_status == "no_evidence":
        return details.message, ""
    return None, f"no ref is named, and tool call #{inv.id} was {details.evidence_status}"


def _marked(text: str, spans: list[tuple[int, int]]) -> list[tuple[str, bool]]:
    """The text in runs, quoted or not; overlapping quotes make one run."""
    pieces, cursor = [], 0
    for start, end in sorted(spans):
        start = max(start, cursor)
        if end <= start:
            continue
        pieces += [(text[cursor:start], False), (text[start:end], True)]
        cursor = end
    pieces.append((text[cursor:], False))
    return [piece for piece in pieces if piece[0]]


def _refs(bindings: list[CheckedBinding], invocations: dict[int, ToolInvocation]) -> list[RefView]:
    views: dict[tuple, RefView] = {}
    texts: dict[tuple, str] = {}
    for cb in bindings:
        key = (cb.source_invocation_id, cb.raw_path or None)
        text, missing = _cited_text(cb, invocations)
        label = (citation_label(cb.source_invocation_id, key[1]) if cb.source_invocation_id is not None
                 else f"{cb.tool_name}, no tool call named")
        view = views.setdefault(key, RefView(label=label, missing=missing))
        if text is None:
            view.bindings.append((cb, ""))
            continue
        # The spans index the ref's NFC form, which is what is shown. A quote the gatekeeper found but
        # refused (text addressed to the model, bidi controls) is marked too: its rule says why.
        texts[key] = canonical(text).source
        match = match_excerpt(cb.evidence_excerpt, text)
        view.spans += match.spans
        lost = cb.status == "pass" and not match.ok
        view.bindings.append((cb, f"this version's matcher does not find it here: {match.message}" if lost else ""))
    for key, view in views.items():
        if key in texts:
            view.pieces = _marked(texts[key], view.spans)
    return list(views.values())


def _claims(output: ExecutorOutput | None, gate: GatekeeperResult | None, drafts: list[ClaimDraft],
            judgements: dict[str, ClaimJudgement], overrides: list[Finding],
            invocations: dict[int, ToolInvocation], kept: list[str] = ()) -> list[ClaimView]:
    """The views of an attempt's claims: those that stand from the attempt before (`kept`, first in
    its output), then those it wrote, one for each of its `drafts`."""
    views = []
    checked = gate.checked_bindings if gate else []
    written = iter(drafts)
    for number, claim in enumerate(output.claims if output else []):
        judgement = judgements.get(claim.claim_id)
        draft = None if claim.claim_id in kept else next(written, None)
        labels = [b for b in draft.evidence_bindings if isinstance(b, str)] if draft else []
        views.append(ClaimView(
            number=number + 1,
            claim=claim,
            status=CLAIM_STATUS.get(judgement.verdict, "not judged") if judgement else "not judged",
            judgement=judgement,
            overrides=[o for o in overrides if o.claim_id == claim.claim_id],
            labels=labels,
            quoted=draft is not None and not draft.claim_text.strip(),
            kept=claim.claim_id in kept,
            refs=_refs([cb for cb in checked if cb.claim_id == claim.claim_id], invocations)))
    return views


def _run_findings(gate: GatekeeperResult | None) -> list[Finding]:
    """The gatekeeper's findings that no citation row shows: about the run, a claim as a whole, or a
    label that named nothing (older records kept an index for those)."""
    return [f for f in gate.errors if f.binding_index is None or f.rule == UNKNOWN_LABEL] if gate else []


def _kept(attempt: ExecutorAttempt | None) -> list[str]:
    return attempt.retry_context.kept if attempt is not None and attempt.retry_context else []


def render_session(record: DiagnosisSession, invocations: list[ToolInvocation]) -> str:
    """The audit page of one session, from its record and its tool calls (in the order they ran)."""
    by_id = {inv.id: inv for inv in invocations}
    evaluation = record.self_evaluation.verifier_evaluation if record.self_evaluation else None
    attempts = record.executor_attempts
    # The attempt the verdict rests on; a record from before attempts were compared used its last.
    used = next((a for a in attempts if a.used), attempts[-1] if attempts else None)
    gate = evaluation.gatekeeper_result if evaluation else (used.gatekeeper_result if used else None)
    judgements = {j.claim_id: j for j in evaluation.claim_judgements} if evaluation else {}
    overrides = evaluation.code_overrides if evaluation else []
    claims = _claims(record.executor_output or (used.executor_output if used else None), gate,
                     used.drafts if used else [], judgements, overrides, by_id, _kept(used))
    earlier = [(a, _claims(a.executor_output, a.gatekeeper_result, a.drafts, {}, [], by_id, _kept(a)),
                _run_findings(a.gatekeeper_result)) for a in attempts if a is not used]
    return TEMPLATES.get_template("session.html").render(
        record=record, evaluation=evaluation, gate=gate, gate_findings=_run_findings(gate), claims=claims,
        used=used, earlier=earlier, run_overrides=[o for o in overrides if o.claim_id is None],
        invocations=sorted(invocations, key=lambda inv: inv.id), call_text=call_text,
        ref_texts={label: c.excerpt for label, c in Menu(invocations).citations.items()},
        total_seconds=sum(u.seconds for u in record.usage.values()),
        traceback_rule=TRACEBACK, style=Markup(STYLE), policy=POLICY)


def render_problem(title: str, message: str) -> str:
    """A page that says why a session cannot be shown."""
    return TEMPLATES.get_template("problem.html").render(title=title, message=message, style=Markup(STYLE),
                                                         policy=POLICY)


router = APIRouter()


@router.get("/sessions/{session_id}", response_class=HTMLResponse)
def session_page(session_id: str, request: Request) -> HTMLResponse:
    store: AuditStore = request.app.state.store
    try:
        record = store.get_session(session_id)
        if record is None:
            return HTMLResponse(render_problem("Unknown session", f"No session {session_id!r} is recorded."),
                                status_code=404, headers=HEADERS)
        invocations = store.list_invocations(session_id)
    except UnreadableRecord as exc:
        # This one record cannot be read; the store, and every other page, can.
        return HTMLResponse(render_problem("The session cannot be read", str(exc)), status_code=422, headers=HEADERS)
    except AuditStoreError as exc:
        return HTMLResponse(render_problem("The session cannot be read", str(exc)), status_code=500, headers=HEADERS)
    return HTMLResponse(render_session(record, invocations), headers=HEADERS)

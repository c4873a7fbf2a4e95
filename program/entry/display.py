"""What the command line prints: the progress of a run's stages, a result with its evidence table,
and an audit record. Every value from outside goes through program.entry.terminal first."""

from __future__ import annotations

import json
import time

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from contracts.record import DiagnosisResult, DiagnosisSession, ExecutorAttempt
from program.entry.terminal import printable
from program.evidence.gatekeeper import UNKNOWN_LABEL
from program.store.audit import TRACEBACK
from tools.sources.limits import shortened

STAGE_LABELS = {
    "preflight": "checking the language model",
    "planner": "planning",
    "executor_tools": "gathering evidence",
    "executor": "citing evidence",
    "verifier": "verifying claims",
    "composer": "composing the answer",
}



class StageProgress:
    """What the diagnosis is doing and for how long: on a terminal a live line per stage with its
    running time, elsewhere one plain line per finished stage. Stage names come from the pipeline;
    a stage entered again right after itself (the verifier, once per claim) is one line."""

    def __init__(self, console: Console):
        self.console = console
        self.live = console.is_terminal
        self.progress = Progress(SpinnerColumn(finished_text="[green]✓[/]"), TextColumn("{task.description}"),
                                 TimeElapsedColumn(), console=console)
        self.stage = None
        self.task = None
        self.started = self.begun = 0.0

    def __enter__(self):
        self.begun = time.perf_counter()
        if self.live:
            self.progress.start()
        return self

    def __call__(self, stage: str) -> None:
        if stage == self.stage:
            return
        self._finish()
        self.stage, self.started = stage, time.perf_counter()
        label = STAGE_LABELS.get(stage, stage)
        if self.live:
            self.task = self.progress.add_task(label, total=1)

    def _finish(self) -> None:
        if self.stage is None:
            return
        if self.live:
            self.progress.update(self.task, completed=1)
        else:
            self.console.print(f"{STAGE_LABELS.get(self.stage, self.stage)}: {time.perf_counter() - self.started:.1f} s")
        self.stage = None

    def __exit__(self, exc_type, *exc) -> None:
        self._finish()
        if self.live:
            self.progress.stop()
        if exc_type is None:
            self.console.print(f"diagnosis took {time.perf_counter() - self.begun:.1f} s")


def plain(value) -> str:
    """Every value from outside as it is printed: never read as rich markup, whatever brackets it
    holds, and never a control a terminal obeys nor a password (program.entry.terminal)."""
    return escape(printable(str(value)))


def one_line(text: str, n: int = 90) -> str:
    """A display line: whitespace collapsed, printable, and shortened to `n` characters."""
    return plain(shortened(" ".join(str(text).split()), n))


def print_result(console: Console, result: DiagnosisResult) -> None:
    style = {"PASS": "bold green", "LOW_CONFID": "bold yellow", "REJECT": "bold red"}[result.verdict]
    console.print(f"\n[{style}]{result.verdict}[/]  session {plain(result.session_id)}  "
                  f"(composer: {plain(result.composer_status)})")
    console.print(plain(result.answer))
    table = Table(title="evidence", show_lines=False)
    for column in ("claim", "status", "citation", "gatekeeper"):
        table.add_column(column, overflow="fold")
    gate = result.gatekeeper_result
    checked = {(cb.claim_id, cb.binding_index): cb for cb in gate.checked_bindings} if gate else {}
    for item in result.claims:
        claim = item.claim
        # The LM's text of a claim that was not verified is no statement to show a user: `audit` has it.
        shown = one_line(claim.claim_text, 50) if item.verification_status == "verified" else \
            f"{plain(claim.claim_id)} ({plain(claim.claim_type)}): see audit"
        if not claim.evidence_bindings:
            table.add_row(shown, plain(item.verification_status), "(no bindings)", "")
        for i, b in enumerate(claim.evidence_bindings):
            cb = checked.get((claim.claim_id, i))
            gate = "pass" if cb and cb.status == "pass" else (f"{cb.rule}" if cb else "")
            table.add_row(shown if i == 0 else "", plain(item.verification_status) if i == 0 else "",
                          plain(f"{b.tool_name} #{b.source_invocation_id} {b.raw_path or '-'}"), plain(gate))
    console.print(table)
    for error in result.errors:
        console.print(f"[red]{plain(error.rule)}[/]: {one_line(error.message, 200)}")


def print_audit(console: Console, record: DiagnosisSession, invocations) -> None:
    console.print(f"[bold]session[/] {plain(record.session_id)}  status={plain(record.status)}  "
                  f"verdict={plain(record.verdict)}  "
                  f"lm={plain(record.lm_model)}")
    console.print(f"[bold]question[/] {plain(record.query)}")
    for inv in invocations:
        d = inv.retrieval_details
        console.print(f"  tool #{inv.id} {plain(inv.tool_name)}({one_line(json.dumps(inv.input, ensure_ascii=False), 80)}) "
                      f"-> {plain(d.evidence_status)}, {len(d.evidence_refs)} ref(s)"
                      + (f" from {plain(inv.source)}" if inv.source else ""))
        if d.evidence_status == "failed":
            console.print(f"    [red]failed[/]: {one_line(d.message, 200)}")
    for note in record.notes:
        if note.rule == TRACEBACK:
            # What the one-line error of a failed run points to: shown whole.
            console.print(f"  [cyan]note {note.rule}[/]:\n{plain(note.message)}")
        else:
            console.print(f"  [cyan]note {plain(note.rule)}[/]: {one_line(note.message, 200)}")
    for attempt in record.executor_attempts:
        _print_attempt(console, attempt)
    if record.self_evaluation:
        ev = record.self_evaluation.verifier_evaluation
        console.print(f"\n[bold]verifier[/] verdict={plain(ev.verdict)} groundedness={ev.groundedness_score} "
                      f"reason={one_line(ev.reason, 160)}")
        for j in ev.claim_judgements:
            console.print(f"  {plain(j.claim_id)}: {plain(j.verdict)} {one_line(j.reason, 140)}")
        for o in ev.code_overrides:
            console.print(f"  [magenta]override {plain(o.rule)}[/]: {plain(o.message)}")
    if record.composer_output:
        console.print(f"\n[bold]composer[/] {plain(record.composer_output.status)} "
                      f"{plain(record.composer_output.reasons)}")
        console.print(plain(record.answer))
    for error in record.errors:
        console.print(f"[red]{plain(error.rule)}[/]: {one_line(error.message, 200)}")
    usage = Table(title="usage")
    for column in ("stage", "lm calls", "prompt tokens", "completion tokens", "seconds"):
        usage.add_column(column)
    for stage, u in record.usage.items():
        usage.add_row(plain(stage), str(u.lm_calls), str(u.prompt_tokens), str(u.completion_tokens), f"{u.seconds:.1f}")
    console.print(usage)


def _print_attempt(console: Console, attempt: ExecutorAttempt) -> None:
    gate = attempt.gatekeeper_result
    console.print(f"\n[bold]executor attempt {attempt.attempt}[/]{'  (used)' if attempt.used else ''}  "
                  f"parse={plain(attempt.parse_status.status)}  "
                  f"gatekeeper={plain(gate.status)}/{plain(gate.severity)}  failed_rules={plain(gate.failed_rules)}")
    if attempt.retry_context:
        console.print(f"  retry_context: {plain(attempt.retry_context.failed_rules)}")
    for finding in attempt.blocked:
        console.print(f"  code refused {plain(finding.claim_id or '')}: {plain(finding.rule)}: {plain(finding.message)}")
    if attempt.parse_status.status != "valid":
        console.print(f"  parse detail: {one_line(attempt.parse_status.detail, 200)}")
    by_owner: dict[str, list] = {}
    for cb in gate.checked_bindings:
        by_owner.setdefault(cb.claim_id or f"action {cb.action_id}", []).append(cb)
    claims = attempt.executor_output.claims if attempt.executor_output else []
    for number, claim in enumerate(claims):
        console.print(f"  claim {plain(claim.claim_id)} ({plain(claim.claim_type)}): {plain(claim.claim_text)}")
        labels = [b for b in attempt.drafts[number].evidence_bindings
                  if isinstance(b, str)] if number < len(attempt.drafts) else []
        if labels:
            console.print(f"    pointed at: {plain(', '.join(labels))}")
        for cb in by_owner.pop(claim.claim_id, []):
            console.print(plain(f"    cited {cb.tool_name} #{cb.source_invocation_id} {cb.raw_path}: "
                                 f"{cb.evidence_excerpt!r}"))
            if cb.status == "pass":
                console.print(f"      gatekeeper found: {plain(repr(cb.matched_text))}")
                if cb.context and cb.context != cb.matched_text:
                    console.print(f"      in its clause (what the verifier judged): {plain(repr(cb.context))}")
            else:
                console.print(f"      [red]{plain(cb.severity)} {plain(cb.rule)}[/]: {plain(cb.message)}")
    for owner, cbs in by_owner.items():
        for cb in cbs:
            console.print(plain(f"  {owner} cited {cb.tool_name} #{cb.source_invocation_id} {cb.raw_path}: "
                                 f"{cb.status} {cb.rule or ''}"))
    for finding in gate.errors:
        # Records from before refused labels lost their index still carry one for them.
        if finding.binding_index is None or finding.rule == UNKNOWN_LABEL:
            console.print(f"  [red]{plain(finding.rule)}[/]: {plain(finding.message)}")
    for warning in gate.warnings:
        console.print(f"  [yellow]{plain(warning.rule)}[/]: {plain(warning.message)}")



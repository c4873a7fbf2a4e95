"""Command line: `python -m program ask "<question>"`, `investigate --alertmanager-url URL`, `serve`,
`audit <session_id> [--json | --html FILE]`, `sessions`.

Exit codes: 0 done; 1 the run failed (the LM cannot be used, or pipeline.internal_error), the audit
database cannot be used (missing, corrupted, foreign, full, read-only, no driver) or the session is
unknown, or the output's reader went away; 2 bad usage (a bad flag, setting or database URL, an
argument that is not UTF-8); 130 interrupted. Every error is one line on stderr: a failed run's
traceback is kept in its record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from program.store.audit import (
    INTERNAL_ERROR,
    MAX_ID,
    TRACEBACK,
    AuditStore,
    AuditStoreError,
    AuditURLError,
    storable,
)
from program.entry.terminal import printable, printable_json
from program.evidence.gatekeeper import UNKNOWN_LABEL
from signatures.contracts import DiagnosisResult, DiagnosisSession, ExecutorAttempt

STAGE_LABELS = {
    "preflight": "checking the language model",
    "planner": "planning",
    "executor_tools": "gathering evidence",
    "executor": "citing evidence",
    "verifier": "verifying claims",
    "composer": "composing the answer",
}


# Rules that mean the LM itself cannot be used: the run did not look at evidence, and the exit is 1.
UNUSABLE_LM = ("lm.unreachable", "lm.not_configured", "lm.engine_unsupported", "lm.model_integrity")


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


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        shown = text if len(text) <= 40 else text[:39] + "…"
        raise argparse.ArgumentTypeError(f"{shown!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    if value > MAX_ID:
        # What a database takes as a LIMIT; more than the sessions there are lists them all.
        raise argparse.ArgumentTypeError(f"must be at most {MAX_ID}")
    return value


def _port(text: str) -> int:
    value = _count(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is at most 65535, got {value}")
    return value


def _plain(value) -> str:
    """Every value from outside as it is printed: never read as rich markup, whatever brackets it
    holds, and never a control a terminal obeys nor a password (program.entry.terminal)."""
    return escape(printable(str(value)))


def _clip(text: str, n: int = 90) -> str:
    text = " ".join(str(text).split())
    return _plain(text if len(text) <= n else text[: n - 1] + "…")


def print_result(console: Console, result: DiagnosisResult) -> None:
    style = {"PASS": "bold green", "LOW_CONFID": "bold yellow", "REJECT": "bold red"}[result.verdict]
    console.print(f"\n[{style}]{result.verdict}[/]  session {_plain(result.session_id)}  "
                  f"(composer: {_plain(result.composer_status)})")
    console.print(_plain(result.answer))
    table = Table(title="evidence", show_lines=False)
    for column in ("claim", "status", "citation", "gatekeeper"):
        table.add_column(column, overflow="fold")
    gate = result.gatekeeper_result
    checked = {(cb.claim_id, cb.binding_index): cb for cb in gate.checked_bindings} if gate else {}
    for item in result.claims:
        claim = item.claim
        # The LM's text of a claim that was not verified is no statement to show a user: `audit` has it.
        shown = _clip(claim.claim_text, 50) if item.verification_status == "verified" else \
            f"{_plain(claim.claim_id)} ({_plain(claim.claim_type)}): see audit"
        if not claim.evidence_bindings:
            table.add_row(shown, _plain(item.verification_status), "(no bindings)", "")
        for i, b in enumerate(claim.evidence_bindings):
            cb = checked.get((claim.claim_id, i))
            gate = "pass" if cb and cb.status == "pass" else (f"{cb.rule}" if cb else "")
            table.add_row(shown if i == 0 else "", _plain(item.verification_status) if i == 0 else "",
                          _plain(f"{b.tool_name} #{b.source_invocation_id} {b.raw_path or '-'}"), _plain(gate))
    console.print(table)
    for error in result.errors:
        console.print(f"[red]{_plain(error.rule)}[/]: {_clip(error.message, 200)}")


def print_audit(console: Console, record: DiagnosisSession, invocations) -> None:
    console.print(f"[bold]session[/] {_plain(record.session_id)}  status={_plain(record.status)}  "
                  f"verdict={_plain(record.verdict)}  "
                  f"lm={_plain(record.lm_model)}")
    console.print(f"[bold]question[/] {_plain(record.query)}")
    for inv in invocations:
        d = inv.retrieval_details
        console.print(f"  tool #{inv.id} {_plain(inv.tool_name)}({_clip(json.dumps(inv.input, ensure_ascii=False), 80)}) "
                      f"-> {_plain(d.evidence_status)}, {len(d.evidence_refs)} ref(s)"
                      + (f" from {_plain(inv.source)}" if inv.source else ""))
        if d.evidence_status == "failed":
            console.print(f"    [red]failed[/]: {_clip(d.message, 200)}")
    for note in record.notes:
        if note.rule == TRACEBACK:
            # What the one-line error of a failed run points to: shown whole.
            console.print(f"  [cyan]note {note.rule}[/]:\n{_plain(note.message)}")
        else:
            console.print(f"  [cyan]note {_plain(note.rule)}[/]: {_clip(note.message, 200)}")
    for attempt in record.executor_attempts:
        _print_attempt(console, attempt)
    if record.self_evaluation:
        ev = record.self_evaluation.verifier_evaluation
        console.print(f"\n[bold]verifier[/] verdict={_plain(ev.verdict)} groundedness={ev.groundedness_score} "
                      f"reason={_clip(ev.reason, 160)}")
        for j in ev.claim_judgements:
            console.print(f"  {_plain(j.claim_id)}: {_plain(j.verdict)} {_clip(j.reason, 140)}")
        for o in ev.code_overrides:
            console.print(f"  [magenta]override {_plain(o.rule)}[/]: {_plain(o.message)}")
    if record.composer_output:
        console.print(f"\n[bold]composer[/] {_plain(record.composer_output.status)} "
                      f"{_plain(record.composer_output.reasons)}")
        console.print(_plain(record.answer))
    for error in record.errors:
        console.print(f"[red]{_plain(error.rule)}[/]: {_clip(error.message, 200)}")
    usage = Table(title="usage")
    for column in ("stage", "lm calls", "prompt tokens", "completion tokens", "seconds"):
        usage.add_column(column)
    for stage, u in record.usage.items():
        usage.add_row(_plain(stage), str(u.lm_calls), str(u.prompt_tokens), str(u.completion_tokens), f"{u.seconds:.1f}")
    console.print(usage)


def _print_attempt(console: Console, attempt: ExecutorAttempt) -> None:
    gate = attempt.gatekeeper_result
    console.print(f"\n[bold]executor attempt {attempt.attempt}[/]{'  (used)' if attempt.used else ''}  "
                  f"parse={_plain(attempt.parse_status.status)}  "
                  f"gatekeeper={_plain(gate.status)}/{_plain(gate.severity)}  failed_rules={_plain(gate.failed_rules)}")
    if attempt.retry_context:
        console.print(f"  retry_context: {_plain(attempt.retry_context.failed_rules)}")
    for finding in attempt.blocked:
        console.print(f"  code refused {_plain(finding.claim_id or '')}: {_plain(finding.rule)}: {_plain(finding.message)}")
    if attempt.parse_status.status != "valid":
        console.print(f"  parse detail: {_clip(attempt.parse_status.detail, 200)}")
    by_owner: dict[str, list] = {}
    for cb in gate.checked_bindings:
        by_owner.setdefault(cb.claim_id or f"action {cb.action_id}", []).append(cb)
    claims = attempt.executor_output.claims if attempt.executor_output else []
    for number, claim in enumerate(claims):
        console.print(f"  claim {_plain(claim.claim_id)} ({_plain(claim.claim_type)}): {_plain(claim.claim_text)}")
        labels = [b for b in attempt.drafts[number].evidence_bindings
                  if isinstance(b, str)] if number < len(attempt.drafts) else []
        if labels:
            console.print(f"    pointed at: {_plain(', '.join(labels))}")
        for cb in by_owner.pop(claim.claim_id, []):
            console.print(_plain(f"    cited {cb.tool_name} #{cb.source_invocation_id} {cb.raw_path}: "
                                 f"{cb.evidence_excerpt!r}"))
            if cb.status == "pass":
                console.print(f"      gatekeeper found: {_plain(repr(cb.matched_text))}")
                if cb.context and cb.context != cb.matched_text:
                    console.print(f"      in its clause (what the verifier judged): {_plain(repr(cb.context))}")
            else:
                console.print(f"      [red]{_plain(cb.severity)} {_plain(cb.rule)}[/]: {_plain(cb.message)}")
    for owner, cbs in by_owner.items():
        for cb in cbs:
            console.print(_plain(f"  {owner} cited {cb.tool_name} #{cb.source_invocation_id} {cb.raw_path}: "
                                 f"{cb.status} {cb.rule or ''}"))
    for finding in gate.errors:
        # Records from before refused labels lost their index still carry one for them.
        if finding.binding_index is None or finding.rule == UNKNOWN_LABEL:
            console.print(f"  [red]{_plain(finding.rule)}[/]: {_plain(finding.message)}")
    for warning in gate.warnings:
        console.print(f"  [yellow]{_plain(warning.rule)}[/]: {_plain(warning.message)}")


def _write_page(path: str, record: DiagnosisSession, invocations, errors: Console) -> int:
    from program.entry.page import render_session

    try:
        Path(path).write_text(render_session(record, invocations), encoding="utf-8")
    except OSError as exc:
        errors.print(_plain(f"error: cannot write the audit page to {path}: {exc.strerror or exc}"))
        return 1
    errors.print(_plain(f"wrote the audit page of {record.session_id} to {path}"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m program", description="Grounded incident diagnosis.")
    parser.add_argument("--db", help="audit database URL (default: DIAGNOSIS_DB or ~/.grounded-diagnosis/audit.db)")
    sub = parser.add_subparsers(dest="command", required=True)
    ask = sub.add_parser("ask", help="diagnose one question")
    ask.add_argument("question")
    ask.add_argument("--lm", help="model string (default: DIAGNOSIS_LM or the embedded model)")
    ask.add_argument("--json", action="store_true", help="print the DiagnosisResult as JSON")
    ask.add_argument("--no-compiled", action="store_true", help="do not load the newest compiled program")
    ask.add_argument("--language", choices=("zh", "en", "auto"),
                     help="language of the answer (default: DIAGNOSIS_LANGUAGE, else the question's)")
    audit = sub.add_parser("audit", help="show what was cited, what the gatekeeper found and why")
    audit.add_argument("session_id")
    shown = audit.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the stored audit record as JSON")
    shown.add_argument("--html", metavar="FILE",
                       help="write the audit page (what the server shows at /sessions/ID) to FILE")
    sessions = sub.add_parser("sessions", help="list recent sessions")
    sessions.add_argument("--limit", type=_count, default=20, help=f"how many sessions (1 to {MAX_ID})")
    _alert_commands(sub)
    args = parser.parse_args(argv)
    for name, value in vars(args).items():
        # Bytes that are not UTF-8 reach Python as lone surrogates: such an argument is not text.
        if isinstance(value, str) and storable(value)[1]:
            parser.error(f"argument {name}: not UTF-8 text")

    # Stored text is printed as it is: ":warning:" in a log line stays those characters.
    console = Console(stderr=False, emoji=False)
    errors = Console(stderr=True, soft_wrap=True, emoji=False)
    try:
        # Reading never creates a database: a missing one is an error, not an empty list.
        store = AuditStore(args.db, read_only=args.command in ("audit", "sessions"))
        return _run(args, store, console, errors)
    except AuditURLError as exc:
        errors.print(f"error: {_plain(exc)}")
        return 2
    except AuditStoreError as exc:
        errors.print(f"error: {_plain(exc)}")
        return 1
    except KeyboardInterrupt:
        errors.print("error: interrupted; a run that had started is recorded as interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): nothing is left to tell, and the exit must not write again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _alert_commands(sub) -> None:
    investigate = sub.add_parser("investigate", help="diagnose every firing alert of an Alertmanager")
    investigate.add_argument("--alertmanager-url", required=True, help="e.g. http://127.0.0.1:9093")
    investigate.add_argument("--alertname", help="only alerts of this name")
    investigate.add_argument("--service", help="only alerts of this service (DIAGNOSIS_PROMETHEUS_SERVICE_LABEL)")
    investigate.add_argument("--timeout", type=_count, default=10, help="seconds for Alertmanager's answer")
    serve = sub.add_parser("serve", help="the HTTP API: diagnoses, Alertmanager's webhook, the audit records")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8080, help="port to bind (default 8080)")
    for command in (investigate, serve):
        command.add_argument("--lm", help="model string (default: DIAGNOSIS_LM or the embedded model)")
        command.add_argument("--language", choices=("zh", "en", "auto"),
                             help="language of the alerts' questions and of the answers (default: "
                                  "DIAGNOSIS_LANGUAGE; auto: an alert's in English, a question's in its own)")
    investigate.add_argument("--no-compiled", action="store_true", help="do not load the newest compiled program")


def _run_failed(result: DiagnosisResult, errors: Console) -> bool:
    """Say why a run failed when the LM could not be used or code had a bug; False when it did not."""
    lm_problem = next((e for e in result.errors if e.rule in UNUSABLE_LM), None)
    if lm_problem:
        hint = ("" if lm_problem.rule in ("lm.engine_unsupported", "lm.model_integrity")
                else " Check DIAGNOSIS_LM / --lm, the provider's key and address.")
        errors.print(_plain(f"error: the language model cannot be used ({lm_problem.rule}): {lm_problem.message}. "
                            f"The run was recorded as failed ({result.session_id}).{hint}"))
        return True
    bug = next((e for e in result.errors if e.rule == INTERNAL_ERROR), None)
    if bug:
        errors.print(_plain(f"error: the diagnosis failed ({bug.rule}: {' '.join(bug.message.split())}); "
                            f"the run was recorded as failed with its traceback: "
                            f"python -m program audit {result.session_id}"))
        return True
    return False


def _investigate(args, store: AuditStore, console: Console, errors: Console) -> int:
    """One narrow diagnosis per firing alert, one verdict line each; exit 1 when an alert could not be
    diagnosed or a run failed."""
    from program.entry.alerts import (
        MAX_ALERTS,
        AlertError,
        Alertmanager,
        alert_language,
        alert_name,
        alert_service,
        queued_session,
        quoted,
    )
    from program.entry.api import diagnose
    from tools.sources.errors import SourceError

    try:
        language = alert_language(args.language)
    except ValueError as exc:  # DIAGNOSIS_LANGUAGE that cannot be used: bad usage
        errors.print(f"error: {_plain(exc)}")
        return 2
    try:
        alerts = Alertmanager(args.alertmanager_url, timeout=args.timeout).firing(args.alertname, args.service)
    except SourceError as exc:
        errors.print(f"error: {_plain(exc)}")
        return 1
    if len(alerts) > MAX_ALERTS:
        errors.print(f"error: {len(alerts)} alerts fire; at most {MAX_ALERTS} are investigated at once "
                     "(choose with --alertname or --service)")
        return 1
    if not alerts:
        console.print("no firing alert matches")
    failed = False
    for alert in alerts:
        try:
            record = queued_session(alert, f"investigate {args.alertmanager_url}", language, claimed=True)
        except AlertError as exc:
            errors.print(f"error: {_plain(exc)}")
            failed = True
            continue
        store.enqueue(record)
        result = diagnose(record.query, lm=args.lm, db=store, compiled=not args.no_compiled, language=language,
                          session_id=record.session_id)
        console.print(_plain(f"{result.verdict}  {quoted(alert_name(alert))} on {quoted(alert_service(alert))}  "
                             f"session {result.session_id}"), soft_wrap=True)
        if _run_failed(result, errors):
            return 1
    return 1 if failed else 0


def _serve(args, store: AuditStore, errors: Console) -> int:
    from program.entry.server import ServeSettings, serve
    from program.lm.engine import preflight, resolve_lm

    try:
        settings = ServeSettings.from_env(language=args.language, host=args.host)
    except ValueError as exc:  # a DIAGNOSIS_SERVE_* or DIAGNOSIS_LANGUAGE setting that cannot be used
        errors.print(f"error: {_plain(exc)}")
        return 2
    lm = resolve_lm(args.lm)
    problem = preflight(lm)
    if problem:
        errors.print(_plain(f"error: the language model cannot be used ({problem[0]}): {problem[1]}"))
        return 1
    if settings.token is None and args.host not in ("127.0.0.1", "::1", "localhost"):
        errors.print(f"warning: serving on {_plain(args.host)} without DIAGNOSIS_API_TOKEN: anyone who can reach "
                     "it can read every audit record and run diagnoses")
    serve(store, lm, settings, args.host, args.port)
    return 0


def _run(args, store: AuditStore, console: Console, errors: Console) -> int:

    if args.command == "ask":
        from program.entry.api import diagnose

        try:
            with StageProgress(errors) as progress:
                result = diagnose(args.question, lm=args.lm, db=store, compiled=not args.no_compiled,
                                  progress=progress, language=args.language)
        except ValueError as exc:
            errors.print(f"error: {_plain(exc)}")
            return 2
        if args.json:
            print(printable_json(result.model_dump_json(indent=2)))
        else:
            print_result(console, result)
        return 1 if _run_failed(result, errors) else 0

    if args.command == "investigate":
        return _investigate(args, store, console, errors)
    if args.command == "serve":
        return _serve(args, store, errors)

    if args.command == "audit":
        record = store.get_session(args.session_id)
        if record is None:
            errors.print(_plain(f"error: unknown session {args.session_id!r} in {store.shown_url}"))
            return 1
        if args.json:
            print(printable_json(record.model_dump_json(indent=2)))
        elif args.html:
            return _write_page(args.html, record, store.list_invocations(args.session_id), errors)
        else:
            print_audit(console, record, store.list_invocations(args.session_id))
        return 0

    table = Table(title=_plain(f"sessions in {store.shown_url}"))
    for column in ("session", "verdict", "status", "question"):
        table.add_column(column, overflow="fold")
    good, bad = store.list_sessions(limit=args.limit)
    for record in good:
        table.add_row(_plain(record.session_id), _plain(record.verdict or "-"), _plain(record.status),
                      _clip(record.query, 60))
    console.print(table)
    for unreadable in bad:
        errors.print(f"unreadable: {_plain(unreadable.session_id)}: {_plain(unreadable)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

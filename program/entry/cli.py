"""Command line (what it prints is program.entry.display): `python -m program ask "<question>"`, `investigate --alertmanager-url URL`, `serve`,
`audit <session_id> [--json | --html FILE]`, `sessions`.

Exit codes: 0 done; 1 the run failed (the LM cannot be used, or pipeline.internal_error), the audit
database cannot be used (missing, corrupted, foreign, full, read-only, no driver) or the session is
unknown, or the output's reader went away; 2 bad usage (a bad flag, setting or database URL, an
argument that is not UTF-8); 130 interrupted. Every error is one line on stderr: a failed run's
traceback is kept in its record.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from contracts.record import DiagnosisResult, DiagnosisSession
from program.entry.display import StageProgress, one_line, plain, print_audit, print_result
from program.entry.terminal import printable_json
from program.store.audit import INTERNAL_ERROR, AuditStore
from program.store.tables import MAX_ID
from program.store.errors import AuditStoreError, AuditURLError
from program.store.storable import storable
from tools.redaction import keep_secrets_of

# Rules that mean the LM itself cannot be used: the run did not look at evidence, and the exit is 1.
UNUSABLE_LM = ("lm.unreachable", "lm.not_configured", "lm.engine_unsupported", "lm.model_integrity")


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


def _write_page(path: str, record: DiagnosisSession, invocations, errors: Console) -> int:
    from program.entry.page import render_session

    try:
        Path(path).write_text(render_session(record, invocations), encoding="utf-8")
    except OSError as exc:
        errors.print(plain(f"error: cannot write the audit page to {path}: {exc.strerror or exc}"))
        return 1
    errors.print(plain(f"wrote the audit page of {record.session_id} to {path}"))
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
        if isinstance(value, str) and "://" in value:
            keep_secrets_of(value)

    # Stored text is printed as it is: ":warning:" in a log line stays those characters.
    console = Console(stderr=False, emoji=False)
    errors = Console(stderr=True, soft_wrap=True, emoji=False)
    try:
        # Reading never creates a database: a missing one is an error, not an empty list.
        store = AuditStore(args.db, read_only=args.command in ("audit", "sessions"))
        return _run(args, store, console, errors)
    except AuditURLError as exc:
        errors.print(f"error: {plain(exc)}")
        return 2
    except AuditStoreError as exc:
        errors.print(f"error: {plain(exc)}")
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
        errors.print(plain(f"error: the language model cannot be used ({lm_problem.rule}): {lm_problem.message}. "
                            f"The run was recorded as failed ({result.session_id}).{hint}"))
        return True
    bug = next((e for e in result.errors if e.rule == INTERNAL_ERROR), None)
    if bug:
        errors.print(plain(f"error: the diagnosis failed ({bug.rule}: {' '.join(bug.message.split())}); "
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
        errors.print(f"error: {plain(exc)}")
        return 2
    try:
        alerts = Alertmanager(args.alertmanager_url, timeout=args.timeout).firing(args.alertname, args.service)
    except SourceError as exc:
        errors.print(f"error: {plain(exc)}")
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
            errors.print(f"error: {plain(exc)}")
            failed = True
            continue
        store.enqueue(record)
        result = diagnose(record.query, lm=args.lm, db=store, compiled=not args.no_compiled, language=language,
                          session_id=record.session_id)
        console.print(plain(f"{result.verdict}  {quoted(alert_name(alert))} on {quoted(alert_service(alert))}  "
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
        errors.print(f"error: {plain(exc)}")
        return 2
    lm = resolve_lm(args.lm)
    problem = preflight(lm)
    if problem:
        errors.print(plain(f"error: the language model cannot be used ({problem[0]}): {problem[1]}"))
        return 1
    if settings.token is None and args.host not in ("127.0.0.1", "::1", "localhost"):
        errors.print(f"warning: serving on {plain(args.host)} without DIAGNOSIS_API_TOKEN: anyone who can reach "
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
            errors.print(f"error: {plain(exc)}")
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
            errors.print(plain(f"error: unknown session {args.session_id!r} in {store.shown_url}"))
            return 1
        if args.json:
            print(printable_json(record.model_dump_json(indent=2)))
        elif args.html:
            return _write_page(args.html, record, store.list_invocations(args.session_id), errors)
        else:
            print_audit(console, record, store.list_invocations(args.session_id))
        return 0

    table = Table(title=plain(f"sessions in {store.shown_url}"))
    for column in ("session", "verdict", "status", "question"):
        table.add_column(column, overflow="fold")
    good, bad = store.list_sessions(limit=args.limit)
    for record in good:
        table.add_row(plain(record.session_id), plain(record.verdict or "-"), plain(record.status),
                      one_line(record.query, 60))
    console.print(table)
    for unreadable in bad:
        errors.print(f"unreadable: {plain(unreadable.session_id)}: {plain(unreadable)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""The three diagnosis tools, each with its one declaration.

Each tool returns a JSON-ready dict and says which source answered it (`source`). A search that
finds nothing is a success with an empty list and a message echoing what was searched; it never
falls back to placeholder data. Bad arguments, and a source that cannot answer (a server down, a
missing directory), return ``success: False`` with an error that says what was wrong: a failure is
never a no-hit. What a source left out or cut (files it skipped, lines or fields past the caps of
tools/sources/limits.py) is named in the message, and a ref's text is cut at MAX_REF_CHARS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tools.declaration import Toolbox, ToolDeclaration
from tools.sources.active import active_sources
from tools.sources.errors import SourceError
from tools.sources.interfaces import LogQuery, UnreadableQuery
from tools.sources.limits import MAX_ITEM_CHARS, MAX_REF_CHARS, clip, places
from tools.sources.logs.levels import LOG_LEVELS, normal_level
from tools.sources.logs.records import service_name

MAX_LOG_LIMIT = 200
MAX_ALERTS = 50
MAX_TOP_K = 10


def _failure(kind: str, error: str, searched: dict[str, Any], source: str = "") -> dict[str, Any]:
    return {"success": False, "error": error, kind: [], "total": 0, "searched": searched, "source": source}


def _check_service(service: Any) -> str | None:
    if service is None:
        return None
    if not isinstance(service, str) or not service.strip():
        return "service must be a non-empty string"
    return None


def _known(known: Iterable[str], service: str, same: Callable[[str], str]) -> bool:
    return same(service) in {same(name) for name in known}


def _unknown_service(known: Iterable[str], service: str | None, source: str,
                     same: Callable[[str], str] = str) -> list[str]:
    """A search about a service its source does not know read nothing of it: its no-hit proves no absence.
    `same` is how the source compares service names (a log source compares them folded)."""
    if service is None or _known(known, service, same):
        return []
    return [f"the service {service!r} (the {source} source knows no such service)"]


def _unknown_service_note(known: Iterable[str], service: str | None, same: Callable[[str], str] = str) -> str:
    """A service nobody runs has no alerts or logs: that is a no-hit (the design's acceptance rule),
    and the message names the services that do exist."""
    known = sorted(known)
    if service is None or _known(known, service, same):
        return ""
    return f"; {service!r} is not a known service (known: {', '.join(known)})"


def query_metrics(service: str | None = None, alert_name: str | None = None, state: str | None = None) -> dict:
    """Alerts from the monitoring system, filtered by exact service, alert name and state."""
    searched = {"service": service, "alert_name": alert_name, "state": state}
    try:
        metrics = active_sources().metrics
    except SourceError as exc:
        return _failure("alerts", str(exc), searched)
    error = _check_service(service)
    if error is None and alert_name is not None and (not isinstance(alert_name, str) or not alert_name.strip()):
        error = "alert_name must be a non-empty string"
    if error is None and state is not None and state not in metrics.alert_states:
        error = f"state must be {' or '.join(repr(s) for s in metrics.alert_states)}, got {state!r}"
    if error:
        return _failure("alerts", error, searched, metrics.label)
    try:
        with metrics.call():
            matched = [
                a for a in metrics.alerts()
                if (service is None or a["service"] == service)
                and (alert_name is None or str(a["name"]).casefold() == alert_name.strip().casefold())
                and (state is None or a["state"] == state)
            ]
            # A busy server can have hundreds of active alerts; each returned one is a ref and a sample query.
            alerts = metrics.with_samples(matched[:MAX_ALERTS])
            unread: list[str] = []
            if alerts:
                message = f"{len(matched)} alert(s) found" + (f", the first {len(alerts)} returned"
                                                              if len(alerts) < len(matched) else "")
                cut = [f"#{i} {place}" for i, a in enumerate(alerts) for place in a.get("cut") or ()]
                cut += [f"#{i}" for i, a in enumerate(alerts) if len(_alert_line(a)) > MAX_REF_CHARS]
                if cut:
                    message += (f"; text longer than the source limits ({MAX_ITEM_CHARS} characters a field, "
                                f"{MAX_REF_CHARS} an alert) was cut where marked: {places(cut)}")
            else:
                # A no-hit is evidence of one search: it names what was searched, never the catalog.
                known = metrics.services()
                message = (
                    f"未找到匹配的告警 (no alerts matched service={service!r}, alert_name={alert_name!r}, state={state!r})"
                    f"{_unknown_service_note(known, service)}"
                )
                unread = _unknown_service(known, service, "metrics")
    except SourceError as exc:
        return _failure("alerts", str(exc), searched, metrics.label)
    return {"success": True, "alerts": alerts, "total": len(matched), "message": message, "searched": searched,
            "source": metrics.label, "unread": unread}


def query_logs(query: str, service: str | None = None, level: str | None = None, limit: int = 20, *,
               min_share: float = 1.0) -> dict:
    """Log lines matching every concept the query names (synonyms count as the same concept, and
    words match by form: tools/text/search.py). min_share, which only code sets, asks for a share of
    the concepts instead: the second look before an all-clear."""
    searched = {"query": query, "service": service, "level": level, "limit": limit}
    try:
        source = active_sources().logs
    except SourceError as exc:
        return _failure("logs", str(exc), searched)
    error = None
    if not isinstance(query, str):
        error = "query must be a string"
    elif not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LOG_LIMIT:
        error = f"limit must be an integer from 1 to {MAX_LOG_LIMIT}, got {limit!r}"
    else:
        error = _check_service(service)
    wanted_level = None
    if error is None and level is not None:
        wanted_level = normal_level(level)
        if wanted_level is None:
            error = f"level must be one of {', '.join(LOG_LEVELS)}, got {level!r}"
    if error:
        return _failure("logs", error, searched, source.label)
    try:
        hits = source.search(LogQuery(text=query, service=service, level=wanted_level, limit=limit,
                                      min_share=min_share))
    except (SourceError, UnreadableQuery) as exc:
        return _failure("logs", str(exc), searched, source.label)
    if hits.logs:
        message = f"{hits.total} matching log line(s), {len(hits.logs)} returned"
    else:
        message = (f"未找到匹配的日志 (no log lines matched query={query!r}, service={service!r}, level={level!r})"
                   f"{_unknown_service_note(hits.services, service, service_name)}")
    # Lines left unread or cut may hold what was asked for: the message says so.
    message += "".join(f"; {note}" for note in hits.notes)
    return {
        "success": True,
        "logs": [dict(r) for r in hits.logs],
        "total": hits.total,
        "message": message,
        "searched": searched,
        "source": source.label,
        "skipped_files": hits.skipped_files,
        "unread": [*hits.unread, *_unknown_service(hits.services, service, "log", service_name)],
    }


def lookup_knowledge(query: str, top_k: int = 3) -> dict:
    """Runbook sections ranked by BM25 over Chinese-aware tokens."""
    searched = {"query": query, "top_k": top_k}
    try:
        runbooks = active_sources().runbooks
    except SourceError as exc:
        return _failure("evidence_blocks", str(exc), searched)
    if not isinstance(query, str) or not query.strip():
        return _failure("evidence_blocks", "query must be a non-empty string", searched, runbooks.label)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
        return _failure("evidence_blocks", f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}",
                        searched, runbooks.label)
    try:
        hits = runbooks.search(query, top_k)
    except SourceError as exc:
        return _failure("evidence_blocks", str(exc), searched, runbooks.label)
    blocks = list(hits.blocks)
    message = (
        f"{len(blocks)} runbook section(s) found"
        if blocks
        else f"未找到相关知识 (no runbook section matched query={query!r})"
    )
    message += "".join(f"; {note}" for note in hits.notes)
    return {"success": True, "evidence_blocks": blocks, "total": len(blocks), "message": message, "searched": searched,
            "source": runbooks.label, "skipped_files": hits.skipped_files}


def alert_text(alert: Mapping[str, Any]) -> str:
    """An alert as one ref: its name and state, its fields as key=value, its description or
    annotations, and its samples; a field the source does not give is left out."""
    return clip(_alert_line(alert), MAX_REF_CHARS)


def _alert_line(alert: Mapping[str, Any]) -> str:
    fields = ", ".join(f"{key}={alert[key]}" for key in ("service", "current", "threshold", "duration", "active_since")
                       if alert.get(key) is not None)
    text = f"{alert.get('name')} {alert.get('state')}, {fields}"
    annotations = alert.get("annotations")
    if alert.get("description") is not None:
        text += f"; {alert['description']}"
    elif isinstance(annotations, Mapping) and annotations:
        text += "; " + "; ".join(f"{key}: {value}" for key, value in annotations.items())
    samples = " -> ".join(str(s) for s in alert.get("samples") or [])
    return f"{text}; samples: {samples}" if samples else text


def log_text(log: Mapping[str, Any]) -> str:
    """A log line as one ref: `[HH:MM][LEVEL][service] message`, as the design quotes them, then the
    line's other fields as key=value. A level the line's format does not give is `-`."""
    stamp = str(log.get("timestamp") or "")
    clock = stamp[11:16] if len(stamp) >= 16 and stamp[10] in "T " else stamp
    text = f"[{clock}][{log.get('level') or '-'}][{log.get('service')}] {log.get('message')}"
    fields = log.get("fields")
    if isinstance(fields, list) and fields:
        text += "; " + ", ".join(f"{pair[0]}={pair[1]}" for pair in fields if isinstance(pair, list) and len(pair) == 2)
    return clip(text, MAX_REF_CHARS)


def block_text(block: Mapping[str, Any]) -> str:
    return clip(f"{block.get('title')} ({block.get('source')}): {block.get('content')}", MAX_REF_CHARS)


# The prompt text below is what every LM stage is told about each tool (the planner's and the tool
# step's instructions); the line breaks keep the prompts the embedded model was measured on.
QUERY_METRICS = ToolDeclaration(
    function=query_metrics,
    items="alerts",
    evidence="direct",
    render=alert_text,
    guide="returns alerts (HighCPUUsage, HighMemoryUsage,\nSlowResponse, ...): any alert name is queried with "
          "query_metrics.",
    lm_arguments=("service", "alert_name", "state"),
    catalog_values={"service": "services", "alert_name": "alert_names", "state": "alert_states"},
    arg_desc={"service": "exact service name", "alert_name": "exact alert name", "state": "alert state"},
    service_field="service",
    name_field="name",
)
QUERY_LOGS = ToolDeclaration(
    function=query_logs,
    items="logs",
    evidence="direct",
    render=log_text,
    guide="returns log lines matching\nevery concept in a short keyword query: use it for log events such as errors, "
          "slow requests, GC, OOM\nor HikariCP connection pool exhaustion.",
    lm_arguments=("query", "service", "level"),
    catalog_values={"service": "services", "level": "log_levels"},
    second_look="query",
    arg_desc={"query": "a short keyword query", "service": "exact service name", "level": "log level",
              "limit": "most lines returned"},
)
LOOKUP_KNOWLEDGE = ToolDeclaration(
    function=lookup_knowledge,
    items="evidence_blocks",
    evidence="indirect",
    render=block_text,
    guide="returns runbook sections, which say\nwhat to check but are never evidence of what is happening now.",
    lm_arguments=("query",),
    arg_desc={"query": "what to look up", "top_k": "most sections returned"},
)

TOOLBOX = Toolbox([QUERY_METRICS, QUERY_LOGS, LOOKUP_KNOWLEDGE])

"""The three diagnosis tools over the fixture world.

Each returns a JSON-ready dict. A search that finds nothing is a success with an empty list and a
message echoing what was searched; it never falls back to placeholder data. Bad arguments return
``success: False`` with an error that says what was wrong.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from typing import Any

from tools.world import ALERT_STATES, LOG_LEVELS, World, get_world

MAX_LOG_LIMIT = 200
MAX_TOP_K = 10
LEVEL_ALIASES = {"WARNING": "WARN", "ERR": "ERROR", "FATAL": "ERROR"}
# Words that describe the search rather than its target ("find the logs of ...").
QUERY_STOPWORDS = frozenset(
    "log logs logging alert alerts the a an of for in on and or is are any check find search show "
    "日志 告警 查询 检索 是否 存在 有没有 相关 记录".split()
)


def _fold(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _failure(kind: str, error: str, searched: dict[str, Any]) -> dict[str, Any]:
    return {"success": False, "error": error, kind: [], "total": 0, "searched": searched}


def _check_service(world: World, service: Any) -> str | None:
    if service is None:
        return None
    if not isinstance(service, str) or not service.strip():
        return "service must be a non-empty string"
    return None


def _unknown_service_note(world: World, service: str | None) -> str:
    """A service nobody runs has no alerts or logs: that is a no-hit (the design's acceptance rule),
    and the message names the services that do exist."""
    if service is None or service in world.service_names:
        return ""
    return f"; {service!r} is not a known service (known: {', '.join(sorted(world.service_names))})"


def query_metrics(service: str | None = None, alert_name: str | None = None, state: str | None = None) -> dict:
    """Alerts from the monitoring system, filtered by exact service, alert name and state."""
    world = get_world()
    searched = {"service": service, "alert_name": alert_name, "state": state}
    error = _check_service(world, service)
    if error is None and alert_name is not None and (not isinstance(alert_name, str) or not alert_name.strip()):
        error = "alert_name must be a non-empty string"
    if error is None and state is not None and state not in ALERT_STATES:
        error = f"state must be 'firing' or 'resolved', got {state!r}"
    if error:
        return _failure("alerts", error, searched)
    alerts = [
        dict(a)
        for a in world.alerts
        if (service is None or a["service"] == service)
        and (alert_name is None or a["name"].casefold() == alert_name.strip().casefold())
        and (state is None or a["state"] == state)
    ]
    if alerts:
        message = f"{len(alerts)} alert(s) found"
    else:
        known = sorted({a["name"] for a in world.alerts})
        message = (
            f"未找到匹配的告警 (no alerts matched service={service!r}, alert_name={alert_name!r}, state={state!r})"
            f"{_unknown_service_note(world, service)}; known alert names: {', '.join(known)}"
        )
    return {"success": True, "alerts": alerts, "total": len(alerts), "message": message, "searched": searched}


def _query_terms(world: World, query: str) -> tuple[list[tuple[str, ...]], list[str]]:
    """Split a query into required term groups (synonyms, service names) and free words."""
    remaining = _fold(query)
    groups: list[tuple[str, ...]] = []
    named = [(term, terms) for terms in world.synonyms.values() for term in terms]
    named += [(name.casefold(), (name.casefold(),)) for name in world.service_names]
    for term, terms in sorted(named, key=lambda pair: -len(pair[0])):
        if term in remaining:
            if terms not in groups:
                groups.append(terms)
            remaining = remaining.replace(term, " ")
    words = [w for w in re.split(r"[\s,;，；、。]+", remaining) if len(w) >= 2 and w not in QUERY_STOPWORDS]
    return groups, words


def query_logs(query: str, service: str | None = None, level: str | None = None, limit: int = 20) -> dict:
    """Log lines matching every concept the query names (synonyms count as the same concept)."""
    world = get_world()
    searched = {"query": query, "service": service, "level": level, "limit": limit}
    error = None
    if not isinstance(query, str):
        error = "query must be a string"
    elif not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LOG_LIMIT:
        error = f"limit must be an integer from 1 to {MAX_LOG_LIMIT}, got {limit!r}"
    else:
        error = _check_service(world, service)
    wanted_level = None
    if error is None and level is not None:
        wanted_level = LEVEL_ALIASES.get(str(level).upper(), str(level).upper())
        if wanted_level not in LOG_LEVELS:
            error = f"level must be one of {', '.join(LOG_LEVELS)}, got {level!r}"
    groups, words = _query_terms(world, query) if error is None else ([], [])
    if error is None and not groups and not words and service is None and wanted_level is None:
        error = f"query {query!r} names nothing to search for; give a keyword, a service or a level"
    if error:
        return _failure("logs", error, searched)

    scored = []
    for record in world.logs:
        if service is not None and record["service"] != service:
            continue
        if wanted_level is not None and record["level"] != wanted_level:
            continue
        text = _fold(f"{record['level']} {record['service']} {record['message']}")
        if not all(any(term in text for term in group) for group in groups):
            continue
        word_hits = sum(w in text for w in words)
        if not groups and words and word_hits < len(words):
            continue
        scored.append((-word_hits, record["timestamp"], record))
    scored.sort(key=lambda item: (item[0], item[1]))
    kept = sorted((item[2] for item in scored[:limit]), key=lambda r: r["timestamp"])
    if kept:
        message = f"{len(scored)} matching log line(s), {len(kept)} returned"
    else:
        message = (f"未找到匹配的日志 (no log lines matched query={query!r}, service={service!r}, level={level!r})"
                   f"{_unknown_service_note(world, service)}")
    return {
        "success": True,
        "logs": [dict(r) for r in kept],
        "total": len(scored),
        "message": message,
        "searched": searched,
    }


_jieba_lock = threading.Lock()


def tokenize(text: str) -> list[str]:
    """Chinese-aware tokens: jieba for CJK runs, whole words for Latin text."""
    import jieba

    with _jieba_lock:
        jieba.setLogLevel(60)
        pieces = jieba.lcut_for_search(_fold(text))
    return [p for p in (x.strip() for x in pieces) if p and any(ch.isalnum() for ch in p)]


class _KnowledgeIndex:
    def __init__(self, world: World):
        import bm25s

        self.blocks = [
            {
                "title": f"{rb.title} / {heading}",
                "source": f"runbooks/{rb.source}#{re.sub(r'[^a-z0-9]+', '-', heading.casefold()).strip('-')}",
                "content": body,
            }
            for rb in world.runbooks
            for heading, body in rb.sections
        ]
        self.retriever = bm25s.BM25()
        self.retriever.index([tokenize(f"{b['title']} {b['content']}") for b in self.blocks], show_progress=False)


_index_lock = threading.Lock()
_indexes: dict[int, _KnowledgeIndex] = {}


def _knowledge_index(world: World) -> _KnowledgeIndex:
    with _index_lock:
        if id(world) not in _indexes:
            _indexes[id(world)] = _KnowledgeIndex(world)
        return _indexes[id(world)]


def lookup_knowledge(query: str, top_k: int = 3) -> dict:
    """Runbook sections ranked by BM25 over Chinese-aware tokens."""
    searched = {"query": query, "top_k": top_k}
    if not isinstance(query, str) or not query.strip():
        return _failure("evidence_blocks", "query must be a non-empty string", searched)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
        return _failure("evidence_blocks", f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}", searched)
    index = _knowledge_index(get_world())
    tokens = tokenize(query)
    scores = index.retriever.get_scores(tokens) if tokens else []
    ranked = sorted(
        ((float(s), i) for i, s in enumerate(scores) if float(s) > 0 and not math.isnan(float(s))),
        key=lambda pair: -pair[0],
    )[:top_k]
    blocks = [dict(index.blocks[i], score=round(score, 3)) for score, i in ranked]
    message = (
        f"{len(blocks)} runbook section(s) found"
        if blocks
        else f"未找到相关知识 (no runbook section matched query={query!r})"
    )
    return {"success": True, "evidence_blocks": blocks, "total": len(blocks), "message": message, "searched": searched}


TOOLS = {"query_metrics": query_metrics, "query_logs": query_logs, "lookup_knowledge": lookup_knowledge}

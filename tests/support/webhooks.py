"""Alertmanager's webhook as tests send it: notifications (payload version 4) of firing alerts, and
many posts at once on loopback, each from a thread of its own, all released together."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx


def firing(alertname: str = "HighMemoryUsage", service: str = "order-service", minute: int = 0, **labels) -> dict:
    """One firing alert of a notification; `minute` sets when it started, which makes it another firing."""
    return {"status": "firing", "labels": {"alertname": alertname, "service": service, **labels},
            "startsAt": f"2026-12-01T10:{minute:02d}:00Z"}


def webhook(*alerts: dict, status: str = "firing") -> dict:
    return {"version": "4", "status": status, "receiver": "diagnosis", "groupKey": "{}:{}", "alerts": list(alerts)}


@dataclass(frozen=True)
class Posted:
    status: int
    seconds: float
    body: dict
    retry_after: str | None


def post_all(url: str, bodies: list[dict], headers: dict | None = None, timeout: float = 10.0) -> list[Posted]:
    """The answer to each body, in order. A request that times out raises: a full queue must answer."""
    start = threading.Barrier(len(bodies))
    with httpx.Client(timeout=timeout, headers=headers,
                      limits=httpx.Limits(max_connections=len(bodies))) as client:

        def post(body: dict) -> Posted:
            start.wait()
            began = time.perf_counter()
            answer = client.post(url, json=body)
            return Posted(answer.status_code, time.perf_counter() - began, answer.json(),
                          answer.headers.get("Retry-After"))

        with ThreadPoolExecutor(len(bodies)) as pool:
            return list(pool.map(post, bodies))

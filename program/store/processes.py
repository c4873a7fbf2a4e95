"""Which process a run belongs to, and whether that process is gone (a run to mark interrupted)."""

from __future__ import annotations

import os
import socket


def this_process() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def process_dead(process: str) -> bool:
    """True when `process` ("host:pid") ran on this host and is gone; unknown hosts are left alone."""
    host, _, pid = process.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False

"""The shared machine, for benchmarks that time a model: the model lock, taken per measurement, and
a wait for the CPUs to be quiet before one starts. Other engineers' work on the same two cores
would otherwise land in one measurement and not in the one it is compared with."""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = "/tmp/gd-model.lock"


@contextmanager
def model_lock(path: str = LOCK) -> Iterator[None]:
    """The lock every model run on this machine holds (`flock /tmp/gd-model.lock` takes the same)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cpu_busy(seconds: float = 2.0) -> float:
    """The share of all CPUs' time that was not idle over the next `seconds` (from /proc/stat)."""

    def sample() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    total, idle = sample()
    time.sleep(seconds)
    total2, idle2 = sample()
    return 1.0 - (idle2 - idle) / max(total2 - total, 1)


def wait_quiet(busy: float, timeout: float) -> float:
    """Wait, without the lock, until the CPUs are at most `busy` busy over two seconds, or `timeout`
    seconds have passed; the share last seen."""
    deadline = time.monotonic() + timeout
    seen = cpu_busy()
    while seen > busy and time.monotonic() < deadline:
        time.sleep(5)
        seen = cpu_busy()
    return round(seen, 2)

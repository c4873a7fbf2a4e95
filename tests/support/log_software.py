"""What the real-log writers share: finding a Debian program (or saying which package to install),
waiting on a daemon, and rotating its files with Debian's logrotate the way Debian's own logrotate.d
entries for nginx and rsyslog do."""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


class MissingSoftware(RuntimeError):
    """A program the writers run is not on this machine; the message names the Debian package."""


def require(program: str, package: str, also: tuple[str, ...] = ()) -> str:
    """The path of `program` (on PATH or in one of `also`), or MissingSoftware naming `package`."""
    found = shutil.which(program) or next((p for p in also if os.access(p, os.X_OK)), None)
    if found is None:
        raise MissingSoftware(f"{program} is not on this machine: install Debian's {package}")
    return found


def first_line(command: list[str]) -> str:
    """The first line a program prints about itself (`nginx -v` prints to stderr)."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    return (done.stdout.strip() or done.stderr.strip()).splitlines()[0]


def wait_until(ready: Callable[[], bool], what: str, timeout: float = 20.0,
               alive: Callable[[], bool] = lambda: True, log: Path | None = None) -> None:
    """Poll `ready` until it holds, or fail saying `what` never happened (with the daemon's log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        if ready():
            return
        time.sleep(0.05)
    if ready():
        return
    tail = log.read_text(encoding="utf-8", errors="replace")[-2000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} never happened" + (f"; the log:\n{tail}" if tail else ""))


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid`, read from each one's /proc status (the kernel's
    own `children` file is missing where CONFIG_PROC_CHILDREN is off)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(pid) and not fields.get("State", "").startswith("Z"):
            found.append(int(status.parent.name))
    return sorted(found)


@contextmanager
def refusing_port() -> Iterator[int]:
    """A loopback port that refuses every connection for as long as the block runs: bound, never
    listening, so no other program can take it meanwhile."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def next_second() -> None:
    """Sleep into the next wall-clock second: nginx and RFC 3164 stamp whole seconds, and each rotated
    file must hold lines older than the next one's."""
    time.sleep(1.02 - time.time() % 1)


def logrotate_now(files: list[Path], postrotate: str, work: Path) -> None:
    """Rotate `files` now with Debian's logrotate, as /etc/logrotate.d/nginx and .../rsyslog do
    (compress, delaycompress, sharedscripts; the daemon reopens its files in postrotate): file -> file.1,
    file.1 -> file.2.gz. Empty files are rotated too (no `notifempty`), so that the n-th rotated file
    of every log holds the same span of time."""
    binary = require("logrotate", "logrotate", ("/usr/sbin/logrotate",))
    config = work / f"logrotate-{files[0].parent.name}.conf"
    config.write_text(
        " ".join(str(f) for f in files)
        + " {\n  rotate 14\n  missingok\n  compress\n  delaycompress\n  sharedscripts\n"
          f"  postrotate\n    {postrotate}\n  endscript\n}}\n", encoding="utf-8")
    config.chmod(0o644)
    done = subprocess.run([binary, "--force", "--state", str(work / "logrotate.state"), str(config)],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"logrotate failed: {done.stderr.strip()}")


@dataclass
class Written:
    """What one writer left in the directory: per file (relative to the root), what the manifest says."""

    files: dict[str, dict] = field(default_factory=dict)

    def add(self, path: str, *, service: str | None, software: str, format: str, facts: dict,
            doc: str | None = None, **extra) -> None:
        """`doc`: for a file written here because its daemon cannot run, the documentation it follows."""
        self.files[path] = {"service": service, "software": software, "format": format,
                            "origin": "documentation" if doc else "software",
                            **({"doc": doc} if doc else {}), **extra, "facts": facts}


def lines_with(path: Path, text: str) -> list[str]:
    """The lines of a log file (gzip or not) that contain `text`, exactly as written."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as handle:
        return [line.rstrip("\n") for line in handle if text in line]

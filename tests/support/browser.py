"""Debian's chromium, headless, for the audit page's browser tests and the README's screenshot."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

# Every run is bounded: a browser that hangs fails its test instead of holding the suite.
CHROMIUM_SECONDS = 90


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def run_chromium(*arguments: str, timeout: float = CHROMIUM_SECONDS) -> subprocess.CompletedProcess:
    """Run headless chromium with a profile of its own (runs in parallel never share one) and
    its console logged to stderr. Its sandbox cannot start as root, so root runs without it."""
    binary = chromium()
    if binary is None:
        raise FileNotFoundError("no chromium on PATH (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        flags = ["--headless", "--disable-gpu", "--no-first-run", "--hide-scrollbars", "--enable-logging=stderr",
                 f"--user-data-dir={profile}"]
        if os.geteuid() == 0:
            flags.append("--no-sandbox")
        return subprocess.run([binary, *flags, *arguments], capture_output=True, text=True, timeout=timeout,
                              check=False)

"""Debian's headless chromium on a local page: the screenshot of the optimizer's report that a run
keeps beside it (`report.png`), and the DOM a test reads back."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path


def screenshot(page: Path, png: Path, timeout: float = 60) -> str | None:
    """Render `page` to `png` at 1400x2000: None when it worked, else a one-line reason. Never raises,
    so a run never fails for its picture."""
    if not page.is_file():
        return f"no page at {page}"
    try:
        png.unlink(missing_ok=True)  # so that a picture of an earlier run never passes for this one's
    except OSError as error:
        return f"cannot replace {png}: {error.strerror}"
    reason, _ = run_chromium(page, [f"--screenshot={png.resolve()}", "--window-size=1400,2000",
                                    "--hide-scrollbars"], timeout)
    if reason is None and not (png.is_file() and png.stat().st_size > 0):
        reason = "chromium wrote no screenshot"
    return reason


def run_chromium(page: Path, flags: list[str], timeout: float) -> tuple[str | None, str]:
    """Headless chromium on a local page: (None, stdout) or (a one-line reason, ""). Its own profile
    directory, so that it never meets another chromium's lock; its whole process group is killed at
    the timeout, so no renderer outlives it."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        return "chromium is not installed (apt-get install chromium)", ""
    with tempfile.TemporaryDirectory(prefix="report-chromium-", ignore_cleanup_errors=True) as profile:
        command = [binary, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                   *flags, page.resolve().as_uri()]
        try:
            child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as error:
            return f"chromium could not start: {error}", ""
        with child:  # on the way out: its pipes closed, whatever still holds them, and it reaped
            try:
                stdout, stderr = child.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                return f"chromium did not finish within {timeout:g} s", ""
    if child.returncode != 0:
        last = (stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1]
        return f"chromium exited with {child.returncode}: {last[:200]}", ""
    return None, stdout.decode("utf-8", "replace")

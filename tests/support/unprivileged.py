"""Permission errors from the real kernel in a suite that may run as root, who may read anything.

`unprivileged()` runs its body with the effective user `nobody` when the process is root (the real
user stays root, so the body's end gives root back), and as the current user otherwise. Files the
body reads must sit in a directory `nobody` can walk: `open_directory()` makes one.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def unprivileged() -> Iterator[None]:
    if os.geteuid() != 0:
        yield
        return
    nobody = pwd.getpwnam("nobody")
    os.setegid(nobody.pw_gid)
    os.seteuid(nobody.pw_uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@contextmanager
def open_directory() -> Iterator[Path]:
    """A new directory in the system's temp directory that every user may walk and read."""
    root = Path(tempfile.mkdtemp(prefix="gd-unprivileged-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        for path in (root, *root.rglob("*")):
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() else 0o644)
        shutil.rmtree(root)

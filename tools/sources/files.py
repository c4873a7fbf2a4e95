"""The files of a source directory that may be read, and reading one within a byte budget.

Only regular files that resolve inside the directory are read. A fifo named `*.log` would block
the first `open` forever, a device could answer without end, and a link out of the directory
would read what the user never pointed the program at; each is skipped and named instead. The
type is checked with `stat` before anything is opened, and again on the open descriptor, which is
opened non-blocking in case the path changed in between.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

KINDS = {stat.S_IFIFO: "a fifo", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


@dataclass(frozen=True)
class Listing:
    # (name under the root, real path, what `stat` said of it) per file, and "name (why)" for each
    # path that was not taken.
    files: tuple[tuple[str, Path, os.stat_result], ...]
    skipped: tuple[str, ...]
    # The names under the root of the paths skipped, in the same order.
    skipped_names: tuple[str, ...] = ()
    # Links to a file listed under its own name (Kubernetes links each container's log so): "name (the
    # same file as other)". Read once, under the other name.
    aliases: tuple[str, ...] = ()


def _kind(mode: int) -> str:
    return KINDS.get(stat.S_IFMT(mode), "not a regular file")


def regular_files(root: Path, patterns: tuple[str, ...], *, recursive: bool, walked: bool = False) -> Listing:
    """The regular files under root that match a pattern, in name order, and the other matches skipped.
    `walked`: the patterns match every path, so a directory is one the walk goes through, not a skip,
    and a second name of a listed file is an alias, not a skip."""
    inside = root.resolve()
    # Links after files, so that a file reached both ways is named by its own path.
    found = sorted({p for pattern in patterns for p in (root.rglob(pattern) if recursive else root.glob(pattern))},
                   key=lambda p: (p.is_symlink(), p))
    files, skipped, names, aliases, seen = [], [], [], [], {}
    for path in found:
        name = str(path.relative_to(root))
        try:
            real = path.resolve(strict=True)
            status = real.stat()
        except (OSError, RuntimeError) as exc:
            why = f"cannot be resolved: {getattr(exc, 'strerror', None) or exc}"
        else:
            if not real.is_relative_to(inside):
                why = f"a link to {real}, outside {root}"
            elif walked and stat.S_ISDIR(status.st_mode) and not path.is_symlink():
                continue
            elif not stat.S_ISREG(status.st_mode):
                why = f"{_kind(status.st_mode)}, not a regular file"
            elif real in seen and walked:
                aliases.append(f"{name} (the same file as {seen[real]})")
                continue
            elif real in seen:
                why = f"the same file as {seen[real]}"
            else:
                seen[real] = name
                files.append((name, real, status))
                continue
        skipped.append(f"{name} ({why})")
        names.append(name)
    return Listing(files=tuple(files), skipped=tuple(skipped), skipped_names=tuple(names), aliases=tuple(aliases))


def read_bytes(path: Path, limit: int, *, tail: bool = False) -> tuple[bytes, int]:
    """At most `limit` bytes of a regular file (its last ones with tail), and the offset they start at.

    Raises OSError when the path is no longer a regular file."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise OSError(f"{_kind(status.st_mode)}, not a regular file")
        start = max(0, status.st_size - limit) if tail else 0
        handle.seek(start)
        return handle.read(limit), start

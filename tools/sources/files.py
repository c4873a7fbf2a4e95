"""The files of a source directory that may be read, and reading one within a byte budget.

Only regular files that resolve inside the directory are read. A fifo named `*.log` would block
the first `open` forever, a device could answer without end, and a link out of the directory
would read what the user never pointed the program at; each is skipped and named instead. The
type is checked with `stat` before anything is opened, and again on the open descriptor, which is
opened non-blocking in case the path changed in between.

A directory is walked without recursion (a tree may be deeper than Python's stack), never through
a link (a link to a directory inside is a second name for what the walk reaches anyway, and may
loop), and a directory the walk cannot list is named like a file it cannot read: what it holds
was not read.

A file is opened once and checked against what the listing said of it: a file rotated, replaced,
truncated or removed since (`FileChanged`) is not the one the listing named, and whoever reads it
lists again rather than take the new file's lines for the old one's.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

KINDS = {stat.S_IFIFO: "a fifo", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}
# An open that finds no file, or a directory where one was: the path changed since it was listed.
GONE = (errno.ENOENT, errno.ENOTDIR)


class FileChanged(OSError):
    """The file at a listed path is not the file the listing saw: rotated, replaced, truncated or gone."""


@dataclass(frozen=True)
class Listing:
    # (name under the root, real path, what `stat` said of it) per file, and "name (why)" for each
    # path that was not taken.
    files: tuple[tuple[str, Path, os.stat_result], ...]
    skipped: tuple[str, ...]
    # The names under the root of the paths skipped, in the same order.
    skipped_names: tuple[str, ...] = ()
    # Second names of what the walk reaches under its own: links to a listed file (Kubernetes links
    # each container's log so) or to a directory inside the root, "name (the same file as other)".
    aliases: tuple[str, ...] = ()


def _kind(mode: int) -> str:
    return KINDS.get(stat.S_IFMT(mode), "not a regular file")


def walk(root: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Every path under root that is not a directory the walk goes into (files, links, fifos, ...),
    and each directory that could not be listed with why."""
    found: list[Path] = []
    failed: list[tuple[Path, str]] = []
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    path = directory / entry.name
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(path)
                    else:
                        found.append(path)
        except OSError as exc:
            failed.append((directory, exc.strerror or str(exc)))
    return found, failed


def _candidates(root: Path, patterns: tuple[str, ...], recursive: bool) -> tuple[list[Path], list[tuple[Path, str]]]:
    if not recursive:
        return sorted({p for pattern in patterns for p in root.glob(pattern)}), []
    found, failed = walk(root)
    return [p for p in found if any(p.match(pattern) for pattern in patterns)], failed


def regular_files(root: Path, patterns: tuple[str, ...], *, recursive: bool, walked: bool = False) -> Listing:
    """The regular files under root that match a pattern, in name order, and the other matches skipped.
    `walked`: the patterns match every path, so a second name of a listed file, or a link to a
    directory inside the root, is an alias, not a skip."""
    inside = root.resolve()
    paths, failed = _candidates(root, patterns, recursive)
    # Links after files, so that a file reached both ways is named by its own path.
    found = sorted(paths, key=lambda p: (p.is_symlink(), p))
    files, skipped, names, aliases, seen = [], [], [], [], {}
    for directory, why in failed:
        name = str(directory.relative_to(root)) if directory != root else "."
        skipped.append(f"{name} (cannot be listed: {why})")
        names.append(name)
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
            elif walked and stat.S_ISDIR(status.st_mode):
                aliases.append(f"{name} (the same directory as {real.relative_to(inside)})")
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


def same_file(listed: os.stat_result, now: os.stat_result) -> str | None:
    """Why the file open now is not the one listed, or None when it is (it may have grown since)."""
    if (now.st_dev, now.st_ino) != (listed.st_dev, listed.st_ino):
        return "another file is at its path now (rotated or replaced)"
    if now.st_size < listed.st_size:
        return f"it was truncated from {listed.st_size} to {now.st_size} bytes"
    return None


def _outside(descriptor: int, inside: Path) -> str | None:
    """Where an open file really is, when that is outside `inside` (a directory on its path was
    swapped for a link after the listing looked): the kernel says, where /proc does."""
    try:
        real = Path(os.readlink(f"/proc/self/fd/{descriptor}"))
    except OSError:
        return None
    return None if real.is_relative_to(inside) else str(real)


@contextmanager
def opened(path: Path, listed: os.stat_result | None = None,
           inside: Path | None = None) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """A regular file open for reading, and what `fstat` says of it. With `listed`, raises
    FileChanged unless it is the file the listing saw, and with `inside` (a resolved directory)
    unless it is under it; raises OSError when it is no regular file."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if listed is not None and exc.errno in GONE:
            raise FileChanged(f"it is gone from its path ({exc.strerror})") from None
        raise
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise OSError(f"{_kind(status.st_mode)}, not a regular file")
        if listed is not None and (why := same_file(listed, status)):
            raise FileChanged(why)
        if inside is not None and (real := _outside(handle.fileno(), inside)):
            raise FileChanged(f"its path now leads to {real}, outside {inside}")
        yield handle, status


def read_bytes(path: Path, limit: int, *, tail: bool = False) -> tuple[bytes, int]:
    """At most `limit` bytes of a regular file (its last ones with tail), and the offset they start at.

    Raises OSError when the path is no longer a regular file."""
    with opened(path) as (handle, status):
        start = max(0, status.st_size - limit) if tail else 0
        handle.seek(start)
        # No more than fstat said there was (plus one byte, to tell a file that grew past the limit):
        # a read of `limit` bytes would first allocate them all.
        return handle.read(min(limit, status.st_size - start + 1)), start

"""Stage prefixes saved on disk, so that a new process starts where a warm one is.

Every stage's prompt starts with the same instructions and demos (600 to 1,500 tokens), which the
1.5B reads at about 110 tokens/s on 2 cores, so a new process would read every stage's prefix
again. The static prefix of a call is what its prompt shares with the prompt of all its chat turns
but the last (the system message and the demos; the last user turn holds the call's own inputs).
Its state, the KV cache of those tokens and nothing else, is saved with llama.cpp's sequence state
API once, and every later call of that stage, in this process or a new one, starts from it.

A call always starts from exactly its static prefix, whether the state comes from this process's
memory, from disk or is read now: the tokens after it are read the same way every time, so a cold
call gives the same tokens as a warm one.

A saved state is keyed by everything that decides it: the model's sha256, the llama.cpp build
(`native.library_digest`), `n_ctx`, this CPU's flags and the prefix tokens themselves, so a changed
instruction, demo or template is a new key, never an old state. Each file holds its key, its tokens
and the sha256 of the state; a file that does not match in every part, or that cannot be read, is
a miss with a note, and the prefix is read again. llama.cpp only ever loads bytes this program
wrote for exactly that key. The directory is bounded (`DIAGNOSIS_PREFIX_CACHE_MB`): the least
recently used states are removed first.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from contracts.settings import value_or_default

# The rule of the note a run's record gets when a saved state could not be used.
RULE = "lm.prefix_cache"
DIRECTORY = "DIAGNOSIS_PREFIX_CACHE"
SIZE = "DIAGNOSIS_PREFIX_CACHE_MB"
MAGIC = b"grounded-diagnosis prefix state\n"
LENGTH = struct.Struct("<Q")
SUFFIX = ".state"
# A shorter prefix is not worth a file: reading it costs less than a second.
MIN_TOKENS = 64
# Prefix states kept in this process's memory: one per stage prompt (the executor has a narrow and a
# broad one), about 28 KB per token for the 1.5B.
MEMORY_ENTRIES = 8


class PrefixCacheSettingError(ValueError):
    """A prefix-cache setting that cannot be used; the message names it."""


def settings() -> tuple[Path, int]:
    """The cache directory and its bound in bytes (0: nothing is written or read)."""
    raw = (value_or_default(SIZE) or "").strip()
    try:
        megabytes = int(raw)
    except ValueError:
        megabytes = -1
    if megabytes < 0:
        raise PrefixCacheSettingError(f"{SIZE} must be a whole number of megabytes (0 turns the prefix cache off), "
                                      f"not {raw!r}")
    directory = Path(value_or_default(DIRECTORY)).expanduser()
    return directory, megabytes << 20


@dataclass
class PrefixUse:
    """What one call's prompt got from a saved prefix."""

    prompt_tokens: int = 0
    prefix_tokens: int = 0  # the call's static prefix (0: too short, or no chat template to find it)
    source: str = ""  # memory, disk, or read (computed now, and saved)
    state_bytes: int = 0
    seconds: float = 0.0  # to load the state, or to read the prefix and save it
    note: str | None = None  # why a saved state was not used


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class PrefixStore:
    """Prefix states on disk under one identity (model, build, n_ctx, CPU), bounded in bytes."""

    def __init__(self, directory: Path, max_bytes: int, identity: dict):
        self.directory = directory
        self.max_bytes = max_bytes
        self.identity = identity
        self._identity_text = json.dumps(identity, sort_keys=True)

    def path(self, tokens: list[int]) -> Path:
        digest = hashlib.sha256(self._identity_text.encode())
        digest.update(np.asarray(tokens, dtype="<i4").tobytes())
        return self.directory / f"{digest.hexdigest()}{SUFFIX}"

    def read(self, tokens: list[int]) -> tuple[bytes | None, str | None]:
        """The state saved for exactly these tokens, or None and why not (no reason when none was saved)."""
        path = self.path(tokens)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return None, f"saved prefix state {path} could not be read ({exc.strerror or exc}); read the prefix again"
        state, problem = self._unpack(blob, tokens)
        if problem is not None:
            self.discard(path)
            return None, f"saved prefix state {path.name} {problem}; removed it and read the prefix again"
        try:
            os.utime(path)  # recently used: eviction removes the oldest first
        except OSError:
            pass
        return state, None

    def _unpack(self, blob: bytes, tokens: list[int]) -> tuple[bytes | None, str | None]:
        if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + LENGTH.size:
            return None, "is not a prefix state file"
        start = len(MAGIC) + LENGTH.size
        (length,) = LENGTH.unpack_from(blob, len(MAGIC))
        try:
            header = json.loads(blob[start:start + length].decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None, "has an unreadable header"
        if not isinstance(header, dict) or header.get("key") != self.identity:
            return None, "was saved for another model, build, context size or CPU"
        expected = np.asarray(tokens, dtype="<i4").tobytes()
        body = blob[start + length:]
        if header.get("tokens") != len(tokens) or body[:len(expected)] != expected:
            return None, "was saved for other tokens"
        state = body[len(expected):]
        if header.get("state_bytes") != len(state):
            return None, f"is cut short ({len(state):,} of {header.get('state_bytes')} state bytes)"
        if hashlib.sha256(state).hexdigest() != header.get("state_sha256"):
            return None, "does not match its checksum"
        return state, None

    def write(self, tokens: list[int], state: bytes) -> str | None:
        """Save the state of these tokens, then keep the directory within its bound; a note when it could not."""
        if len(state) > self.max_bytes:
            return f"the prefix state ({len(state):,} bytes) is larger than {SIZE} allows; not saved"
        header = json.dumps({"key": self.identity, "tokens": len(tokens), "state_bytes": len(state),
                             "state_sha256": hashlib.sha256(state).hexdigest()}).encode()
        path = self.path(tokens)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.directory, suffix=".partial")
        except OSError as exc:
            return f"the prefix cache {self.directory} cannot be written ({exc.strerror or exc}); not saved"
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(MAGIC + LENGTH.pack(len(header)) + header)
                out.write(np.asarray(tokens, dtype="<i4").tobytes())
                out.write(state)
            os.replace(temporary, path)
        except OSError as exc:
            return f"the prefix state could not be saved in {self.directory} ({exc.strerror or exc})"
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
        self.evict(keep=path)
        return None

    def evict(self, keep: Path | None = None) -> None:
        """Remove the least recently used states until the directory is within its bound."""
        files = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            try:
                files.append((path.stat().st_mtime, path.stat().st_size, path))
            except OSError:
                continue  # removed by another process meanwhile
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            if path != keep:
                self.discard(path)
                total -= size

    @staticmethod
    def discard(path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass


class PrefixStates:
    """Where each call of the engine starts: its static prefix, from memory, from disk, or read now
    and saved. `store` is None when states are not saved (the cache is off, or the model file has no
    known sha256); the prefix is still read on its own, so every call is read the same way."""

    def __init__(self, store: PrefixStore | None):
        self.store = store
        self._memory: OrderedDict[tuple[int, ...], bytes] = OrderedDict()

    def prepare(self, llm, messages: list[dict]) -> PrefixUse:
        """Set `llm`'s context to the static prefix of `messages`; what was used, and how."""
        prompt = llm.chat_tokens(messages) if len(messages) > 1 else None
        if prompt is None:
            return PrefixUse()
        prefix = prompt[:common_prefix(llm.chat_tokens(messages[:-1]), prompt)]
        use = PrefixUse(prompt_tokens=len(prompt), prefix_tokens=len(prefix))
        if len(prefix) < MIN_TOKENS or len(prefix) >= len(prompt):
            use.prefix_tokens = 0
            return use
        started = time.perf_counter()
        if common_prefix(llm.evaluated(), prefix) == len(prefix):
            llm.keep(len(prefix))
            use.source = "memory"
        else:
            self._load_or_read(llm, prefix, use)
        use.seconds = round(time.perf_counter() - started, 3)
        return use

    def _load_or_read(self, llm, prefix: list[int], use: PrefixUse) -> None:
        key = tuple(prefix)
        state, source = self._memory.get(key), "memory"
        if state is None and self.store is not None:
            state, use.note = self.store.read(prefix)
            source = "disk"
        if state is not None and llm.restore_sequence(prefix, state):
            self._remember(key, state)
            use.source, use.state_bytes = source, len(state)
            return
        if state is not None:
            use.note = "llama.cpp did not accept a saved prefix state; removed it and read the prefix again"
            self._memory.pop(key, None)
            if self.store is not None:
                self.store.discard(self.store.path(prefix))
        llm.evaluate_from_start(prefix)
        state = llm.sequence_state()
        self._remember(key, state)
        use.source, use.state_bytes = "read", len(state)
        if self.store is not None:
            use.note = self.store.write(prefix, state) or use.note

    def _remember(self, key: tuple[int, ...], state: bytes) -> None:
        self._memory[key] = state
        self._memory.move_to_end(key)
        while len(self._memory) > MEMORY_ENTRIES:
            self._memory.popitem(last=False)

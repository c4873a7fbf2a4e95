"""Runbooks: Markdown files whose `## ` sections are ranked with BM25 over Chinese-aware tokens.

The fixture's runbooks and a user's directory (`DIAGNOSIS_RUNBOOKS_DIR`) are read the same way;
the index is rebuilt when a file is added, removed or changed. A runbook that cannot be used (not
a regular file, not UTF-8, empty, only symbols, too big) is left out and named in the message of
every lookup; it never costs the other runbooks. A section is cut at MAX_ITEM_CHARS.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from tools.text.folding import fold_words
from tools.sources.errors import SourceError
from tools.sources.files import Listing, read_bytes, regular_files
from tools.sources.interfaces import RunbookHits, RunbookSource, Settings
from tools.sources.limits import (
    MAX_DIRECTORY_BYTES,
    MAX_FILE_BYTES,
    MAX_ITEM_CHARS,
    MAX_NAME_CHARS,
    clip,
    places,
    size_text,
)


class UnusableRunbook(SourceError):
    """One runbook that cannot be indexed; in a directory it costs only itself."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"runbook {path}: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class Runbook:
    source: str
    title: str
    sections: tuple[tuple[str, str], ...]
    # Headings of the sections cut at MAX_ITEM_CHARS.
    cut: tuple[str, ...] = ()


def load_runbook(path: Path) -> Runbook:
    """A runbook's title (`# `) and its sections (`## ` heading, the text under it on one line),
    read whole and as UTF-8."""
    data, _ = read_bytes(path, MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise UnusableRunbook(path, f"larger than the {size_text(MAX_FILE_BYTES)} a runbook may be")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnusableRunbook(path, f"not UTF-8 (byte {data[exc.start]:#04x} at offset {exc.start})") from None
    title = path.stem
    sections: list[tuple[str, str]] = []
    heading, body = "", []
    # A last empty heading closes the last section.
    for line in [*text.splitlines(), "## "]:
        if line.startswith("# "):
            title = clip(line[2:].strip(), MAX_NAME_CHARS)
        elif line.startswith("## "):
            if heading and "".join(body).strip():
                sections.append((heading, " ".join(x.strip() for x in body if x.strip())))
            heading, body = clip(line[3:].strip(), MAX_NAME_CHARS), []
        else:
            body.append(line)
    if not sections:
        raise UnusableRunbook(path, "no '## ' sections with text")
    cut = tuple(heading for heading, content in sections if len(content) > MAX_ITEM_CHARS)
    return Runbook(source=path.name, title=title, sections=tuple((h, clip(c)) for h, c in sections), cut=cut)


_jieba_lock = threading.Lock()


def tokenize(text: str) -> list[str]:
    """Chinese-aware tokens: jieba for CJK runs, whole words for Latin text."""
    import jieba

    with _jieba_lock:
        jieba.setLogLevel(60)
        pieces = jieba.lcut_for_search(fold_words(text))
    return [p for p in (x.strip() for x in pieces) if p and any(ch.isalnum() for ch in p)]


class KnowledgeIndex:
    """BM25 over the runbooks' sections, and notes naming what it left out: the files skipped
    (`skipped`, each "name (why)"), the sections with no word to index (only symbols) and the
    sections cut. With no section left there is nothing to rank, and SourceError says why."""

    def __init__(self, runbooks: tuple[Runbook, ...], skipped: tuple[str, ...] = ()):
        import bm25s

        blocks = [
            {
                "title": f"{rb.title} / {heading}",
                "source": f"runbooks/{rb.source}#{re.sub(r'[^a-z0-9]+', '-', heading.casefold()).strip('-')}",
                "content": body,
            }
            for rb in runbooks
            for heading, body in rb.sections
        ]
        tokens = [tokenize(f"{b['title']} {b['content']}") for b in blocks]
        unindexed = [b["source"] for b, t in zip(blocks, tokens) if not t]
        if len(unindexed) == len(blocks):
            why = "no runbook section has a word to index" if blocks else "no runbook could be used"
            raise SourceError(why + (f": {places([*skipped, *unindexed])}" if skipped or unindexed else ""))
        self.blocks = [b for b, t in zip(blocks, tokens) if t]
        self.retriever = bm25s.BM25()
        self.retriever.index([t for t in tokens if t], show_progress=False)
        self.skipped_files = len(skipped)
        cut = [f"{rb.source}#{heading}" for rb in runbooks for heading in rb.cut]
        notes = []
        if skipped:
            notes.append(f"{len(skipped)} runbook file(s) were not indexed: {places(skipped)}")
        if unindexed:
            notes.append(f"{len(unindexed)} section(s) have no word to index and were left out: {places(unindexed)}")
        if cut:
            notes.append(f"{len(cut)} section(s) longer than {MAX_ITEM_CHARS} characters were cut where marked "
                         f"and ranked only that far ({places(cut)})")
        self.notes = tuple(notes)

    def search(self, query: str, top_k: int) -> RunbookHits:
        tokens = tokenize(query)
        scores = self.retriever.get_scores(tokens) if tokens else []
        ranked = sorted(
            ((float(s), i) for i, s in enumerate(scores) if float(s) > 0 and not math.isnan(float(s))),
            key=lambda pair: -pair[0],
        )[:top_k]
        blocks = tuple(dict(self.blocks[i], score=round(score, 3)) for score, i in ranked)
        return RunbookHits(blocks=blocks, notes=self.notes, skipped_files=self.skipped_files)


class RunbookDirectory(RunbookSource):
    @classmethod
    def from_settings(cls, root: str, settings: Settings) -> RunbookDirectory:
        return cls(Path(root))

    def __init__(self, root: Path):
        self.root = root
        self._lock = threading.Lock()
        self._index: tuple[tuple, KnowledgeIndex] | None = None

    @property
    def label(self) -> str:
        return f"runbook directory {self.root}"

    def search(self, query: str, top_k: int) -> RunbookHits:
        return self.index().search(query, top_k)

    def index(self) -> KnowledgeIndex:
        """The index of every usable runbook; its notes name the files skipped and the sections cut."""
        if not self.root.is_dir():
            raise SourceError(f"runbook directory {self.root} does not exist")
        listing = regular_files(self.root, ("*.md",), recursive=False)
        if not listing.files and not listing.skipped:
            raise SourceError(f"no runbooks (*.md) under {self.root}")
        key = (tuple((name, s.st_ino, s.st_mtime_ns, s.st_size) for name, _, s in listing.files), listing.skipped)
        with self._lock:
            if self._index is None or self._index[0] != key:
                self._index = (key, self._build(listing))
            return self._index[1]

    def _build(self, listing: Listing) -> KnowledgeIndex:
        skipped = list(listing.skipped)
        runbooks = []
        budget = MAX_DIRECTORY_BYTES
        for name, path, status in listing.files:
            if status.st_size > budget:
                skipped.append(f"{name} (the {size_text(MAX_DIRECTORY_BYTES)} an index reads were used up)")
                continue
            try:
                runbooks.append(load_runbook(path))
            except UnusableRunbook as exc:
                skipped.append(f"{name} ({exc.reason})")
                continue
            except OSError as exc:
                skipped.append(f"{name} (cannot be read: {exc.strerror or exc})")
                continue
            budget -= status.st_size
        try:
            return KnowledgeIndex(tuple(runbooks), tuple(skipped))
        except SourceError as exc:
            raise SourceError(f"{exc} (runbook directory {self.root})") from None

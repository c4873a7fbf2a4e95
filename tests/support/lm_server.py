"""llama-cpp-python's own OpenAI-compatible server (`python -m llama_cpp.server`, the `server` extra)
serving an embedded model on a loopback port of its own, for the tests and benchmarks of the
remote LM path. It runs llama.cpp, so whatever uses it runs under the model lock, and a test that
does is marked `embedded`."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from program.lm.models import EMBEDDED_MODELS, assemble
from tests.support.prometheus_server import free_port
from tests.support.servers import stop_process

CONTEXT_TOKENS = 6144
# Saved states of recent prompts, as the server's `--cache` keeps them: its byte budget counts the
# KV cache only (each entry also holds a 311 MB logits buffer), so a small budget keeps a few entries.
CACHE_BYTES = 200_000_000


@contextmanager
def llama_cpp_server(model: str = "embedded-small", *, threads: int = 2, cache: bool = True,
                     timeout: float = 180.0) -> Iterator[str]:
    """The server's OpenAI-compatible root (`http://127.0.0.1:PORT/v1`) while it runs."""
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", prefix="llama-cpp-server-", suffix=".log")
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(assemble(EMBEDDED_MODELS[model])),
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(CONTEXT_TOKENS),
               "--n_threads", str(threads), "--verbose", "false"]
    if cache:
        command += ["--cache", "true", "--cache_size", str(CACHE_BYTES)]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(process, url, timeout, log)
        yield url
    finally:
        stop_process(process, timeout=15)
        log.close()


def _wait_ready(process: subprocess.Popen, url: str, timeout: float, log) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    log.seek(0)
    raise RuntimeError(f"llama_cpp.server did not answer at {url} (exit {process.poll()}); its output:\n"
                       f"{log.read()[-3000:]}")

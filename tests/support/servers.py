"""Servers for tests. A test that needs a server or a browser this machine lacks fails and names what
to install (.ci/run installs them all): a test that did not run has not passed. A loopback HTTP
server whose answers a test writes, for sources that misbehave."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest


def stop_process(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """Terminate a server's process, and kill it when it has not ended within `timeout` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def missing_server(reason: str):
    pytest.fail(f"this test cannot run here: {reason}")


class Loopback:
    """An HTTP server of its own on a loopback port, for sources that misbehave: each path is
    answered by a function that writes the whole response to the handler (`answer`, `drip`), GET
    and POST alike; any other path gets 404. `seen` lists each request's method, path and
    Authorization header. Use as a context manager; `url` is its address."""

    def __init__(self, routes: dict[str, Callable[[BaseHTTPRequestHandler], None]]):
        self.seen: list[dict[str, str]] = []
        seen = self.seen
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append({"method": self.command, "path": self.path,
                             "authorization": self.headers.get("Authorization", "")})
                route = routes.get(urlsplit(self.path).path)
                try:
                    if route is None:
                        answer(404, b'{"status": "error", "error": "not found"}')(self)
                    else:
                        route(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up, as a source under test should

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Loopback:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def answer(status: int, body: bytes | str | dict, content_type: str = "application/json"):
    """A response sent at once: a dict is sent as JSON."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body.encode() if isinstance(body, str) else body

    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return respond


def drip(body: dict, chunk: int = 8, every: float = 0.05):
    """A 200 whose JSON body arrives `chunk` bytes every `every` seconds: each read is quick, the
    whole answer is not. The body is padded with spaces so that it takes at least 30 s."""
    data = json.dumps(body).encode()
    data += b" " * max(0, int(30 / every) * chunk - len(data))

    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        for start in range(0, len(data), chunk):
            handler.wfile.write(data[start:start + chunk])
            handler.wfile.flush()
            time.sleep(every)

    return respond

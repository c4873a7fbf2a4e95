"""Debian's nginx writing its own logs: a reverse proxy (`api-gateway`) in front of an upstream where
nothing listens, so its access log (nginx's `combined` format) holds 502s and its error log nginx's
`connect() failed (111: Connection refused) while connecting to upstream`; and a static site
(`static-site`) whose access log is in Apache's `common` format, written by nginx through a
log_format. Both answer 200 for a file and 404 for a missing one. The logs are rotated twice by
Debian's logrotate, so `.1` and `.2.gz` hold the older requests.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import httpx

from tests.support.log_software import (
    Written,
    children,
    first_line,
    lines_with,
    logrotate_now,
    next_second,
    refusing_port,
    require,
    wait_until,
)
from tests.support.prometheus_server import free_port
from tests.support.servers import stop_process

# Apache's common format is `%h %l %u %t "%r" %>s %b`, and %b is `-` for an empty body where nginx's
# $body_bytes_sent is 0: the map makes the line Apache's.
CONFIG = """\
{user}pid {work}/nginx.pid;
error_log {gateway}/error.log error;
worker_processes 1;
events {{ worker_connections 64; }}
http {{
{temp_paths}
  map $body_bytes_sent $apache_bytes {{ "0" "-"; default $body_bytes_sent; }}
  log_format common '$remote_addr - $remote_user [$time_local] "$request" $status $apache_bytes';
  server {{
    listen 127.0.0.1:{gateway_port};
    server_name api-gateway;
    access_log {gateway}/access.log combined;
    location /static/ {{ alias {html}/; }}
    location / {{ proxy_pass http://127.0.0.1:{upstream_port}; }}
  }}
  server {{
    listen 127.0.0.1:{site_port};
    server_name static-site;
    access_log {site}/access.log common;
    error_log {site}/error.log error;
    root {html};
  }}
}}
"""
MODULES_WITH_TEMP_PATHS = ("proxy", "fastcgi", "uwsgi", "scgi")

# Oldest first: each phase's requests go into one file (access.log.2.gz, access.log.1, access.log),
# as (server, method, path, the status nginx must answer).
PHASES = (
    (("gateway", "GET", "/static/health.txt", 200), ("gateway", "GET", "/static/health.txt", 200),
     ("gateway", "GET", "/favicon.ico", 502), ("site", "GET", "/index.html", 200),
     ("site", "GET", "/robots.txt", 404)),
    (("gateway", "GET", "/static/health.txt", 200), ("gateway", "GET", "/api/orders/1041", 502),
     ("gateway", "GET", "/api/orders/1041", 502), ("site", "GET", "/index.html", 200)),
    (("gateway", "GET", "/static/health.txt", 200), ("gateway", "GET", "/static/health.txt", 200),
     ("gateway", "GET", "/static/app.css", 404), ("gateway", "GET", "/api/orders/1042", 502),
     ("gateway", "POST", "/api/payments", 502), ("gateway", "GET", "/api/orders/1042", 502),
     ("gateway", "GET", "/api/inventory/sku-7", 502), ("gateway", "HEAD", "/static/health.txt", 200),
     ("site", "GET", "/index.html", 200), ("site", "HEAD", "/index.html", 200),
     ("site", "GET", "/missing.png", 404)),
)
REFUSED = "connect() failed (111: Connection refused) while connecting to upstream"
NOT_FOUND = "failed (2: No such file or directory)"


class NginxServer:
    """nginx in the foreground with a config of its own; files go to `gateway` and `site`."""

    def __init__(self, gateway: Path, site: Path, upstream_port: int):
        binary = require("nginx", "nginx", ("/usr/sbin/nginx",))
        self.version = first_line([binary, "-v"]).split(": ", 1)[-1]
        self.work = Path(tempfile.mkdtemp(prefix="real-logs-nginx-"))
        html = self.work / "html"
        html.mkdir()
        (html / "health.txt").write_text("ok\n", encoding="utf-8")
        (html / "index.html").write_text("<h1>shop</h1>\n", encoding="utf-8")
        self.gateway_port, self.site_port, self.upstream_port = free_port(), free_port(), upstream_port
        built = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=30).stderr
        temp_paths = [f"  client_body_temp_path {self.work}/client_body;"] + [
            f"  {module}_temp_path {self.work}/{module};" for module in MODULES_WITH_TEMP_PATHS
            if f"--without-http_{module}_module" not in built]
        config = self.work / "nginx.conf"
        # As root the workers would become `nobody`, who may not read the temp dirs: they stay root.
        config.write_text(CONFIG.format(
            user="user root;\n" if os.geteuid() == 0 else "", work=self.work, gateway=gateway, site=site,
            html=html, temp_paths="\n".join(temp_paths), gateway_port=self.gateway_port,
            site_port=self.site_port, upstream_port=self.upstream_port), encoding="utf-8")
        self.output = self.work / "nginx.out"
        with self.output.open("w") as out:
            self.process = subprocess.Popen(
                [binary, "-p", f"{self.work}/", "-c", str(config), "-e", str(self.work / "startup.log"),
                 "-g", "daemon off;"], stdout=out, stderr=subprocess.STDOUT)
        # The master binds the ports before it forks its worker, so listening alone does not mean
        # the worker that will write the error log exists yet.
        try:
            wait_until(lambda: self._listening(self.gateway_port) and self._listening(self.site_port)
                       and bool(children(self.process.pid)),
                       "nginx listening with its worker", alive=lambda: self.process.poll() is None,
                       log=self.output)
        except BaseException:
            self.stop()
            raise
        self.workers = children(self.process.pid)

    def _listening(self, port: int) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    def url(self, server: str) -> str:
        return f"http://127.0.0.1:{self.gateway_port if server == 'gateway' else self.site_port}"

    def rotate(self, files: list[Path]) -> None:
        logrotate_now(files, f"kill -USR1 {self.process.pid}", self.work)

    def stop(self) -> None:
        stop_process(self.process)
        shutil.rmtree(self.work, ignore_errors=True)


def _request(client: httpx.Client, server: NginxServer, step: tuple, request_id: str) -> httpx.Response:
    where, method, path, status = step
    response = client.request(method, f"{server.url(where)}{path}?request_id={request_id}")
    if response.status_code != status:
        raise RuntimeError(f"nginx answered {response.status_code} to {method} {path}, not {status}:\n"
                           + server.output.read_text(encoding="utf-8", errors="replace")[-2000:])
    return response


def write_nginx_logs(root: Path) -> Written:
    """api-gateway/{access,error}.log and static-site/{access,error}.log, each also .1 and .2.gz."""
    gateway, site = root / "api-gateway", root / "static-site"
    gateway.mkdir(parents=True)
    site.mkdir(parents=True)
    with refusing_port() as upstream:
        sent, seen = _drive(gateway, site, upstream)
    written = Written()
    for requests, suffix in zip(sent, (".2.gz", ".1", "")):  # the phases, oldest first
        for service, where, directory in (("api-gateway", "gateway", gateway), ("static-site", "site", site)):
            mine = [(step, request_id) for step, request_id in requests if step[0] == where]
            written.add(f"{service}/access.log{suffix}", service=service, software=seen["version"],
                        format="nginx-combined" if where == "gateway" else "apache-common",
                        facts=_access_facts(directory / f"access.log{suffix}", mine, seen))
            written.add(f"{service}/error.log{suffix}", service=service, software=seen["version"],
                        format="nginx-error", facts=_error_facts(directory / f"error.log{suffix}", mine, seen))
    return written


def _drive(gateway: Path, site: Path, upstream: int) -> tuple[list, dict]:
    """Send each phase's requests, rotating the logs between phases: per phase, (step, request_id)
    of every request; and what was seen of nginx while it ran."""
    run = secrets.token_hex(4)
    sent: list[list[tuple[tuple, str]]] = []
    server = NginxServer(gateway, site, upstream)
    try:
        with httpx.Client(timeout=10) as client:
            for number, phase in enumerate(PHASES):
                if number:
                    server.rotate(sorted(gateway.glob("*.log")) + sorted(site.glob("*.log")))
                    next_second()
                sent.append([(step, f"{run}-{number}-{i}") for i, step in enumerate(phase)])
                responses = [_request(client, server, step, request_id) for step, request_id in sent[-1]]
        bad_gateway = next(r for r in responses if r.status_code == 502)
        return sent, {"version": server.version, "master_pid": server.process.pid, "worker_pids": server.workers,
                      "bad_gateway_response": {"server_header": bad_gateway.headers.get("server"),
                                               "body": bad_gateway.text.strip()}}
    finally:
        server.stop()


def _pids(seen: dict) -> dict:
    return {"master_pid": seen["master_pid"], "worker_pids": seen["worker_pids"]}


def _access_facts(path: Path, requests: list, seen: dict) -> dict:
    """What the requests were, and the exact line nginx wrote for each status (found by request_id)."""
    facts: dict = {"requests": len(requests), "statuses": {}, "lines": {}, **_pids(seen)}
    for (*_, status), request_id in requests:
        facts["statuses"][str(status)] = facts["statuses"].get(str(status), 0) + 1
        found = lines_with(path, f"request_id={request_id} ")
        facts["lines"].setdefault(str(status), found[0] if found else None)
    if "502" in facts["statuses"]:
        facts["bad_gateway_response"] = seen["bad_gateway_response"]
    return facts


def _error_facts(path: Path, requests: list, seen: dict) -> dict:
    """One `connect() failed` line per 502 and one `open() ... failed` line per 404 of a file."""
    refused = [rid for (_, _, _, status), rid in requests if status == 502]
    missing = [rid for (_, _, _, status), rid in requests if status == 404]
    first = {text: lines_with(path, text) for text in (REFUSED, NOT_FOUND)}
    return {"connection_refused": len(refused), "not_found": len(missing),
            "refused_line": first[REFUSED][0] if first[REFUSED] else None,
            "not_found_line": first[NOT_FOUND][0] if first[NOT_FOUND] else None, **_pids(seen)}

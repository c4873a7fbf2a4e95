"""What the server refuses before a route runs: a request without the bearer token, one whose Host
header is not a name the server answers as (DNS rebinding), a body over the limit, and a client that
takes too long to send a request's head. Each is checked below the routes, as ASGI middleware or as
uvicorn's protocol, so that no route, the audit page's included, can be reached around it."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import re
import socket
from dataclasses import dataclass

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

TOKEN, HOSTS = "DIAGNOSIS_API_TOKEN", "DIAGNOSIS_SERVE_HOSTS"
# RFC 6750's b64token: what an Authorization header can carry as a bearer token, as it is.
BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# Seconds a client has for a whole request (line, headers and body), and idle between two requests; connections
# served at once (a slow client holds one, and no more than these are held).
REQUEST_TIMEOUT, KEEP_ALIVE_TIMEOUT, MAX_CONNECTIONS = 15, 5, 200


def bearer_token(raw: str | None) -> str | None:
    """The bearer token as set; a value no Authorization header can carry as it is (blank, with a
    space or a newline, not ASCII) would refuse every client, so it is a ValueError."""
    if raw is None or raw == "":
        return None
    if not BEARER_TOKEN.fullmatch(raw):
        raise ValueError(f"{TOKEN} must be a bearer token as a header carries it (letters, digits and - . _ ~ + / , "
                         "then = at most at the end), without spaces or newlines; the one set "
                         f"({len(raw)} characters) cannot be sent by any client")
    return raw

@dataclass(frozen=True)
class HostNames:
    """The Host header values a server answers: `names`, and any IP address when `addresses`."""

    names: frozenset[str]
    addresses: bool = False

    def allow(self, host: str) -> bool:
        if "*" in self.names or host in self.names:
            return True
        return self.addresses and _is_address(host)

def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True

def accepted_hosts(bound: str, named: str = "") -> HostNames:
    """The names a server bound to `bound` answers as: that address or name (a loopback address also
    as localhost, and localhost as both loopback addresses), plus the comma-separated `named` ones
    (DIAGNOSIS_SERVE_HOSTS; `*` for any). Bound to every address (0.0.0.0, ::), it answers any IP
    address and this machine's name: a DNS rebinding attack needs a name, and an IP address cannot
    be rebound."""
    host = bound.strip().strip("[]").lower()
    names = {host} | {n.strip().lower().rstrip(".") for n in named.split(",") if n.strip()}
    addresses = False
    if host == "localhost":
        names |= {"127.0.0.1", "::1"}
    elif _is_address(host):
        address = ipaddress.ip_address(host)
        if address.is_loopback:
            names.add("localhost")
        if address.is_unspecified:
            addresses = True
            names |= {"localhost", socket.gethostname().lower(), socket.getfqdn().lower()}
    return HostNames(names=frozenset(names), addresses=addresses)

def host_of(header: bytes) -> str:
    """The host of a Host header, without its port, lower case; an IPv6 address without brackets."""
    value = header.decode("latin-1").strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    name, _, port = value.rpartition(":")
    return (name if name and port.isdigit() else value).rstrip(".")

class BearerToken:
    """ASGI middleware: every path but /healthz needs `Authorization: Bearer <token>`, the routes of
    other modules (the audit page) and paths that lead nowhere included."""

    OPEN = ("/healthz",)

    def __init__(self, app, token: str):
        self.app, self.token = app, token.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] not in self.OPEN:
            scheme, _, given = dict(scope["headers"]).get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.token):
                detail = "a bearer token is required (Authorization: Bearer <DIAGNOSIS_API_TOKEN>)"
                refused = JSONResponse({"detail": detail}, 401, headers={"WWW-Authenticate": "Bearer"})
                return await refused(scope, receive, send)
        return await self.app(scope, receive, send)

class HostCheck:
    """ASGI middleware: a request whose Host header is not one the server answers as is refused (421),
    /healthz included: a page on another origin that rebinds its DNS name to this machine sends its
    own name, and reads nothing."""

    def __init__(self, app, hosts: HostNames):
        self.app, self.hosts = app, hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            header = dict(scope["headers"]).get(b"host")
            if header is None or not self.hosts.allow(host_of(header)):
                shown = "no Host header" if header is None else f"Host {header.decode('latin-1')[:80]!r}"
                detail = (f"{shown} is not a name this server answers as; name it in {HOSTS} "
                          "(comma-separated) to accept it")
                return await JSONResponse({"detail": detail}, 421)(scope, receive, send)
        return await self.app(scope, receive, send)

class BodyLimit:
    """ASGI middleware: a body over `limit` bytes is refused, by its Content-Length before it is read,
    and while it is read when it comes in chunks."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit():
            return await JSONResponse({"detail": "Content-Length is not a number"}, 400)(scope, receive, send)
        if len(length) > 20 or int(length) > self.limit:  # longer than any length a body can have
            return await JSONResponse({"detail": self._message()}, 413)(scope, receive, send)
        received = 0

        async def limited():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise HTTPException(413, self._message())
            return message

        await self.app(scope, limited, send)

    def _message(self) -> str:
        return f"the request body is over {self.limit} bytes, the most this server reads (DIAGNOSIS_SERVE_MAX_BODY)"

class RequestDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request to arrive whole: uvicorn itself waits
    for its line, headers and body for ever, so a client that sends half a request line, or a body a
    byte at a time, would hold its connection as long as it liked. The deadline starts when the
    connection opens, and again when a request after the first begins; a request that is in whole is
    the app's to time."""

    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.cycle is None or self.cycle.response_complete:
            self._arm()
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete and not self.cycle.more_body:
            self._disarm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(REQUEST_TIMEOUT, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

"""HTTP front end: Streamable HTTP MCP at ``POST /mcp``, REST ``POST /query`` (alias ``POST /search``,
as qmd's), ``GET /health`` (``status``, ``uptime`` in seconds as qmd's, and qmdlab's counts).

``/mcp`` answers as qmd's sessionless server (:class:`SessionlessMcp`): a one-shot ``POST`` —
``tools/call``, ``tools/list`` and any other request, without ``initialize`` and without an
``Mcp-Session-Id`` — is served on its own and answered with JSON; ``GET`` and ``DELETE`` without a
session are **405**. A client that sends ``initialize`` gets a session (``Mcp-Session-Id``) as
before, and its requests carrying that id are served in it.

Security (DNS-rebinding and cross-site protection for a server on a developer machine):

- it binds to ``127.0.0.1`` unless told otherwise;
- a request whose ``Origin`` header is present and not a loopback origin gets **403**, unless
  the origin is listed in ``QMDLAB_ALLOWED_ORIGINS`` (comma-separated exact origins, or ``*``).
  A loopback origin is ``http(s)://`` plus exactly ``localhost``, a loopback IP literal
  (``127.0.0.0/8``, ``[::1]``) and an optional port — no user info, no path, no other suffix
  (``127.0.0.1.attacker.example`` is not loopback); two ``Origin`` headers get 403 too;
- a request whose ``Host`` header is not the bound address gets **403** (when bound to
  loopback, any loopback name with the bound port is accepted; the header is parsed exactly as
  above, and two ``Host`` headers get 403); more hosts can be allowed with
  ``QMDLAB_ALLOWED_HOSTS`` (comma-separated ``host`` or ``host:port``, or ``*``). Binding to a
  non-loopback address therefore needs ``QMDLAB_ALLOWED_HOSTS`` for any name other than that
  address. qmd's ``QMD_ALLOWED_ORIGINS`` / ``QMD_ALLOWED_HOSTS`` are read when the ``QMDLAB_``
  one is unset, with these rules (``*`` in the origins does not turn the ``Host`` check off);
- a ``POST`` whose ``Content-Type`` is not ``application/json`` gets **415**, so a page cannot
  send one cross-site as a "simple" request (a form or ``text/plain``).

Limits (:class:`HttpLimits`): request heads over :data:`MAX_HEADER_BYTES` get **431**, request
bodies over :data:`MAX_BODY_BYTES` **413**, a body
not received within :data:`BODY_TIMEOUT_S` **408**; a connection that has not sent a whole
request head within :data:`HEADER_TIMEOUT_S` is closed, an idle kept-alive one after
:data:`KEEP_ALIVE_S`; an MCP session with no request for :data:`SESSION_IDLE_S` is closed, and
at most :data:`MAX_SESSIONS` are open at once; a ``/query`` taking longer than
:data:`QUERY_TIMEOUT_S` is answered **503** (an MCP tool call, a tool error). At most
:data:`MAX_QUEUED_QUERIES` searches (``/query`` and MCP tool calls, running or waiting, an abandoned
run counted until its thread ends) are in flight at once: one more gets **503** with a
``Retry-After`` header (a tool call, a tool error) at once, instead of queuing without bound.
``/health`` never waits for a query: it has its own worker thread, not anyio's shared pool of
40 that queries fill, and answers with the last count when the index is busy.

>>> g = OriginHostGuard(None, host="127.0.0.1", port=8181, allowed_origins=(), allowed_hosts=())
>>> g.origin_ok("http://localhost:3000"), g.origin_ok("https://evil.example"), g.origin_ok(None)
(True, False, True)
>>> g.origin_ok("http://127.0.0.1.nip.io"), g.origin_ok("http://evil.example@127.0.0.1:8181")
(False, False)
>>> g.host_ok("127.0.0.1:8181"), g.host_ok("localhost:8181"), g.host_ok("evil.example:8181"), g.host_ok("127.0.0.1:9")
(True, True, False, False)
>>> g.host_ok("127.0.0.1.attacker.example:8181"), g.host_ok("[::1]:8181")
(False, True)
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import qmdlab
from qmdlab.errors import QmdlabError
from qmdlab.mcp_server.backend import McpBackend
from qmdlab.mcp_server.frames import has_lone_surrogate
from qmdlab.mcp_server.server import QueryRequest, build_server, ignored_keys

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8181

MAX_BODY_BYTES = 1 << 20
"""Largest request body accepted on any endpoint (bytes); a query is capped far below it."""
BODY_TIMEOUT_S = 30.0
"""Seconds a request body may take to arrive."""
MAX_HEADER_BYTES = 16 * 1024
"""Largest request head accepted (all header names and values); larger ones get 431."""
HEADER_TIMEOUT_S = 10.0
"""Seconds a connection may take to send a whole request head."""
KEEP_ALIVE_S = 5
"""Seconds an idle kept-alive connection stays open."""
SESSION_IDLE_S = 600.0
"""Seconds an MCP session may go without a request before it is closed."""
MAX_SESSIONS = 256
"""MCP sessions open at once at most (a new one past it is refused)."""
QUERY_TIMEOUT_S = 120.0
"""Seconds a ``/query`` may run before it is answered 503."""
MAX_QUEUED_QUERIES = 32
"""Searches in flight at once (running or waiting for the backend); one more is answered 503. Below
anyio's 40 worker threads, so queries alone never take every thread."""
RETRY_AFTER_S = 1
"""The ``Retry-After`` (seconds) of a 503 for a full query queue."""
HEALTH_LOCK_WAIT_S = 0.5
"""How long ``/health`` waits for the index before it answers with the last count it read."""


@dataclass(frozen=True)
class HttpLimits:
    """The HTTP server's limits (module constants by default; tests use small ones)."""

    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout_s: float = BODY_TIMEOUT_S
    header_timeout_s: float = HEADER_TIMEOUT_S
    keep_alive_s: int = KEEP_ALIVE_S
    session_idle_s: float = SESSION_IDLE_S
    max_sessions: int = MAX_SESSIONS
    query_timeout_s: float = QUERY_TIMEOUT_S
    max_queued_queries: int = MAX_QUEUED_QUERIES


class QueryGate:
    """At most ``limit`` searches in flight: :meth:`enter` says whether one more may start; the
    worker thread calls :meth:`leave` when it ends (so a run abandoned at its deadline still counts
    until its thread is done). Thread-safe.

    >>> g = QueryGate(1)
    >>> g.enter(), g.enter(), g.leave(), g.enter()
    (True, False, None, True)
    """

    def __init__(self, limit: int):
        import threading

        self.limit = int(limit)
        self.in_flight = 0
        self._lock = threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self.in_flight >= self.limit:
                return False
            self.in_flight += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.in_flight = max(0, self.in_flight - 1)

    def busy_message(self) -> str:
        return f"the server is busy ({self.limit} searches in flight); retry in {RETRY_AFTER_S} s"

    async def run_in_thread(self, fn: Any) -> Any:
        """``fn()`` on a worker thread, after a successful :meth:`enter`; the slot is left
        exactly once: by the thread when ``fn`` ends (a run abandoned at its deadline keeps it
        until then), or here when the wait is cancelled before the thread started (then ``fn``
        never runs)."""
        import threading

        lock = threading.Lock()
        state = {"started": False, "left": False}

        def leave_once() -> None:
            with lock:
                if state["left"]:
                    return
                state["left"] = True
            self.leave()

        def call() -> Any:
            with lock:
                if state["left"]:  # the caller gave up before a thread was free
                    return None
                state["started"] = True
            try:
                return fn()
            finally:
                leave_once()

        try:
            return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        finally:
            with lock:
                never_started = not state["started"]
            if never_started:
                leave_once()


def _env_list(name: str, qmd_name: str) -> tuple[str, ...]:
    """The comma-separated list in ``$name``, else in qmd's ``$qmd_name``."""
    raw = os.environ.get(name) or os.environ.get(qmd_name, "")
    return tuple(x.strip() for x in raw.split(",") if x.strip())


_HOST_RE = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9_.-]+))(?::(?P<port>[0-9]{1,5}))?")


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``(host, port)`` of a ``Host`` header or an origin's ``host[:port]``; ``None`` unless it is
    exactly a name or IPv4 literal, or a bracketed IPv6 literal, with an optional port.

    >>> _split_host("[::1]:8181"), _split_host("Localhost"), _split_host("a@127.0.0.1"), _split_host("[::1].x")
    (('::1', 8181), ('localhost', None), None, None)
    """
    m = _HOST_RE.fullmatch(value.strip().lower())
    if m is None:
        return None
    port = int(m["port"]) if m["port"] else None
    if port is not None and port > 65535:
        return None
    return m["v6"] or m["name"], port


def _is_loopback(host: str) -> bool:
    """Exactly ``localhost`` or a loopback IP literal (``127.0.0.0/8``, ``::1``).

    >>> [_is_loopback(h) for h in ("localhost", "127.0.0.2", "::1", "127.0.0.1.evil.example", "localhost.evil")]
    [True, True, True, False, False]
    """
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _origin_host(origin: str) -> str | None:
    """The host of an ``Origin`` value (``scheme://host[:port]``, nothing else), else ``None``."""
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    split = _split_host(parts.netloc)  # user info ("evil@127.0.0.1") does not match
    return split[0] if split else None


class OriginHostGuard:
    """ASGI middleware: 403 for a foreign ``Origin`` or an unexpected ``Host`` (see module doc)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        host: str,
        port: int,
        allowed_origins: Sequence[str] | None = None,
        allowed_hosts: Sequence[str] | None = None,
    ):
        self.app = app
        self.host, self.port = host.strip("[]").lower(), int(port)
        self.allowed_origins = tuple(
            allowed_origins
            if allowed_origins is not None
            else _env_list("QMDLAB_ALLOWED_ORIGINS", "QMD_ALLOWED_ORIGINS")
        )
        self.allowed_hosts = tuple(
            allowed_hosts if allowed_hosts is not None else _env_list("QMDLAB_ALLOWED_HOSTS", "QMD_ALLOWED_HOSTS")
        )

    def origin_ok(self, origin: str | None) -> bool:
        if not origin:  # non-browser clients send none
            return True
        if "*" in self.allowed_origins or origin.rstrip("/") in {o.rstrip("/") for o in self.allowed_origins}:
            return True
        host = _origin_host(origin)
        return host is not None and _is_loopback(host)

    def host_ok(self, host_header: str | None) -> bool:
        if not host_header:
            return False
        if "*" in self.allowed_hosts:
            return True
        split = _split_host(host_header)
        if split is None:
            return False
        host, port = split
        for allowed in self.allowed_hosts:
            a_split = _split_host(allowed)
            if a_split is not None and a_split[0] == host and (a_split[1] is None or a_split[1] == port):
                return True
        if port not in (self.port, None) or (port is None and self.port not in (80, 443)):
            return False
        if host == self.host:
            return True
        return (_is_loopback(self.host) or self.host in ("0.0.0.0", "::")) and _is_loopback(host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("headers", [])
            if sum(len(k) + len(v) + 4 for k, v in raw) > MAX_HEADER_BYTES:
                await PlainTextResponse(
                    f"request headers over {MAX_HEADER_BYTES} bytes", status_code=431, headers={"connection": "close"}
                )(scope, receive, send)
                return
            headers: dict[str, list[str]] = {}
            for k, v in scope.get("headers", []):
                headers.setdefault(k.decode("latin-1").lower(), []).append(v.decode("latin-1"))
            origins, hosts = headers.get("origin", []), headers.get("host", [])
            problem = None
            if len(origins) > 1:
                problem = "forbidden: more than one Origin header"
            elif len(hosts) > 1:
                problem = "forbidden: more than one Host header"
            elif not self.origin_ok(origins[0] if origins else None):
                problem = f"forbidden Origin {origins[0]!r}; allow it with QMDLAB_ALLOWED_ORIGINS"
            elif not self.host_ok(hosts[0] if hosts else None):
                problem = f"forbidden Host {hosts[0] if hosts else None!r}; allow it with QMDLAB_ALLOWED_HOSTS"
            if problem:
                await PlainTextResponse(problem, status_code=403)(scope, receive, send)
                return
            if scope.get("method") == "POST":
                ctype = (headers.get("content-type") or [""])[0].split(";")[0].strip().lower()
                if ctype != "application/json":
                    await PlainTextResponse(
                        f"unsupported Content-Type {ctype or 'none'!r}: send application/json", status_code=415
                    )(scope, receive, send)
                    return
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: read a request body whole, within ``max_bytes`` (else 413) and
    ``timeout_s`` (else 408), before the app sees it."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_s: float):
        self.app, self.max_bytes, self.timeout_s = app, int(max_bytes), float(timeout_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "DELETE", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope.get("headers", []) if k.lower() == b"content-length"), None)
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        total = 0
        with anyio.move_on_after(self.timeout_s) as scope_timer:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body = message.get("body", b"")
                total += len(body)
                if total > self.max_bytes:
                    await self._too_large(scope, receive, send)
                    return
                chunks.append(body)
                if not message.get("more_body"):
                    break
        if scope_timer.cancelled_caught:
            await JSONResponse(
                {"error": f"request body not received within {self.timeout_s:g} s"},
                status_code=408,
                headers={"connection": "close"},
            )(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await JSONResponse(
            {"error": f"request body over {self.max_bytes} bytes"}, status_code=413, headers={"connection": "close"}
        )(scope, receive, send)


_SESSION_HEADER = b"mcp-session-id"
_VERSION_HEADER = b"mcp-protocol-version"


def _opens_session(body: bytes) -> bool:
    """Whether a ``POST /mcp`` body is (or holds, in a batch) an ``initialize`` request.

    >>> _opens_session(b'{"jsonrpc": "2.0", "id": 1, "method": "initialize"}'), _opens_session(b'{"method": "tools/list"}')
    (True, False)
    >>> _opens_session(b'[{"method": "initialize"}]'), _opens_session(b'not json')
    (True, False)
    """
    try:
        msg = json.loads(body or b"null")
    except (ValueError, RecursionError):
        return False
    messages = msg if isinstance(msg, list) else [msg]
    return any(isinstance(m, dict) and m.get("method") == "initialize" for m in messages)


class SessionlessMcp:
    """ASGI middleware in front of the SDK's session-keeping ``/mcp``: what qmd's stateless
    Streamable HTTP answers (qmd's ``createMcpHandler``, ``src/mcp/server.ts``) for requests that
    open no session. A ``POST`` without ``Mcp-Session-Id`` that is not ``initialize`` is served by
    a sessionless manager (a fresh transport per request, a JSON reply); ``GET``/``DELETE`` without
    a session are **405**. ``initialize``, requests with a session id and 2026-era requests (a
    protocol version the SDK does not handshake) go to the SDK's app. The sessionless manager runs
    beside the app's lifespan."""

    def __init__(self, app: ASGIApp, server: Any, *, path: str = "/mcp", max_body_bytes: int = MAX_BODY_BYTES):
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        self.app, self.path = app, path
        self.manager = StreamableHTTPSessionManager(
            app=server,
            json_response=True,
            stateless=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=max_body_bytes,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            held: list[Message] = []

            async def hold_shutdown(message: Message) -> None:
                # the server stops waiting once shutdown is reported: report it after this manager stopped
                if message["type"].startswith("lifespan.shutdown."):
                    held.append(message)
                else:
                    await send(message)

            try:
                async with self.manager.run():
                    await self.app(scope, receive, hold_shutdown)
            finally:
                for message in held:
                    await send(message)
            return
        if scope["type"] != "http" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        if _SESSION_HEADER in headers:
            await self.app(scope, receive, send)
            return
        method = scope.get("method")
        if method in ("GET", "DELETE"):
            refusal = {"jsonrpc": "2.0", "error": {"code": -32000, "message": "Method not allowed."}, "id": None}
            await JSONResponse(refusal, status_code=405, headers={"allow": "POST"})(scope, receive, send)
            return
        if method != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []  # the body is in memory already (BodyLimit read it within its limits)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        version = headers.get(_VERSION_HEADER, b"").decode("latin-1")
        modern = bool(version) and version not in HANDSHAKE_PROTOCOL_VERSIONS  # the SDK's own sessionless path
        if modern or _opens_session(body):
            await self.app(scope, replay, send)
        else:
            await self.manager.handle_request(scope, replay, send)


def build_app(
    backend: McpBackend,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    allowed_origins: Sequence[str] | None = None,
    allowed_hosts: Sequence[str] | None = None,
    limits: HttpLimits | None = None,
) -> ASGIApp:
    """The ASGI app: ``/mcp`` (Streamable HTTP), ``/query`` (REST), ``/health``, behind the guard
    and the body limit (:class:`HttpLimits`)."""
    limits = limits or HttpLimits()
    gate = QueryGate(limits.max_queued_queries)
    mcp = build_server(backend, deadline_s=limits.query_timeout_s, gate=gate)
    # /health's own worker thread: anyio's default limiter (40 threads) is what queries fill
    health_limiter = anyio.CapacityLimiter(1)
    last_count: list[int | None] = [None]
    started = time.monotonic()

    async def health(request: Request) -> JSONResponse:
        def count() -> int | None:  # the index's own lock only (a running query holds the backend's), briefly
            idx = backend.index
            if not idx._lock.acquire(timeout=HEALTH_LOCK_WAIT_S):
                return last_count[0]  # a long statement holds the index: the last count read
            try:
                last_count[0] = int(idx.conn.execute("SELECT count(*) FROM documents WHERE active = 1").fetchone()[0])
            finally:
                idx._lock.release()
            return last_count[0]

        documents = await anyio.to_thread.run_sync(count, limiter=health_limiter)
        return JSONResponse(
            {
                "status": "ok",
                "uptime": int(time.monotonic() - started),  # qmd's: whole seconds since the server started
                "version": qmdlab.__version__,
                "documents": documents,
                "queries_in_flight": gate.in_flight,
            }
        )

    async def query(request: Request) -> JSONResponse:
        try:
            payload = json.loads(await request.body() or b"null")
        except RecursionError:
            return JSONResponse({"error": "request body is nested too deeply"}, status_code=400)
        except ValueError as err:
            return JSONResponse({"error": f"request body is not JSON: {err}"}, status_code=400)
        if not isinstance(payload, dict):
            return JSONResponse({"error": 'request body must be a JSON object like {"query": "..."}'}, status_code=400)
        if has_lone_surrogate(payload):
            return JSONResponse(
                {"error": "request body holds a lone surrogate escape (such as \\ud800): not Unicode text"},
                status_code=400,
            )
        ignored = ignored_keys(payload, QueryRequest.model_fields)  # ignored, as qmd's REST ignores them
        try:
            req = QueryRequest.model_validate(payload)
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in err.errors())
            return JSONResponse(
                {"error": f"invalid query request: {problems}", "accepted": sorted(QueryRequest.model_fields)},
                status_code=400,
            )
        if not gate.enter():  # a bounded queue: one more is told to come back, not parked on a thread
            return JSONResponse(
                {"error": gate.busy_message()}, status_code=503, headers={"retry-after": str(RETRY_AFTER_S)}
            )
        try:
            with anyio.fail_after(limits.query_timeout_s):
                _, data = await gate.run_in_thread(lambda: backend.query(**req.backend_kwargs()))
        except QmdlabError as err:
            return JSONResponse({"error": str(err)}, status_code=400)
        except UnicodeError as err:  # text that cannot be encoded, wherever it was met
            return JSONResponse(
                {"error": f"the request holds text that is not Unicode ({err.__class__.__name__})"}, status_code=400
            )
        except sqlite3.DatabaseError as err:  # a damaged index, or a search too large for SQLite
            from qmdlab.store.failures import as_user_error

            return JSONResponse({"error": str(as_user_error(err, backend.index))}, status_code=503)
        except TimeoutError:
            return JSONResponse(
                {"error": f"the query took longer than {limits.query_timeout_s:g} s; shorten it or retry"},
                status_code=503,
            )
        return JSONResponse(dict(data, ignored=ignored) if ignored else data)

    mcp.custom_route("/query", methods=["POST"])(query)
    mcp.custom_route("/search", methods=["POST"])(query)  # qmd's alias of /query (same body, same reply)
    mcp.custom_route("/health", methods=["GET"])(health)
    # Origin/Host checks are the guard's (403 + allow-lists), for every route alike.
    app = mcp.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host=host,
        max_request_body_size=limits.max_body_bytes,
        session_idle_timeout=limits.session_idle_s,
        max_sessions=limits.max_sessions,
    )
    app.state.backend = backend
    app.state.mcp = mcp
    sessionless = SessionlessMcp(app, mcp.session_manager.app, max_body_bytes=limits.max_body_bytes)
    limited = BodyLimit(sessionless, max_bytes=limits.max_body_bytes, timeout_s=limits.body_timeout_s)
    return OriginHostGuard(limited, host=host, port=port, allowed_origins=allowed_origins, allowed_hosts=allowed_hosts)


def header_timeout_protocol(timeout_s: float = HEADER_TIMEOUT_S) -> type:
    """uvicorn's h11 protocol, closing a connection that has not sent a whole request head within
    ``timeout_s`` seconds of connecting, or of its first byte after a kept-alive response."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):
        _head_timer = None
        _head_cycle = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            self._head_timer = self.loop.call_later(timeout_s, self._head_expired)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def data_received(self, data: bytes) -> None:
            if self._head_timer is None and (self.cycle is None or self.cycle.response_complete):
                self._arm()  # the next request of a kept-alive connection begins
            super().data_received(data)
            if self.cycle is not None and self.cycle is not self._head_cycle:  # a whole request head arrived
                self._head_cycle = self.cycle
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _head_expired(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol


def uvicorn_config(
    app: ASGIApp, *, host: str, port: int, log_level: str = "warning", limits: HttpLimits | None = None
) -> Any:
    """The uvicorn configuration of :func:`serve_http` (timeouts from ``limits``)."""
    import uvicorn

    limits = limits or HttpLimits()
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        http=header_timeout_protocol(limits.header_timeout_s),
        timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )


def serve_http(
    backend: McpBackend, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, log_level: str = "warning"
) -> None:
    """Serve until SIGINT/SIGTERM, then shut down gracefully (in-flight requests finish) and return.

    uvicorn re-raises the stop signal after its graceful shutdown, so the process would
    die "killed by SIGTERM"; a stop request is the normal end of this command, so here
    the command returns and exits 0.
    """
    import signal

    import uvicorn

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            captured = getattr(self, "_captured_signals", None)
            if sig in (signal.SIGINT, signal.SIGTERM) and captured and captured[-1] == sig:
                captured.pop()

    backend.warm()  # models load once, before the first request, and stay warm
    app = build_app(backend, host=host, port=port)
    _Server(uvicorn_config(app, host=host, port=port, log_level=log_level)).run()

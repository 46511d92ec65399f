"""HTTP front end: Streamable HTTP MCP at ``POST /mcp``, REST ``POST /query``, ``GET /health``.

Security (DNS-rebinding and cross-site protection for a server on a developer machine):

- it binds to ``127.0.0.1`` unless told otherwise;
- a request whose ``Origin`` header is present and not a loopback origin
  (``http(s)://localhost|127.0.0.1|[::1]`` on any port) gets **403**, unless the origin is
  listed in ``QMDLAB_ALLOWED_ORIGINS`` (comma-separated exact origins, or ``*``);
- a request whose ``Host`` header is not the bound address gets **403** (when bound to
  loopback, any loopback name with the bound port is accepted); more hosts can be allowed
  with ``QMDLAB_ALLOWED_HOSTS`` (comma-separated ``host`` or ``host:port``, or ``*``).
  Binding to a non-loopback address therefore needs ``QMDLAB_ALLOWED_HOSTS`` for any
  name other than that address.

>>> g = OriginHostGuard(None, host="127.0.0.1", port=8181, allowed_origins=(), allowed_hosts=())
>>> g.origin_ok("http://localhost:3000"), g.origin_ok("https://evil.example"), g.origin_ok(None)
(True, False, True)
>>> g.host_ok("127.0.0.1:8181"), g.host_ok("localhost:8181"), g.host_ok("evil.example:8181"), g.host_ok("127.0.0.1:9")
(True, True, False, False)
"""
from __future__ import annotations

import json
import os
from typing import Any, Sequence
from urllib.parse import urlsplit

import anyio
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

import qmdlab
from qmdlab.errors import QmdlabError
from qmdlab.mcp_server.engine import Engine
from qmdlab.mcp_server.server import QueryRequest, build_server

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8181


def _env_list(name: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in os.environ.get(name, "").split(",") if x.strip())


def _split_host(value: str) -> tuple[str, int | None]:
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8181
        end = value.find("]")
        host, rest = value[1:end], value[end + 1 :]
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if value.count(":") == 1:
        host, _, port = value.partition(":")
        return host, int(port) if port.isdigit() else None
    return value, None


def _is_loopback(host: str) -> bool:
    return host.strip("[]").lower() in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


class OriginHostGuard:
    """ASGI middleware: 403 for a foreign ``Origin`` or an unexpected ``Host`` (see module doc)."""

    def __init__(self, app: ASGIApp, *, host: str, port: int, allowed_origins: Sequence[str] | None = None,
                 allowed_hosts: Sequence[str] | None = None):
        self.app = app
        self.host, self.port = host.strip("[]").lower(), int(port)
        self.allowed_origins = tuple(allowed_origins if allowed_origins is not None else _env_list("QMDLAB_ALLOWED_ORIGINS"))
        self.allowed_hosts = tuple(allowed_hosts if allowed_hosts is not None else _env_list("QMDLAB_ALLOWED_HOSTS"))

    def origin_ok(self, origin: str | None) -> bool:
        if not origin:  # non-browser clients send none
            return True
        if "*" in self.allowed_origins or origin.rstrip("/") in {o.rstrip("/") for o in self.allowed_origins}:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and _is_loopback(parts.hostname)

    def host_ok(self, host_header: str | None) -> bool:
        if not host_header:
            return False
        if "*" in self.allowed_hosts:
            return True
        host, port = _split_host(host_header)
        for allowed in self.allowed_hosts:
            a_host, a_port = _split_host(allowed)
            if a_host == host and (a_port is None or a_port == port):
                return True
        if port not in (self.port, None) or (port is None and self.port not in (80, 443)):
            return False
        if host == self.host:
            return True
        return (_is_loopback(self.host) or self.host in ("0.0.0.0", "::")) and _is_loopback(host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            problem = None
            if not self.origin_ok(headers.get("origin")):
                problem = f"forbidden Origin {headers.get('origin')!r}; allow it with QMDLAB_ALLOWED_ORIGINS"
            elif not self.host_ok(headers.get("host")):
                problem = f"forbidden Host {headers.get('host')!r}; allow it with QMDLAB_ALLOWED_HOSTS"
            if problem:
                await PlainTextResponse(problem, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(engine: Engine, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
              allowed_origins: Sequence[str] | None = None, allowed_hosts: Sequence[str] | None = None) -> ASGIApp:
    """The ASGI app: ``/mcp`` (Streamable HTTP), ``/query`` (REST), ``/health``, behind the guard."""
    mcp = build_server(engine)

    async def health(request: Request) -> JSONResponse:
        def count() -> int:
            with engine.lock:
                return int(engine.index.documents().height)

        return JSONResponse({"status": "ok", "version": qmdlab.__version__, "documents": await anyio.to_thread.run_sync(count)})

    async def query(request: Request) -> JSONResponse:
        try:
            payload = json.loads(await request.body() or b"null")
        except ValueError as err:
            return JSONResponse({"error": f"request body is not JSON: {err}"}, status_code=400)
        if not isinstance(payload, dict):
            return JSONResponse({"error": "request body must be a JSON object like {\"query\": \"...\"}"}, status_code=400)
        try:
            req = QueryRequest.model_validate(payload)
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: "
                + ("unknown parameter" if e["type"] == "extra_forbidden" else e["msg"])
                for e in err.errors()
            )
            return JSONResponse({"error": f"invalid query request: {problems}",
                                 "accepted": sorted(QueryRequest.model_fields)}, status_code=400)
        try:
            _, data = await anyio.to_thread.run_sync(lambda: engine.query(**req.engine_kwargs()))
        except QmdlabError as err:
            return JSONResponse({"error": str(err)}, status_code=400)
        return JSONResponse(data)

    mcp.custom_route("/query", methods=["POST"])(query)
    mcp.custom_route("/health", methods=["GET"])(health)
    # Origin/Host checks are the guard's (403 + allow-lists), for every route alike.
    app = mcp.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host=host,
    )
    app.state.engine = engine
    app.state.mcp = mcp
    return OriginHostGuard(app, host=host, port=port, allowed_origins=allowed_origins, allowed_hosts=allowed_hosts)


def serve_http(engine: Engine, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, log_level: str = "warning") -> None:
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

    engine.warm()  # models load once, before the first request, and stay warm
    app = build_app(engine, host=host, port=port)
    _Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on")).run()

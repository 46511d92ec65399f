"""The HTTP server's limits, on a real uvicorn server with small limits: body size and time,
request-head time, idle MCP sessions, query deadline, and /health beside a running query."""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import httpx2 as httpx
import pytest

from qmdlab.mcp_server.backend import McpBackend
from qmdlab.mcp_server.http import HttpLimits, build_app, uvicorn_config

pytestmark = pytest.mark.slow  # starts a real uvicorn server

LIMITS = HttpLimits(
    max_body_bytes=4096,
    body_timeout_s=1.0,
    header_timeout_s=1.0,
    keep_alive_s=1,
    session_idle_s=1.0,
    max_sessions=2,
    query_timeout_s=1.0,
)
HOLD_S = 30.0
"""The longest a held query waits for the test to release it (a safety net, far past every deadline)."""
MCP_HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2025-06-18",
}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "limits", "version": "0"}},
}


class HeldBackend(McpBackend):
    """A query that holds the backend until the test releases it, as a long pipeline run does:
    ``holding`` is set once it has the backend's lock, ``released`` once it has given it back."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.holding, self.release, self.released = threading.Event(), threading.Event(), threading.Event()

    def hold_next(self) -> None:
        """Arm the events for the next query."""
        for event in (self.holding, self.release, self.released):
            event.clear()

    def end(self) -> None:
        """Release the held query and wait until it has given the backend back."""
        self.release.set()
        assert self.released.wait(HOLD_S), "the held query did not give the backend back"

    def query(self, *args, **kwargs):
        try:
            with self.lock:
                self.holding.set()
                self.release.wait(HOLD_S)
                return super().query(*args, **kwargs)
        finally:
            self.released.set()


@pytest.fixture(scope="module")
def limited(mcp_env, mcp_helpers):
    import uvicorn

    backend = HeldBackend(str(mcp_env.index_dir), preset="fake")
    backend.warm()
    port = mcp_helpers.free_port()
    app = build_app(backend, host="127.0.0.1", port=port, allowed_origins=(), allowed_hosts=(), limits=LIMITS)
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, limits=LIMITS))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    yield SimpleNamespace(url=f"http://127.0.0.1:{port}", port=port, backend=backend)
    server.should_exit = True
    thread.join(timeout=10)
    backend.index.close()


def _raw(port: int, data: bytes, wait_s: float) -> bytes:
    """Send ``data`` on a raw connection and read until the server closes it (or ``wait_s``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            out += b"<still open>"
        return out


def test_bodies_over_the_limit_get_413_on_every_endpoint(limited):
    big = b'{"query": "' + b"x" * LIMITS.max_body_bytes + b'"}'
    with httpx.Client(base_url=limited.url, timeout=10) as http:
        for path in ("/query", "/mcp"):
            r = http.post(path, content=big, headers=MCP_HEADERS)
            assert r.status_code == 413 and f"over {LIMITS.max_body_bytes} bytes" in r.text, (path, r.text)

        def chunked():  # no Content-Length: the limit holds on the bytes received
            for _ in range(8):
                yield b" " * 1024

        r = http.post("/query", content=chunked(), headers=MCP_HEADERS)
        assert r.status_code == 413


def test_a_request_head_or_body_that_never_finishes_is_cut_off(limited):
    start = time.monotonic()
    out = _raw(limited.port, b"POST /query HTTP/1.1\r\nHost: 127.0.0.1\r\n", wait_s=6)  # head never ends
    assert out == b"" and time.monotonic() - start < 5
    head = (
        f"POST /query HTTP/1.1\r\nHost: 127.0.0.1:{limited.port}\r\nContent-Type: application/json\r\n"
        'Content-Length: 100\r\n\r\n{"query"'
    ).encode()
    out = _raw(limited.port, head, wait_s=6)  # body never ends
    assert out.startswith(b"HTTP/1.1 408") and b"not received within 1 s" in out


def test_idle_mcp_sessions_expire_and_their_number_is_capped(limited):
    with httpx.Client(base_url=limited.url, timeout=10) as http:
        r = http.post("/mcp", json=INIT, headers=MCP_HEADERS)
        assert r.status_code == 200, r.text
        sid = r.headers["mcp-session-id"]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        assert http.post("/mcp", json=ping, headers=dict(MCP_HEADERS, **{"mcp-session-id": sid})).status_code == 200
        time.sleep(LIMITS.session_idle_s + 1.5)  # no request meanwhile (each one restarts the idle clock)
        r = http.post("/mcp", json=ping, headers=dict(MCP_HEADERS, **{"mcp-session-id": sid}))
        assert r.status_code == 404, r.text  # closed after session_idle_s without a request
        codes = [http.post("/mcp", json=INIT, headers=MCP_HEADERS).status_code for _ in range(LIMITS.max_sessions + 1)]
        assert codes[: LIMITS.max_sessions] == [200] * LIMITS.max_sessions and codes[-1] == 503


def test_health_answers_beside_a_running_query_which_gets_a_deadline(limited):
    backend, result = limited.backend, {}
    backend.hold_next()

    def slow():
        with httpx.Client(base_url=limited.url, timeout=HOLD_S) as http:
            result["r"] = http.post("/query", json={"query": "pasta", "limit": 1})

    t = threading.Thread(target=slow)
    t.start()
    try:
        assert backend.holding.wait(HOLD_S)  # the query now holds the backend
        h = httpx.get(f"{limited.url}/health", timeout=HOLD_S)
        assert h.status_code == 200 and not backend.released.is_set()  # answered while the query holds it
        t.join(HOLD_S)
        r = result["r"]  # the deadline answered while the query still held the backend
        assert r.status_code == 503 and f"longer than {LIMITS.query_timeout_s:g} s" in r.json()["error"]
        assert not backend.released.is_set()
    finally:
        backend.end()  # the abandoned run finishes before the next test


def test_query_bodies_that_used_to_fail_with_500_get_400(http_server):
    deep = b"[" * 100_000 + b"]" * 100_000
    with httpx.Client(base_url=http_server.url, timeout=30) as http:
        r = http.post("/query", content=deep, headers={"content-type": "application/json"})
        assert r.status_code in (400, 413) and "error" in r.json(), r.text
        r = http.post("/query", json={"query": "pasta", "tags": [f"t{i}" for i in range(1000)]})
        assert r.status_code == 400 and "at most" in r.json()["error"], r.text
        r = http.post("/query", json={"query": "pasta", "rerank": "yes"})
        assert r.status_code == 400 and "rerank" in r.json()["error"], r.text
        r = http.post("/query", content=b'{"query": "pasta"}', headers={"content-type": "text/plain"})
        assert r.status_code == 415


def _sse_json(r) -> dict:
    import json

    return json.loads(next(line[5:] for line in r.text.splitlines() if line.startswith("data:")))


def test_an_mcp_tool_call_past_the_deadline_gets_a_tool_error(limited):
    backend = limited.backend
    backend.hold_next()
    with httpx.Client(base_url=limited.url, timeout=HOLD_S) as http:
        r = http.post("/mcp", json=INIT, headers=MCP_HEADERS)
        headers = dict(MCP_HEADERS, **{"mcp-session-id": r.headers["mcp-session-id"]})
        http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        r = http.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "query", "arguments": {"query": "pasta"}},
            },
            headers=headers,
        )
        held = not backend.released.is_set()  # the answer came while the query still held the backend
        backend.end()  # the abandoned run finishes and frees the backend
        result = _sse_json(r)["result"]
        assert result["isError"] and f"longer than {LIMITS.query_timeout_s:g} s" in result["content"][0]["text"]
        assert held
        r = http.post("/mcp", json=INIT, headers=MCP_HEADERS)  # (the idle session has expired meanwhile)
        headers = dict(MCP_HEADERS, **{"mcp-session-id": r.headers["mcp-session-id"]})
        http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        r = http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "status", "arguments": {}}},
            headers=headers,
        )
        assert not _sse_json(r)["result"].get("isError")  # then the next call is served

"""The second probe's server findings, on real servers (a stdio child, uvicorn on loopback):

- a lone surrogate escape (``"\\ud800"``) silenced the stdio server (no reply, then a 601 s wait
  after stdin closed) and gave HTTP 500 with a traceback in ``/query``'s ``query`` or
  ``collections``;
- ``/health`` waited 20–24 s with more than 40 queries in flight (anyio's shared 40 threads);
- vector and hyde text had no length cap (1 MB cost 2.5–13 s);
- queued queries were unbounded.

Queries are held in flight by an event the test sets, never by sleeping.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import httpx2 as httpx
import pytest

from qmdlab.mcp_server.backend import McpBackend
from qmdlab.mcp_server.http import HttpLimits, build_app, uvicorn_config

pytestmark = pytest.mark.slow  # a subprocess start-up, real uvicorn servers

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bounds", "version": "0"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
SURROGATE_CALL = (
    '{"jsonrpc": "2.0", "id": 5, "method": "tools/call", '
    '"params": {"name": "search", "arguments": {"query": "pasta \\ud800"}}}'
)


def test_stdio_answers_a_lone_surrogate_and_exits_promptly_at_eof(mcp_env, mcp_helpers):
    frames = [
        json.dumps(INIT),
        json.dumps(INITIALIZED),
        SURROGATE_CALL,
        '{"jsonrpc": "2.0", "id": "\\udc80", "method": "ping"}',  # the id itself
        '{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"_meta": {"x": "\\ud800"}}}',
        json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
    ]
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "qmdlab.cli", "mcp"],
        input="\n".join(frames) + "\n",
        capture_output=True,
        text=True,
        env=dict(mcp_env.env, PATH=""),
        cwd=str(mcp_helpers.repo),
        timeout=120,
    )
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert took < 45, took  # 601 s before: a dropped id kept it waiting
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    errors = {r["id"]: r["error"]["code"] for r in replies if "error" in r}
    assert errors == {5: -32600, None: -32600, 7: -32600}, proc.stdout[-2000:]
    assert {r["id"] for r in replies if "result" in r} == {1, 9}


def test_http_query_with_a_lone_surrogate_is_400_not_500(http_server):
    with httpx.Client(base_url=http_server.url, timeout=30) as http:
        for body in (
            b'{"query": "pasta \\ud800"}',
            b'{"query": "pasta", "collections": ["\\ud800"]}',
            b'{"searches": [{"type": "vec", "query": "\\udfff"}]}',
            b'{"query": "pasta", "intent": "\\ud83d"}',
        ):
            r = http.post("/query", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 400, (body, r.status_code, r.text)
            assert "surrogate" in r.json()["error"] and "Traceback" not in r.text
        # the MCP endpoint: the SDK refuses the frame with a JSON-RPC error, never a 500
        mcp_headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        r = http.post("/mcp", content=SURROGATE_CALL.encode(), headers=mcp_headers)
        assert r.status_code < 500 and "Traceback" not in r.text, (r.status_code, r.text)


def test_vector_and_hyde_text_is_capped_like_keyword_text(http_server):
    big = "pasta " * 2000  # 12,000 characters
    with httpx.Client(base_url=http_server.url, timeout=30) as http:
        for body in (
            {"searches": [{"type": "vec", "query": big}]},
            {"searches": [{"type": "hyde", "query": big}]},
            {"query": "pasta", "intent": big},
            {"query": big},
        ):
            start = time.monotonic()
            r = http.post("/query", json=body)
            assert r.status_code == 400 and "over the limit of 10000" in r.json()["error"], r.text
            assert time.monotonic() - start < 2


class GatedBackend(McpBackend):
    """A query that waits for the test's event: as many queries in flight as the test sends."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.release = threading.Event()
        self.entered = 0
        self.cond = threading.Condition()

    def query(self, *args, **kwargs):
        with self.cond:
            self.entered += 1
            self.cond.notify_all()
        if not self.release.wait(timeout=120):
            raise RuntimeError("the test never released the query")
        return super().query(*args, **kwargs)

    def wait_entered(self, n: int, timeout: float = 30) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.entered >= n, timeout=timeout), (self.entered, n)


def _serve(mcp_env, mcp_helpers, limits: HttpLimits):
    import uvicorn

    backend = GatedBackend(str(mcp_env.index_dir), preset="fake")
    backend.warm()
    port = mcp_helpers.free_port()
    app = build_app(backend, host="127.0.0.1", port=port, allowed_origins=(), allowed_hosts=(), limits=limits)
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, limits=limits))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)

    def stop():
        backend.release.set()
        server.should_exit = True
        thread.join(timeout=10)
        backend.index.close()

    return SimpleNamespace(url=f"http://127.0.0.1:{port}", backend=backend, stop=stop)


def _post_query(url: str) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=60) as http:
        return http.post("/query", json={"query": "pasta", "limit": 1})


def test_health_answers_at_once_with_45_queries_in_flight(mcp_env, mcp_helpers):
    srv = _serve(mcp_env, mcp_helpers, HttpLimits(max_queued_queries=64))
    pool = ThreadPoolExecutor(max_workers=45)
    try:
        futures = [pool.submit(_post_query, srv.url) for _ in range(45)]
        srv.backend.wait_entered(40)  # anyio's 40 worker threads are all held by queries
        # the other 5 are admitted but wait for a thread: the server counts them once their requests arrive
        deadline = time.monotonic() + 30
        while httpx.get(f"{srv.url}/health", timeout=5).json()["queries_in_flight"] < 45:
            assert time.monotonic() < deadline, "the 45 queries never were in flight together"
        for _ in range(3):
            start = time.monotonic()
            h = httpx.get(f"{srv.url}/health", timeout=5)
            # without its own path /health queued behind the held threads for 20 s and more
            assert h.status_code == 200 and time.monotonic() - start < 2.0, time.monotonic() - start
        assert h.json()["documents"] == mcp_env.ndocs and h.json()["queries_in_flight"] == 45
        srv.backend.release.set()
        assert [f.result().status_code for f in futures] == [200] * 45
    finally:
        srv.stop()
        pool.shutdown(wait=True)


def test_a_full_query_queue_answers_503_with_retry_after(mcp_env, mcp_helpers):
    limit = 4
    srv = _serve(mcp_env, mcp_helpers, HttpLimits(max_queued_queries=limit))
    pool = ThreadPoolExecutor(max_workers=limit)
    try:
        futures = [pool.submit(_post_query, srv.url) for _ in range(limit)]
        srv.backend.wait_entered(limit)
        start = time.monotonic()
        r = _post_query(srv.url)
        assert r.status_code == 503 and time.monotonic() - start < 1.0, r.text
        assert r.headers["retry-after"] == "1" and "busy" in r.json()["error"]
        # an MCP tool call is held to the same bound: a tool error at once
        mcp_headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": "2025-06-18",
        }
        with httpx.Client(base_url=srv.url, timeout=30) as http:
            r = http.post("/mcp", json=INIT, headers=mcp_headers)
            headers = dict(mcp_headers, **{"mcp-session-id": r.headers["mcp-session-id"]})
            http.post("/mcp", json=INITIALIZED, headers=headers)
            call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "status", "arguments": {}}}
            r = http.post("/mcp", json=call, headers=headers)
            data = json.loads(next(line[5:] for line in r.text.splitlines() if line.startswith("data:")))
            assert data["result"]["isError"] and "busy" in data["result"]["content"][0]["text"]
        assert httpx.get(f"{srv.url}/health", timeout=5).status_code == 200
        srv.backend.release.set()
        assert [f.result().status_code for f in futures] == [200] * limit
        assert _post_query(srv.url).status_code == 200  # room again
    finally:
        srv.stop()
        pool.shutdown(wait=True)

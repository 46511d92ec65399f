"""The SDK's client over Streamable HTTP on loopback, the REST endpoint and the Origin/Host guard."""

from __future__ import annotations

import anyio
import httpx2 as httpx  # the HTTP client the mcp SDK ships with
import pytest

pytestmark = pytest.mark.slow  # starts a real uvicorn server and runs ~40 pipeline queries


def test_http_client_lists_and_calls_every_tool(http_server, mcp_env, mcp_helpers):
    from mcp import Client

    async def main():
        async with Client(f"{http_server.url}/mcp") as client:
            await mcp_helpers.check_all_tools(client, mcp_env)

    anyio.run(main)


def test_twenty_concurrent_queries_all_succeed(http_server):
    from mcp import Client

    queries = [f"{w} {i}" for i, w in enumerate(["pasta", "bread dough", "zebra install", "salt water"] * 5)]
    outcomes: dict[str, object] = {}

    async def one(client, q):
        outcomes[q] = await client.call_tool("query", {"query": q, "limit": 3})

    async def main():
        async with Client(f"{http_server.url}/mcp") as a, Client(f"{http_server.url}/mcp") as b:
            async with anyio.create_task_group() as tg:
                for i, q in enumerate(queries):
                    tg.start_soon(one, a if i % 2 else b, q)

    lab = http_server.backend.lab()
    calls_before = lab.reranker.calls
    anyio.run(main)
    # one warm pipeline served every request: same Lab, and its reranker did the work
    assert http_server.backend.lab() is lab and lab.reranker.calls > calls_before
    assert len(outcomes) == 20
    for q, r in outcomes.items():
        assert not r.is_error, (q, r.content)
        assert r.structured_content["query"] == q and r.structured_content["results"], q


def test_rest_query_and_health(http_server):
    with httpx.Client(base_url=http_server.url, timeout=30) as http:
        h = http.get("/health")
        assert h.status_code == 200 and h.json()["status"] == "ok" and h.json()["documents"] >= 4
        r = http.post("/query", json={"query": "knead dough memory", "limit": 2, "collections": ["notes"]})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["results"][0]["docno"] == "notes/cooking/bread.md" and len(body["results"]) <= 2
        r = http.post("/query", json={"searches": [{"type": "lex", "query": "tomato basil"}], "explain": True})
        assert r.status_code == 200 and r.json()["results"][0]["docno"] == "notes/cooking/pasta.md"
        assert "stages" in r.json()["results"][0]
        # qmd's POST /search: the same body and reply as /query, results in qmd's shape
        body = {"searches": [{"type": "lex", "query": "tomato basil"}], "collections": ["notes"], "limit": 2}
        r = http.post("/search", json=body)
        assert r.status_code == 200, r.text
        hit = r.json()["results"][0]
        assert hit["file"] == "qmd://notes/cooking/pasta.md" and hit["docid"].startswith("#")
        assert hit["context"] == "Kitchen recipes" and hit["snippet"].startswith("@@ -")
        assert {"docid", "file", "title", "score", "context", "line", "snippet"} <= set(hit)
        assert r.json()["results"] == http.post("/query", json=body).json()["results"]
        # unknown keys are ignored and named, as qmd's REST ignores them
        r = http.post("/query", json={"query": "pasta", "top_k": 3})
        assert r.status_code == 200 and r.json()["ignored"] == ["top_k"], r.text
        bad = http.post("/query", json={"query": "x", "limit": "3"})
        assert bad.status_code == 400 and "limit" in bad.json()["error"]
        assert set(bad.json()["accepted"]) == {
            "query",
            "searches",
            "collections",
            "intent",
            "limit",
            "minScore",
            "candidateLimit",
            "rerank",
            "expand",
            "budget",
            "explain",
            "tags",
            "preferTags",
            "tagLift",
        }  # the query tool's parameters
        r = http.post("/query", json={"searches": [{"type": "lex", "query": "x", "weight": 2}]})
        assert r.status_code == 200 and r.json()["ignored"] == ["searches[0].weight"], r.text
        assert http.post("/query", json={}).status_code == 400
        assert http.post("/query", content=b"not json", headers={"content-type": "application/json"}).status_code == 400
        r = http.post("/query", json={"query": "x", "collections": ["nope"]})
        assert r.status_code == 200 and r.json()["results"] == []
        assert "unknown collection(s): nope" in r.json()["notes"][0]["message"]


@pytest.mark.parametrize("path,method", [("/mcp", "POST"), ("/query", "POST"), ("/health", "GET")])
def test_foreign_origin_and_host_get_403(http_server, path, method):
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"} if path == "/mcp" else {"query": "pasta"}
    headers = {"accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=http_server.url, timeout=30) as http:
        r = http.request(
            method, path, json=body if method == "POST" else None, headers=dict(headers, origin="https://evil.example")
        )
        assert r.status_code == 403 and "forbidden Origin" in r.text
        r = http.request(
            method,
            path,
            json=body if method == "POST" else None,
            headers=dict(headers, host=f"evil.example:{http_server.port}"),
        )
        assert r.status_code == 403 and "forbidden Host" in r.text
        # loopback and allow-listed origins pass the guard
        for origin in (f"http://localhost:{http_server.port}", "http://trusted.example"):
            r = http.request(
                method, path, json=body if method == "POST" else None, headers=dict(headers, origin=origin)
            )
            assert r.status_code != 403, (origin, r.text)


def test_cli_http_server_starts_guards_and_stops_cleanly(mcp_env, mcp_helpers):
    """``qmdlab mcp --http`` as a user runs it: serves /health, guards Origin, exits 0 on SIGTERM."""
    import os
    import signal
    import subprocess
    import sys
    import time

    port = mcp_helpers.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "qmdlab.cli", "mcp", "--http", "--port", str(port)],
        env=dict(mcp_env.env, PATH=os.environ.get("PATH", "")),
        cwd=str(mcp_helpers.repo),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"{url}/health", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.communicate()[1][-2000:]
                assert time.monotonic() < deadline, "server did not come up"
                time.sleep(0.2)
        assert r.status_code == 200 and r.json()["documents"] == mcp_env.ndocs
        assert httpx.get(f"{url}/health", headers={"origin": "http://evil.example"}).status_code == 403
        r = httpx.post(f"{url}/query", json={"query": "pasta salt", "collections": ["notes"], "limit": 1}, timeout=30)
        assert r.status_code == 200 and r.json()["results"][0]["docno"] == "notes/cooking/pasta.md"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    assert f"http://127.0.0.1:{port}/mcp" in err

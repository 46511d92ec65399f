"""The MCP server and REST API answer qmd's clients as qmd 2.8.3's server does (``src/mcp/server.ts``):
sessionless HTTP ``/mcp``, unknown arguments ignored, numbers read as qmd reads them, an unknown
collection as an empty result, ``searches: []`` beside ``query``, a bare docid in ``get``, no
failed call for a pattern or resource that matches nothing, the best line below front matter,
``/health``'s ``uptime``, tool titles and contexts joined by a blank line."""

from __future__ import annotations

import json

import anyio
import httpx2 as httpx
import pytest

MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _rpc(method: str, params: dict | None = None, id: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params or {}}


def _reply(r) -> dict:
    """A JSON-RPC reply, sent as JSON or as one SSE event."""
    if r.headers.get("content-type", "").startswith("application/json"):
        return r.json()
    return json.loads(next(line[5:] for line in r.text.splitlines() if line.startswith("data:")))


# -- HTTP /mcp without a session (real HTTP on loopback) ------------------------------------------


def test_a_one_shot_post_is_answered_without_initialize_or_session(http_server):
    with httpx.Client(base_url=http_server.url, timeout=30) as http:
        r = http.post("/mcp", json=_rpc("tools/list"), headers=MCP_HEADERS)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("application/json") and "mcp-session-id" not in r.headers
        assert "query" in {t["name"] for t in r.json()["result"]["tools"]}
        call = _rpc("tools/call", {"name": "query", "arguments": {"searches": [{"type": "lex", "query": "pasta"}]}}, 2)
        r = http.post("/mcp", json=call, headers=MCP_HEADERS)
        assert r.status_code == 200 and "mcp-session-id" not in r.headers, r.text
        result = r.json()["result"]
        assert r.json()["id"] == 2 and not result.get("isError"), result
        assert result["structuredContent"]["results"][0]["docno"] == "notes/cooking/pasta.md"
        r = http.post("/mcp", json=_rpc("tools/call", {"name": "status", "arguments": {}}, 3), headers=MCP_HEADERS)
        assert r.status_code == 200 and r.json()["result"]["structuredContent"]["totalDocuments"] >= 4


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_get_and_delete_without_a_session_are_405(http_server, method):
    with httpx.Client(base_url=http_server.url, timeout=30) as http:
        r = http.request(method, "/mcp", headers={"accept": "application/json, text/event-stream"})
        assert r.status_code == 405 and "mcp-session-id" not in r.headers, r.text


def test_a_client_that_initializes_keeps_its_session(http_server):
    init = _rpc(
        "initialize",
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "session", "version": "0"}},
    )
    with httpx.Client(base_url=http_server.url, timeout=30) as http:
        r = http.post("/mcp", json=init, headers=dict(MCP_HEADERS, **{"mcp-protocol-version": "2025-06-18"}))
        assert r.status_code == 200 and r.headers.get("mcp-session-id"), r.text
        headers = dict(MCP_HEADERS, **{"mcp-session-id": r.headers["mcp-session-id"]})
        headers["mcp-protocol-version"] = "2025-06-18"
        http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        r = http.post("/mcp", json=_rpc("tools/call", {"name": "status", "arguments": {}}, 2), headers=headers)
        assert r.status_code == 200 and _reply(r)["result"]["structuredContent"]["totalDocuments"] >= 4
        assert http.delete("/mcp", headers=headers).status_code == 200  # the session ends, as the client asks
        r = http.post("/mcp", json=_rpc("tools/list", id=3), headers=headers)
        assert r.status_code == 404  # its id is gone


def test_the_sdk_streamable_http_client(http_server):
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.message import SessionMessage
    from mcp_types import JSONRPCRequest

    async def main():
        for mode in ("legacy", "auto"):  # the initialize handshake (a session), and 2026-07-28 (none)
            async with Client(f"{http_server.url}/mcp", mode=mode) as client:
                r = await client.call_tool("query", {"query": "pasta", "limit": 2.5, "collection": "notes"})
                assert not r.is_error and len(r.structured_content["results"]) <= 2, (mode, r.content)
                assert r.structured_content["ignored"] == ["collection"]
        # the SDK's transport alone: one request, no initialize, no session
        async with streamable_http_client(f"{http_server.url}/mcp", terminate_on_close=False) as (read, write):
            await write.send(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=7, method="tools/list", params={})))
            with anyio.fail_after(30):
                reply = await read.receive()
            assert reply.message.id == 7 and "query" in {t["name"] for t in reply.message.result["tools"]}

    anyio.run(main)


# -- the tools, in process ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small index: a document with front matter, six matching documents, two contexts on one."""
    import os

    from qmdlab.mcp_server.backend import McpBackend
    from qmdlab.store import Index

    root = tmp_path_factory.mktemp("qmdclients")
    kb = root / "kb"
    (kb / "sub").mkdir(parents=True)
    (kb / "fm.md").write_text("---\ntitle: Heron Field Notes\n---\n# Heron Field Notes\n\nA grey bird.\n")
    for i in range(5):
        (kb / f"h{i}.md").write_text(f"# Note {i}\n\nThe heron stands in the reeds, note {i}.\n")
    (kb / "sub" / "wader.md").write_text("# Wader\n\nA heron and an egret.\n")
    old = os.environ.get("QMDLAB_HOME")
    os.environ["QMDLAB_HOME"] = str(root / "home")
    try:
        idx = Index.open(str(root / "index"))
        idx.add_collection("kb", kb)
        idx.add_context("kb", "Bird notes")
        idx.add_context("kb/sub", "Wading birds")
        idx.update()
        idx.close()
        backend = McpBackend(str(root / "index"), preset="fake")
        yield backend
        backend.index.close()
    finally:
        if old is None:
            os.environ.pop("QMDLAB_HOME", None)
        else:
            os.environ["QMDLAB_HOME"] = old


def _call(backend, name: str, arguments: dict):
    """One tool call through the SDK's in-process client (the full MCP request path)."""
    from mcp import Client

    from qmdlab.mcp_server.server import build_server

    async def main():
        async with Client(build_server(backend)) as client:
            return await client.call_tool(name, arguments)

    return anyio.run(main)


LEX = {"searches": [{"type": "lex", "query": "heron"}], "rerank": False, "expand": False}


def _docnos(result) -> list[str]:
    assert not result.is_error, result.content
    return [x["docno"] for x in result.structured_content["results"]]


def test_unknown_arguments_are_ignored_and_named(small):
    r = _call(small, "query", dict(LEX, collection="kb", topK=3))
    assert _docnos(r) and r.structured_content["ignored"] == ["collection", "topK"]
    searches = [{"type": "lex", "query": "heron", "weight": 2}]
    r = _call(small, "query", {"searches": searches, "rerank": False})
    assert _docnos(r) and r.structured_content["ignored"] == ["searches[0].weight"]
    r = _call(small, "get", {"file": "kb/fm.md", "format": "md"})
    assert not r.is_error and r.structured_content["ignored"] == ["format"]
    r = _call(small, "status", {"verbose": True})
    assert not r.is_error and r.structured_content["ignored"] == ["verbose"]
    r = _call(small, "search", {"query": "heron"})
    assert "ignored" not in r.structured_content  # nothing to ignore, nothing said


def test_numbers_are_read_as_qmd_reads_them(small):
    assert len(_docnos(_call(small, "query", dict(LEX, limit=200)))) == 7  # no cap: every match
    assert _docnos(_call(small, "query", dict(LEX, limit=0))) == []  # slice(0, 0)
    assert len(_docnos(_call(small, "query", dict(LEX, limit=2.5)))) == 2  # slice truncates
    assert _docnos(_call(small, "query", dict(LEX, minScore=5))) == []  # no score reaches 5
    assert len(_docnos(_call(small, "query", dict(LEX, candidateLimit=1000)))) == 7
    assert len(_docnos(_call(small, "search", {"query": "heron", "limit": 2.5}))) == 2
    assert _call(small, "search", {"query": "heron", "limit": 0}).structured_content["results"] == []
    d = _call(small, "get", {"file": "kb/fm.md", "fromLine": 0, "maxLines": 1}).structured_content
    assert d["text"] == "1: ---"  # fromLine: Math.max(1, fromLine)
    d = _call(small, "get", {"file": "kb/fm.md", "maxLines": 0}).structured_content
    assert d["text"] == ""  # no line
    d = _call(small, "get", {"file": "kb/fm.md", "fromLine": 4, "maxLines": 1.9}).structured_content
    assert d["text"] == "4: # Heron Field Notes"  # slice(start, start + 1.9): one line
    for bad in ({"limit": "ten"}, {"limit": True}, {"minScore": "0.5"}):
        r = _call(small, "query", dict(LEX, **bad))
        assert r.is_error, bad  # not a number: still refused
    assert _call(small, "get", {"file": "kb/fm.md", "fromLine": "2"}).is_error


def test_rest_ignores_unknown_keys_and_reads_numbers_as_qmd(small):
    from starlette.testclient import TestClient

    from qmdlab.mcp_server.http import build_app

    with TestClient(build_app(small), base_url="http://127.0.0.1:8181") as http:
        r = http.post("/query", json=dict(LEX, top_k=3, limit=2.5))
        assert r.status_code == 200, r.text
        assert r.json()["ignored"] == ["top_k"] and len(r.json()["results"]) == 2
        r = http.post("/query", json=dict(LEX, collections=["nope"]))
        assert r.status_code == 200 and r.json()["results"] == []
        assert any("nope" in n["message"] for n in r.json()["notes"])
        assert http.post("/query", json=dict(LEX, limit="ten")).status_code == 400
        h = http.get("/health").json()
        assert h["status"] == "ok" and isinstance(h["uptime"], int) and h["uptime"] >= 0


def test_an_unknown_collection_is_an_empty_result_with_a_note(small):
    for name, args in (
        ("query", dict(LEX, collections=["nope"])),
        ("search", {"query": "heron", "collection": "nope"}),
        ("vsearch", {"query": "heron", "collections": ["nope"]}),
    ):
        r = _call(small, name, args)
        assert not r.is_error and r.structured_content["results"] == [], (name, r.content)
        assert any("unknown collection(s): nope" in n["message"] for n in r.structured_content["notes"]), name
    r = _call(small, "query", dict(LEX, collections=["kb", "nope"]))  # the known one still searched
    assert len(_docnos(r)) == 7


def test_empty_searches_beside_query_is_a_plain_query(small):
    r = _call(small, "query", {"query": "heron", "searches": [], "rerank": False, "expand": False})
    assert _docnos(r) and r.structured_content["query"] == "heron"


def test_a_bare_docid_in_get(small):
    docid = small.index.get("kb/fm.md").docid
    for ref in (docid, f"#{docid}", f"{docid}:4:1"):
        r = _call(small, "get", {"file": ref})
        assert not r.is_error and r.structured_content["docno"] == "kb/fm.md", (ref, r.content)
    assert _call(small, "get", {"file": f"{docid}:4:1"}).structured_content["text"] == "4: # Heron Field Notes"


def test_no_match_is_no_failed_call(small):
    r = _call(small, "multi_get", {"pattern": "kb/nothing-*.md"})
    assert not r.is_error and r.structured_content["documents"] == []
    assert [c.text for c in r.content] == ["Errors:\nNo files matched pattern: kb/nothing-*.md"]
    from mcp import Client

    from qmdlab.mcp_server.server import build_server

    async def read():
        async with Client(build_server(small)) as client:
            return await client.read_resource("qmd://kb/missing.md")

    (item,) = anyio.run(read).contents
    assert item.text == "Document not found: kb/missing.md"


def test_the_best_line_of_a_title_below_front_matter(small):
    body = small.index.get("kb/fm.md").body.split("\n")
    args = {"searches": [{"type": "lex", "query": "heron field notes"}], "rerank": False, "expand": False}
    hit = next(x for x in _call(small, "query", args).structured_content["results"] if x["docno"] == "kb/fm.md")
    assert hit["line"] == 4 and body[hit["line"] - 1] == "# Heron Field Notes"
    hit = next(
        x
        for x in _call(small, "search", {"query": "heron field notes"}).structured_content["results"]
        if x["docno"] == "kb/fm.md"
    )
    assert hit["line"] == 4


def test_titles_and_contexts_as_qmd(small):
    from mcp import Client

    from qmdlab.mcp_server.server import build_server

    async def tools():
        async with Client(build_server(small)) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    listed = anyio.run(tools)
    assert {n: listed[n].title for n in ("query", "get", "multi_get", "status")} == {
        "query": "Query",
        "get": "Get Document",
        "multi_get": "Multi-Get Documents",
        "status": "Index Status",
    }
    assert all(t.title for t in listed.values())
    both = "Bird notes\n\nWading birds"  # qmd joins a document's contexts with a blank line
    hit = next(x for x in _call(small, "query", LEX).structured_content["results"] if x["docno"] == "kb/sub/wader.md")
    assert hit["context"] == both
    r = _call(small, "get", {"file": "kb/sub/wader.md"})
    assert r.structured_content["context"] == both
    assert r.content[0].resource.text.startswith(f"<!-- Context: {both} -->\n\n1: # Wader")

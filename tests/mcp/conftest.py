"""A small temporary index (a 'notes' collection + the default corpus) served by the MCP tests.

Everything runs with the deterministic fake models (``QMDLAB_PRESET=fake``).
"""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CORPUS = REPO / "data" / "corpus"

GUIDE = textwrap.dedent("""\
    ---
    title: Setup Guide
    tags: [alpha]
    ---
    # Setup Guide

    Intro text about the zebrafish protocol.

    ## Install

    Run the installer.

    ### Linux

    apt install zebra-tools

    ### macOS

    brew install zebra-tools

    ## Usage

    Use zebra carefully.
    """)

NOTES = {
    "guide.md": GUIDE,
    "cooking/pasta.md": "# Pasta\n\nBoil water, add salt, cook the pasta al dente for a short time.\n\n## Sauce\n\n"
    "Tomato and basil.\n",
    "cooking/bread.md": "# Bread\n\nKnead the dough and let it rise overnight, from memory.\n",
    "big.md": "# Big\n\n" + "\n".join(f"line {i} filler text" for i in range(1, 2001)) + "\n",
}


def _embed_missing(idx, models) -> None:
    emb = models.embedder
    todo = idx.chunks_needing_vectors(emb.fingerprint)
    if todo.height:
        matrix = emb.embed_documents(list(zip(todo["title"].to_list(), todo["text"].to_list())))
        idx.store_vectors(todo["chunk_id"].to_list(), matrix, emb.fingerprint)


@pytest.fixture(scope="session")
def mcp_env(tmp_path_factory):
    from qmdlab.models import load_models
    from qmdlab.store import Index

    root = tmp_path_factory.mktemp("mcp")
    notes = root / "notes"
    for rel, text in NOTES.items():
        (notes / rel).parent.mkdir(parents=True, exist_ok=True)
        (notes / rel).write_text(text, encoding="utf-8")
    outside = root / "outside" / "secret.md"
    outside.parent.mkdir()
    outside.write_text("# Secret\n\nnever served\n", encoding="utf-8")
    home = root / "home"
    index_dir = root / "index"
    old_home = os.environ.get("QMDLAB_HOME")
    os.environ["QMDLAB_HOME"] = str(home)
    try:
        idx = Index.open(str(index_dir))
        idx.add_collection("notes", notes)
        idx.add_context("notes/cooking", "Kitchen recipes")
        has_corpus = any(DEFAULT_CORPUS.glob("**/*.md"))
        if has_corpus:
            idx.add_collection("default", DEFAULT_CORPUS)
        idx.update()
        _embed_missing(idx, load_models("fake"))
        ndocs = idx.documents().height
        idx.close()
    finally:
        if old_home is None:
            os.environ.pop("QMDLAB_HOME", None)
        else:
            os.environ["QMDLAB_HOME"] = old_home
    env = {
        "QMDLAB_HOME": str(home),
        "QMDLAB_INDEX": str(index_dir),
        "QMDLAB_PRESET": "fake",
        "PYTHONPATH": str(REPO),
    }
    return SimpleNamespace(
        root=root,
        notes=notes,
        outside=outside,
        index_dir=index_dir,
        home=home,
        env=env,
        has_corpus=has_corpus,
        ndocs=ndocs,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def http_server(mcp_env):
    """The real ASGI app served by uvicorn on a free loopback port, in a background thread."""
    import uvicorn

    from qmdlab.mcp_server.backend import McpBackend
    from qmdlab.mcp_server.http import build_app

    backend = McpBackend(str(mcp_env.index_dir), preset="fake")
    backend.warm()
    port = free_port()
    app = build_app(backend, host="127.0.0.1", port=port, allowed_origins=("http://trusted.example",), allowed_hosts=())
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    yield SimpleNamespace(url=f"http://127.0.0.1:{port}", port=port, backend=backend)
    server.should_exit = True
    thread.join(timeout=10)
    backend.index.close()


def stdio_params(mcp_env, *extra: str):
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "qmdlab.cli", "mcp", *extra],
        env=dict(mcp_env.env, PATH=os.environ.get("PATH", "")),
        cwd=str(REPO),
    )


TOOLS = {
    "search",
    "vsearch",
    "query",
    "get",
    "multi_get",
    "status",
    "outline",
    "read_section",
    "parent",
    "jump_to_ref",
    "read_chunks",
    "qmd_search",
    "qmd_vsearch",
    "qmd_query",
}


def text_of(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def check_all_tools(client, env) -> None:
    """List the tools and call each one on the test index; shared by the stdio and HTTP tests."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert t.annotations.read_only_hint is True and t.title, t.name
        assert t.input_schema.get("additionalProperties") is not False, t.name  # unknown keys ignored, as qmd
    assert {
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
    } == set(tools["query"].input_schema["properties"])
    assert "preferTags" in tools["query"].description and "front-matter tags" in tools["query"].description
    for name in ("get", "multi_get"):  # the caps on result text: default no cap
        assert tools[name].input_schema["properties"]["maxChars"]["default"] == 0, name
        assert "maxChars" in tools[name].description, name
    instructions = client.instructions
    assert f"over {env.ndocs} markdown document(s)" in instructions
    assert (
        "collection 'notes': 4 document(s)" in instructions
        and "context for notes/cooking: Kitchen recipes" in instructions
    )
    assert "no embedding yet" not in instructions  # every chunk was embedded

    # query: plain, explained (words of the fake embedder's vocabulary make the vector lists meaningful)
    r = await client.call_tool(
        "query", {"query": "macos brew install", "collections": ["notes"], "limit": 3, "explain": True}
    )
    assert not r.is_error, text_of(r)
    data = r.structured_content
    results = data["results"]
    assert 1 <= len(results) <= 3
    top = results[0]
    assert top["docno"] == "notes/guide.md" and top["rank"] == 1 and top["docid"]
    assert top["uri"] == "qmd://notes/guide.md" and top["title"] == "Setup Guide"
    assert "19: brew install zebra-tools" in top["snippet"] and top["line"] == 19  # qmd's best line, numbered
    assert (
        top["file"] == "qmd://notes/guide.md" and top["docid"].startswith("#") and top["snippet"].startswith("@@ -18,")
    )
    assert top["heading_path"] == ["Setup Guide", "Install", "macOS"] and top["address"] == "setup-guide/install/macos"
    assert top["parent"] == {"address": "setup-guide/install", "title": "Install", "summary": "Run the installer."}
    assert top["siblings"] == [{"address": "setup-guide/install/linux", "title": "Linux"}]
    assert [x["rank"] for x in results] == list(range(1, len(results) + 1))
    scores = [x["score"] for x in results]
    assert scores == sorted(scores, reverse=True)
    stages = top["stages"]
    for col in ("fused_rank", "final_score", "blend_weight", "rerank_score", "fused_score", "n_lists", "rrf_base"):
        assert col in stages, col
    assert abs(stages["final_score"] - top["score"]) < 1e-4 and stages["fused_rank"] == 1
    kinds = {(lst["source"], lst["query_type"], lst["rank"]) for lst in stages["lists"]}
    assert {("fts", "original", 1), ("vec", "original", 1)} <= kinds
    assert "timings" in data and "expansions" in data and data["notes"]
    assert "notes/guide.md" in text_of(r) and "Setup Guide > Install > macOS" in text_of(r)

    # query over the default corpus (shipped with the repository)
    if env.has_corpus:
        r = await client.call_tool(
            "query", {"query": "docker cleanup disk space", "collections": ["default"], "limit": 4}
        )
        assert not r.is_error, text_of(r)
        res = r.structured_content["results"]
        assert 1 <= len(res) <= 4 and all(x["docno"].startswith("default/") for x in res)
        assert all(x["uri"] == "qmd://" + x["docno"] and x["snippet"] for x in res)

    # query: typed searches, collection filter, no rerank; no stage scores without explain
    r = await client.call_tool(
        "query",
        {
            "searches": [{"type": "lex", "query": "pasta salt"}, {"type": "vec", "query": "pasta cooking time"}],
            "collections": ["notes"],
            "rerank": False,
        },
    )
    assert not r.is_error, text_of(r)
    res = r.structured_content["results"]
    assert res and res[0]["docno"] == "notes/cooking/pasta.md" and res[0]["context"] == "Kitchen recipes"
    assert all(x["collection"] == "notes" for x in res) and "stages" not in res[0]

    # query: tag filter (every tag required) and the tag rank-lift (as `qmdlab query --tag/--prefer-tag`)
    r = await client.call_tool("query", {"query": "pasta zebra install", "collections": ["notes"], "tags": ["alpha"]})
    assert not r.is_error, text_of(r)
    assert [x["docno"] for x in r.structured_content["results"]] == ["notes/guide.md"]
    r = await client.call_tool(
        "query",
        {
            "query": "pasta bread zebra",
            "collections": ["notes"],
            "rerank": False,
            "preferTags": ["alpha"],
            "tagLift": 10,
        },
    )
    assert not r.is_error, text_of(r)
    assert r.structured_content["results"][0]["docno"] == "notes/guide.md" and r.structured_content["tagLift"] == 10
    r = await client.call_tool("query", {"query": "pasta", "tagLift": -1})
    assert r.is_error and "tagLift" in text_of(r)

    # unknown parameters are ignored and named, an unknown collection holds no results (as qmd's)
    r = await client.call_tool("query", {"query": "pasta", "topK": 3})
    assert not r.is_error and r.structured_content["ignored"] == ["topK"] and "topK" in text_of(r)
    r = await client.call_tool("query", {"searches": [{"type": "sparse", "query": "x"}]})
    assert r.is_error and "searches" in text_of(r)
    r = await client.call_tool("query", {"query": "  "})
    assert r.is_error and "give a 'query' or 1-10 typed 'searches'" in text_of(r)
    r = await client.call_tool("query", {"query": "pasta", "limit": 0})
    assert not r.is_error and r.structured_content["results"] == []
    r = await client.call_tool("query", {"query": "pasta", "limit": "3"})
    assert r.is_error and "limit" in text_of(r)
    r = await client.call_tool("query", {"query": "pasta", "collections": ["nope"]})
    assert not r.is_error and r.structured_content["results"] == []
    assert "unknown collection(s): nope" in r.structured_content["notes"][0]["message"]

    # search (BM25 only) and vsearch (vectors only) under qmd's names, and qmd 1.x's aliases
    r = await client.call_tool("search", {"query": "zebra-tools brew", "collection": "notes", "limit": 2})
    assert not r.is_error, text_of(r)
    res = r.structured_content["results"]
    assert res[0]["docno"] == "notes/guide.md" and res[0]["uri"] == "qmd://notes/guide.md" and len(res) <= 2
    assert "brew install zebra-tools" in res[0]["snippet"] and r.structured_content["tool"] == "search"
    assert res[0]["heading_path"] == ["Setup Guide", "Install", "macOS"] and res[0]["parent"]["title"] == "Install"
    alias = await client.call_tool("qmd_search", {"query": "zebra-tools brew", "collection": "notes", "limit": 2})
    assert alias.structured_content["results"] == res
    r = await client.call_tool("vsearch", {"query": "macos brew install", "collections": ["notes"], "minScore": 0.01})
    assert not r.is_error, text_of(r)
    res = r.structured_content["results"]
    assert res[0]["docno"] == "notes/guide.md" and all(x["score"] >= 0.01 for x in res)
    assert r.structured_content["tool"] == "vsearch" and res[0]["chunk_id"] is not None
    r = await client.call_tool("search", {"query": "pasta", "collection": "nope"})
    assert not r.is_error and r.structured_content["results"] == [] and "unknown collection(s): nope" in text_of(r)
    r = await client.call_tool("vsearch", {"query": "pasta", "k": 3})
    assert not r.is_error and r.structured_content["ignored"] == ["k"]
    descriptions = {t.name: t.description for t in (await client.list_tools()).tools}
    assert "Use it when you know words" in descriptions["search"] and "conceptual" in descriptions["vsearch"]
    assert descriptions["qmd_vsearch"].startswith("Alias of `vsearch`")

    # get and multi_get accept qmd:// URIs
    r = await client.call_tool("get", {"file": "qmd://notes/guide.md:13:1"})
    assert not r.is_error and r.structured_content["text"] == "13: ### Linux"  # numbered by default, as qmd
    (item,) = r.content  # qmd's resource item
    assert (
        item.type == "resource"
        and str(item.resource.uri) == "qmd://notes/guide.md"
        and item.resource.text == "13: ### Linux"
    )
    r = await client.call_tool("multi_get", {"pattern": "qmd://notes/cooking/*.md"})
    assert {x["docno"] for x in r.structured_content["documents"]} == {
        "notes/cooking/pasta.md",
        "notes/cooking/bread.md",
    }
    r = await client.call_tool("get", {"file": "qmd://notes/..%2F..%2Fetc%2Fpasswd"})
    assert r.is_error and "'..' path components are not allowed" in text_of(r)

    # get: whole doc, :from:count, line numbers, #docid, #address
    r = await client.call_tool("get", {"file": "notes/guide.md:13:3", "lineNumbers": True})
    assert not r.is_error, text_of(r)
    d = r.structured_content
    assert (d["line_start"], d["line_end"], d["total_lines"]) == (13, 15, 23)
    assert d["text"] == "13: ### Linux\n14: \n15: apt install zebra-tools"
    docid = d["docid"]
    r = await client.call_tool("get", {"file": f"#{docid}", "fromLine": 21, "lineNumbers": False})
    assert r.structured_content["text"] == "## Usage\n\nUse zebra carefully."
    r = await client.call_tool("get", {"file": "guide.md#setup-guide/install/macos", "lineNumbers": False})
    assert r.structured_content["text"] == "### macOS\n\nbrew install zebra-tools\n"
    assert r.structured_content["heading_path"] == ["Setup Guide", "Install", "macOS"]
    r = await client.call_tool("get", {"file": "notes/guide.md", "maxChars": 60})
    d = r.structured_content
    assert not r.is_error and d["truncated"] and len(d["text"].split("\n… [")[0]) <= 60
    assert "more characters; read on with `qmdlab get notes/guide.md:" in d["text"]
    r = await client.call_tool("multi_get", {"pattern": "notes/cooking/*.md", "maxChars": 20})
    assert all(x["truncated"] and "more characters" in x["text"] for x in r.structured_content["documents"])

    # get: traversal and files outside every collection are refused, cleanly
    for bad in ("../../etc/passwd", "notes/../../etc/passwd", "/etc/passwd", str(env.outside)):
        r = await client.call_tool("get", {"file": bad})
        assert r.is_error, bad
        msg = text_of(r)
        assert "root:" not in msg and "never served" not in msg
        assert "'..' path components are not allowed" in msg or "no indexed document matches" in msg, msg

    # multi_get: glob with a size cap, and a list with a bad entry
    r = await client.call_tool("multi_get", {"pattern": "notes/**.md", "maxBytes": 2000})
    assert not r.is_error, text_of(r)
    d = r.structured_content
    assert {x["docno"] for x in d["documents"]} == {
        "notes/guide.md",
        "notes/cooking/pasta.md",
        "notes/cooking/bread.md",
    }
    assert [x["docno"] for x in d["skipped"]] == ["notes/big.md"] and "maxBytes=2000" in d["skipped"][0]["reason"]
    r = await client.call_tool("multi_get", {"pattern": "notes/guide.md, ../../etc/passwd", "maxLines": 2})
    d = r.structured_content
    assert [x["docno"] for x in d["documents"]] == ["notes/guide.md"]
    assert d["documents"][0]["text"].startswith("1: ---\n2: title: Setup Guide\n3: \n4: [... truncated")
    assert d["errors"][0]["ref"] == "../../etc/passwd"
    r = await client.call_tool("multi_get", {"pattern": "../*"})
    assert r.is_error

    # status
    r = await client.call_tool("status", {})
    d = r.structured_content
    assert d["documents"] == env.ndocs and d["chunks_without_vectors"] == 0
    assert {c["name"]: c["documents"] for c in d["collections"]}["notes"] == 4
    assert (d["totalDocuments"], d["needsEmbedding"], d["hasVectorIndex"]) == (env.ndocs, 0, True)  # qmd's keys
    assert {"name", "path", "pattern", "documents", "lastUpdated"} <= set(d["collections"][0])

    # navigation: outline → read_section → parent
    r = await client.call_tool("outline", {"file": "notes/guide.md"})
    secs = r.structured_content["sections"]
    assert [(s["address"], s["line_start"], s["line_end"]) for s in secs] == [
        ("", 1, 23),
        ("setup-guide", 5, 23),
        ("setup-guide/install", 9, 20),
        ("setup-guide/install/linux", 13, 16),
        ("setup-guide/install/macos", 17, 20),
        ("setup-guide/usage", 21, 23),
    ]
    assert sum(len(s["chunk_ids"]) for s in secs) >= 1
    r = await client.call_tool("read_section", {"file": "notes/guide.md", "address": "setup-guide/install"})
    assert r.structured_content["text"].startswith("## Install\n\nRun the installer.")
    assert r.structured_content["children"] == ["setup-guide/install/linux", "setup-guide/install/macos"]
    r = await client.call_tool("parent", {"file": "notes/guide.md", "address": "setup-guide/install/linux"})
    assert r.structured_content["address"] == "setup-guide/install" and r.structured_content["level"] == 2
    r = await client.call_tool("read_section", {"file": "notes/guide.md", "address": "nowhere"})
    assert r.is_error and "no section 'nowhere'" in text_of(r)
    r = await client.call_tool("parent", {"file": "notes/guide.md", "address": ""})
    assert r.is_error and "no parent" in text_of(r)

    # read_chunks: previews, one chunk's text, the chunk read in its parent section (parent backfill)
    r = await client.call_tool("read_chunks", {"file": "qmd://notes/guide.md", "previewChars": 30})
    assert not r.is_error, text_of(r)
    chunks = r.structured_content["chunks"]
    assert chunks and all(len(c["text"]) <= 30 for c in chunks) and chunks[0]["line_start"] == 5
    cid = chunks[0]["chunk_id"]
    r = await client.call_tool("read_chunks", {"file": "notes/guide.md", "chunkIds": [cid], "parent": "document"})
    d = r.structured_content
    assert (d["address"], d["highlight"][0], d["line_start"]) == ("", 5, 1) and "brew install zebra-tools" in d["text"]
    r = await client.call_tool("read_chunks", {"file": "notes/guide.md", "chunkIds": [10**9]})
    assert r.is_error and "not chunks of notes/guide.md" in text_of(r)
    r = await client.call_tool("read_chunks", {"file": "../../etc/passwd"})
    assert r.is_error and "'..' path components are not allowed" in text_of(r)

    # jump_to_ref: list a section's references, follow one (the default corpus refers to notes by path)
    if env.has_corpus:
        r = await client.call_tool("jump_to_ref", {"file": "default/runbooks/cert-renewal.md"})
        assert not r.is_error, text_of(r)
        assert [x["docno"] for x in r.structured_content["refs"]] == ["default/howto/nginx-reverse-proxy-tls.md"]
        r = await client.call_tool(
            "jump_to_ref", {"file": "default/runbooks/cert-renewal.md", "ref": "1", "maxChars": 200}
        )
        d = r.structured_content
        assert d["docno"] == "default/howto/nginx-reverse-proxy-tls.md" and d["truncated"] and d["address"] == ""
        assert "read on with `qmdlab get default/howto/nginx-reverse-proxy-tls.md:" in d["text"]
    r = await client.call_tool("jump_to_ref", {"file": "notes/guide.md", "ref": "1"})
    assert r.is_error and "has no cross-references" in text_of(r)

    # resources
    # documents are not listed one by one (qmd: a template, no list); they are read through it
    assert not (await client.list_resources()).resources
    templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
    assert "qmd://{collection}/{+path}" in templates
    rr = await client.read_resource("qmd://notes/cooking/bread.md")
    assert rr.contents[0].text.startswith("<!-- Context: Kitchen recipes -->\n\n1: # Bread")
    assert rr.contents[0].mime_type == "text/markdown"
    from mcp.shared.exceptions import MCPError

    for uri in ("qmd://notes/../../etc/passwd", "qmd://notes/..%2F..%2Fetc%2Fpasswd"):
        with pytest.raises(MCPError) as err:
            await client.read_resource(uri)
        assert "root:" not in str(err.value) and "never served" not in str(err.value)
    rr = await client.read_resource("qmd://outside/secret.md")  # qmd's answer for a path it does not serve
    assert [c.text for c in rr.contents] == ["Document not found: outside/secret.md"]


@pytest.fixture(scope="session")
def mcp_helpers():
    """The shared helpers (test modules cannot import conftest under --import-mode=importlib)."""
    return SimpleNamespace(
        repo=REPO, check_all_tools=check_all_tools, stdio_params=stdio_params, text_of=text_of, free_port=free_port
    )

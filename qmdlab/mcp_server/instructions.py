"""Server instructions written from the index itself.

An agent connecting to the server learns what it can search before its first call:
how many documents, which collections (and their contexts), whether some chunks still
lack embeddings (vector search then misses them), and how to use the tools.
"""

from __future__ import annotations

from typing import Any


def index_summary(backend: Any) -> dict[str, Any]:
    """Counts and settings of an :class:`~qmdlab.mcp_server.backend.McpBackend`'s index (JSON-able)."""
    idx = backend.index
    st = idx.status()
    try:
        contexts = [{"target": t, "text": x} for t, x in _pairs(idx.contexts())]
    except Exception:  # contexts are decoration; a store without them still serves
        contexts = []
    collections = [dict(c, uri=f"qmd://{c['name']}/") for c in st["collections"]]
    models: dict[str, Any] = {}
    missing = None
    ms = backend.models
    for role in ("embedder", "expander", "reranker"):
        m = getattr(ms, role, None)
        models[role] = getattr(m, "model_id", None) if m is not None else None
    embedder = getattr(ms, "embedder", None)
    if embedder is not None:
        try:
            missing = int(idx.chunks_needing_vectors(embedder.fingerprint).height)
        except Exception:  # a store error here must not take status down
            missing = None
    return {
        "index_dir": st["index"],
        "documents": int(st["documents"]),
        "chunks": int(st["chunks"]),
        "vectors": st.get("vectors", {}),
        "chunks_without_vectors": missing,
        "collections": collections,
        "contexts": contexts,
        "models": models,
        "preset": backend.preset,
    }


def _pairs(contexts: Any) -> list[tuple[str, str]]:
    if hasattr(contexts, "iter_rows"):  # a DataFrame
        return [(str(r[0]), str(r[1])) for r in contexts.iter_rows()]
    if isinstance(contexts, dict):
        return [(str(k), str(v)) for k, v in contexts.items()]
    out = []
    for item in contexts or []:
        if isinstance(item, dict):
            out.append((str(item.get("target")), str(item.get("text"))))
        elif hasattr(item, "target"):
            out.append((str(item.target), str(item.text)))
        else:
            out.append((str(item[0]), str(item[1])))
    return out


def build_instructions(backend: Any) -> str:
    """The server's ``instructions`` string for one backend's index."""
    s = index_summary(backend)
    lines = [
        f"qmdlab: hybrid search (BM25 + vectors, fused, reranked) over {s['documents']} markdown document(s) "
        f"in {len(s['collections'])} collection(s).",
    ]
    for c in s["collections"]:
        lines.append(f"- collection '{c['name']}': {c['documents']} document(s) (resources {c['uri']}<path>)")
    for ctx in s["contexts"][:20]:
        lines.append(f"- context for {ctx['target']}: {ctx['text']}")
    if s["documents"] == 0:
        lines.append("The index is empty: add a collection and run `qmdlab update` before searching.")
    if s["chunks_without_vectors"]:
        lines.append(
            f"Note: {s['chunks_without_vectors']} chunk(s) have no embedding yet, so vector search misses "
            "them (run `qmdlab embed`); keyword search still finds them."
        )
    lines += TOOL_GUIDE
    return "\n".join(lines)


#: How to use the MCP tools: the fixed part of the server's instructions (and of the agent skill).
TOOL_GUIDE = [
    "Search tools (qmd's names): `search` is fast BM25 keyword search (exact words, names, code), `vsearch` is "
    "vector search (the idea in your own words), `query` is the best and slowest: hybrid with expansion and "
    "rerank. "
    "`query` takes a plain `query`, or typed `searches` — lex: keywords, vec: a natural-language "
    "question, hyde: a short passage that would answer it; `tags` keeps documents with all those front-matter "
    "tags, `preferTags` ranks documents with any of them higher; `explain: true` returns each result's stage "
    "scores). "
    "Results carry a docno, a heading breadcrumb, a section `address`, the parent section's title and "
    "summary, and sibling sections.",
    "Read with `get` (path or #docid, optional `:from:count` suffix or `path#address`), `multi_get` (glob or "
    "comma-separated list), and move through a document with `outline`, `read_section` and `parent`; "
    "`read_chunks` skims a document's chunks (or reads a chunk hit in its parent section), `jump_to_ref` "
    "follows a cross-reference ('see howto/x.md') written in a section. "
    "`status` reports the index.",
]

SKILL_NAME = "qmdlab"


def skill_markdown() -> str:
    """The installable agent skill (``SKILL.md``: front matter ``name``/``description``, then how to
    search with the ``qmdlab`` CLI or its MCP tools); ``qmdlab skill show`` prints it."""
    guide = "\n".join(f"- {line}" for line in TOOL_GUIDE)
    return f"""---
name: {SKILL_NAME}
description: Search the user's local markdown notes and documents with qmdlab (BM25, vector and hybrid search with reranking); use it to find, read and cite notes before answering from memory.
---

# qmdlab: search local markdown

Find before you read: search, then open only the documents the results point at.

## From a shell

- `qmdlab search "exact words"` — BM25 keyword search (names, code, error messages); fast, no models.
- `qmdlab vsearch "the idea in other words"` — vector search.
- `qmdlab query "a question"` — hybrid: expansion, BM25 + vectors, fusion, rerank; the best and the slowest.
  Add `--json` (or `--files`) for machine-readable results, `-n 5` for fewer, `-c NAME` for one collection.
- `qmdlab get notes/file.md` (or `#docid`, or `file.md:40:20` for 20 lines from line 40) — read a result.
- `qmdlab get notes/file.md --outline`, then `qmdlab get notes/file.md#section/address` — one section.
- `qmdlab multi-get 'notes/2025-*.md'` — several documents; `qmdlab ls`, `qmdlab status` — what is indexed.

## Over MCP (`qmdlab mcp`, or `qmdlab mcp --daemon` for HTTP on port 8181)

{guide}

Cite what you use by its path (`collection/path.md`) or `qmd://collection/path.md`.
"""

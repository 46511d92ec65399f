"""The MCP server: read-only tools and document resources over one :class:`McpBackend`.

Built on the official SDK's :class:`mcp.server.mcpserver.MCPServer`. Every tool returns a
short human-readable text block plus ``structuredContent`` with the full details. As qmd's
(zod objects strip unknown keys), a tool ignores parameters it does not know, never failing on
them; its ``structuredContent`` then lists them under ``ignored``. qmd's numbers are read as qmd
reads them (:func:`qmdlab.mcp_server.backend.qmd_count`): any JSON number, a count truncated
toward zero; a value that is not a number is still an error. Every tool has a ``title`` (qmd's
where qmd has the tool). Documents are resources ``qmd://<collection>/<path>``.

The search tools carry qmd's names: ``search`` (BM25 only), ``vsearch`` (vectors only) and
``query`` (the full hybrid pipeline); qmd 1.x's prefixed names are registered as aliases
(:data:`ALIASES`), each described as such.

>>> from qmdlab.mcp_server.server import TOOL_NAMES, ALIASES
>>> TOOL_NAMES
('search', 'vsearch', 'query', 'get', 'multi_get', 'status', 'outline', 'read_section', 'parent', 'jump_to_ref', 'read_chunks')
>>> sorted(ALIASES)
['qmd_query', 'qmd_search', 'qmd_vsearch']
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import (
    CallToolResult,
    EmbeddedResource,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, model_validator

import qmdlab
from qmdlab.errors import QmdlabError
from qmdlab.mcp_server.backend import DEFAULT_MULTI_GET_MAX_BYTES, McpBackend
from qmdlab.mcp_server.instructions import build_instructions

# The parameter types several tools share (one description each, as the tools' schemas show them).
QmdNumber = Annotated[StrictFloat, Field(allow_inf_nan=False)]
"""qmd's ``z.number()``: any finite JSON number (``2.5``, ``0``, ``200``); a string or a boolean is refused."""
ResultLimit = Annotated[
    StrictFloat,
    Field(allow_inf_nan=False, description="Results to return (qmd: a fraction is truncated, 0 or less = none)."),
]
OneCollection = Annotated[str | None, Field(description="Restrict to one collection (qmd's parameter).")]
SomeCollections = Annotated[list[str] | None, Field(description="Restrict to these collections.")]
LineNumbers = Annotated[bool, Field(description="Prefix each line with its number ('N: line'; on by default, as qmd).")]


def _text_cap(text: str) -> str:
    """The description of ``get``'s and ``multi_get``'s ``maxChars``, a cap on ``text``."""
    return f"Cap on {text} (0 = no cap); a capped text ends with how much was left out and where to read on."


TOOL_NAMES = (
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
)
ALIASES = {"qmd_search": "search", "qmd_vsearch": "vsearch", "qmd_query": "query"}
"""qmd 1.x tool names → the tool they stand for (same parameters and results)."""
TITLES = {
    "query": "Query",
    "get": "Get Document",
    "multi_get": "Multi-Get Documents",
    "status": "Index Status",
    "search": "Search (BM25)",
    "vsearch": "Vector Search (Semantic)",
    "qmd_search": "Search (BM25)",
    "qmd_vsearch": "Vector Search (Semantic)",
    "qmd_query": "Hybrid Query (Best Quality)",
    "outline": "Document Outline",
    "read_section": "Read Section",
    "parent": "Parent Section",
    "jump_to_ref": "Jump to Reference",
    "read_chunks": "Read Chunks",
}
"""Each tool's ``title``: qmd 2.8.3's for query, get, multi_get and status (``src/mcp/server.ts``),
qmd 1.x's for search, vsearch and the ``qmd_*`` names; qmdlab's own tools name what they do."""
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class SubSearch(BaseModel):
    """One typed sub-query: ``lex`` (keywords → BM25), ``vec`` (question → vectors), ``hyde`` (passage → vectors).
    Unknown keys are ignored (as qmd's zod object strips them)."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["lex", "vec", "hyde"]
    query: Annotated[str, Field(min_length=1, description="The sub-query text.")]


class QueryRequest(BaseModel):
    """Arguments of the ``query`` tool and of ``POST /query``: unknown keys are ignored
    (:func:`ignored_keys` names them), numbers read as qmd reads them; ``searches: []`` beside a
    ``query`` is a plain query, non-empty ``searches`` beside one an error (as qmd's)."""

    model_config = ConfigDict(extra="ignore")
    query: str | None = None
    searches: Annotated[list[SubSearch] | None, Field(max_length=10)] = None
    collections: list[str] | None = None
    intent: str | None = None
    limit: QmdNumber = 10
    minScore: QmdNumber = 0.0
    candidateLimit: QmdNumber = 40
    rerank: StrictBool | None = None  # JSON true/false only: "yes" or 1 is refused, not read as true
    expand: StrictBool | None = None
    budget: Annotated[float | None, Field(ge=0.0)] = None
    explain: StrictBool = False
    tags: list[str] | None = None
    preferTags: list[str] | None = None
    tagLift: Annotated[int | None, Field(ge=0)] = None

    @model_validator(mode="after")
    def _need_something(self) -> QueryRequest:
        if not (self.query or "").strip() and not self.searches:
            raise ValueError("give a non-empty 'query' or 1-10 typed 'searches'")
        return self

    def backend_kwargs(self) -> dict[str, Any]:
        data = self.model_dump()
        data["searches"] = [s.model_dump() for s in self.searches or []]
        return data


def ignored_keys(arguments: Any, accepted: Any) -> list[str]:
    """The keys of ``arguments`` that are not parameters (``accepted``), and those of each typed
    search (``searches[i].key``) — what a tool or ``POST /query`` ignores, as qmd's schemas strip them.

    >>> ignored_keys({"query": "x", "collection": "a", "searches": [{"type": "lex", "query": "y", "weight": 2}]},
    ...              {"query", "searches"})
    ['collection', 'searches[0].weight']
    """
    if not isinstance(arguments, dict):
        return []
    out = sorted(str(k) for k in arguments if k not in accepted)
    searches = arguments.get("searches") if "searches" in accepted else None
    if isinstance(searches, list):
        for i, s in enumerate(searches):
            if isinstance(s, dict):
                out += [f"searches[{i}].{k}" for k in sorted(map(str, s)) if k not in SubSearch.model_fields]
    return out


def _result(text: str, data: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _resource(uri: str, text: str, name: str, title: str | None) -> EmbeddedResource:
    """qmd's ``resource`` content item: the document's ``qmd://`` URI, markdown text (its name and
    title ride in ``_meta``: the SDK's resource contents carry no such fields)."""
    meta = {"name": name, **({"title": title} if title else {})}
    return EmbeddedResource(
        type="resource",
        resource=TextResourceContents(uri=uri, mime_type="text/markdown", text=text, _meta=meta),
    )


def _document_result(text: str, data: dict[str, Any]) -> CallToolResult:
    """``get``: one ``resource`` item (as qmd's) with the structured details beside it."""
    item = _resource(data["uri"], text, data["docno"], data.get("title"))
    return CallToolResult(content=[item], structured_content=data)


def _documents_result(text: str, data: dict[str, Any]) -> CallToolResult:
    """``multi_get``: qmd's items — the errors as text, one ``resource`` per document, one text
    line per skipped document — with the structured details beside them. A pattern that matches
    nothing is no failed call, as qmd's: its only item is ``Errors:\nNo files matched pattern: …``."""
    from qmdlab.mcp_server.backend import with_context

    content: list[Any] = []
    if data["errors"]:
        content.append(
            TextContent(
                type="text",
                text="Errors:\n" + "\n".join(e.get("message") or f"{e['ref']}: {e['error']}" for e in data["errors"]),
            )
        )
    for d in data["documents"]:
        content.append(_resource(d["uri"], with_context(d["text"], d["context"]), d["docno"], d.get("title")))
    for sk in data["skipped"]:
        content.append(
            TextContent(
                type="text", text=f"[SKIPPED: {sk['docno']} - {sk['reason']}. Use 'get' with file=\"{sk['docno']}\".]"
            )
        )
    return CallToolResult(content=content or [TextContent(type="text", text=text)], structured_content=data)


def _user_errors(
    fn: Callable[..., tuple[str, dict[str, Any]]], result: Callable[..., CallToolResult] = _result
) -> Callable[..., CallToolResult]:
    """Turn :class:`QmdlabError` (and a damaged index's :class:`sqlite3.DatabaseError`) into a tool
    error whose message reaches the agent."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> CallToolResult:
        try:
            return result(*fn(*args, **kwargs))
        except QmdlabError as err:
            raise ToolError(str(err)) from err
        except sqlite3.DatabaseError as err:  # a damaged index: the rebuild instructions, not a trace
            from qmdlab.store.failures import as_user_error

            raise ToolError(str(as_user_error(err, getattr(getattr(fn, "__self__", None), "index", None)))) from err

    return wrapper


class LenientTool(Tool):
    """A tool that ignores the arguments it does not know, as qmd's (its zod schemas strip unknown
    keys), instead of failing on them; a ``CallToolResult`` then lists them in its
    ``structuredContent`` under ``ignored`` (and a text note closes its content)."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        accepted = {f.alias or name for name, f in self.fn_metadata.arg_model.model_fields.items()}
        ignored = ignored_keys(arguments, accepted)
        kept = {k: v for k, v in arguments.items() if k in accepted}
        result = await super().run(kept, context, convert_result=convert_result)
        if ignored and isinstance(result, CallToolResult) and not result.is_error:
            data = dict(result.structured_content or {}, ignored=ignored)
            note = TextContent(type="text", text=f"(ignored unknown parameter(s): {', '.join(ignored)})")
            result = result.model_copy(update={"structured_content": data, "content": [*result.content, note]})
        return result


def _with_deadline(tool: Tool, seconds: float, gate: Any = None) -> Tool:
    """Run ``tool`` on a worker thread and answer a tool error once it has run ``seconds``
    (the run is abandoned: its thread finishes on its own, the client is not kept waiting).
    With ``gate`` (:class:`qmdlab.mcp_server.http.QueryGate`), a call past the gate's number of
    calls in flight gets a tool error at once."""
    import anyio

    fn, name = tool.fn, tool.name

    async def run(**kwargs: Any) -> Any:
        call = functools.partial(fn, **kwargs)
        if gate is not None and not gate.enter():
            raise ToolError(gate.busy_message())
        try:
            with anyio.fail_after(seconds):
                if gate is not None:
                    return await gate.run_in_thread(call)
                return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        except TimeoutError:
            raise ToolError(f"{name} took longer than {seconds:g} s; shorten the request or retry") from None

    tool.fn, tool.is_async = run, True
    return tool


def build_server(backend: McpBackend, *, deadline_s: float | None = None, gate: Any = None) -> MCPServer:
    """An :class:`MCPServer` exposing ``backend`` (tools, resources, instructions); with
    ``deadline_s``, a tool call running longer gets a tool error instead of its answer, and with
    ``gate`` one past its number of calls in flight gets a tool error at once."""

    def query(
        query: Annotated[str | None, Field(description="A plain search query (expanded, fused and reranked).")] = None,
        searches: Annotated[
            list[SubSearch] | None,
            Field(
                max_length=10,
                description=(
                    "Typed sub-queries used instead of model expansion: lex = keywords (BM25), vec = a question "
                    "(vectors), hyde = a passage resembling the answer (vectors). Empty beside `query`: a plain query."
                ),
            ),
        ] = None,
        collections: SomeCollections = None,
        intent: Annotated[
            str | None, Field(description="What the searcher is trying to do; steers expansion and chunk choice.")
        ] = None,
        limit: ResultLimit = 10,
        minScore: Annotated[
            StrictFloat, Field(allow_inf_nan=False, description="Drop results scoring below this (0-1).")
        ] = 0.0,
        candidateLimit: Annotated[
            StrictFloat,
            Field(allow_inf_nan=False, description="Fused candidates passed to the reranker (qmd: default 40)."),
        ] = 40,
        rerank: Annotated[
            bool | None,
            Field(
                description=(
                    "Rerank candidates with the LLM reranker (default: the server's preset — off for offline/tiny, "
                    "on for qmd)."
                )
            ),
        ] = None,
        expand: Annotated[
            bool | None,
            Field(
                description=(
                    "Expand the query with the LLM expander (default: the server's preset — off for offline/tiny, "
                    "on for qmd)."
                )
            ),
        ] = None,
        budget: Annotated[
            float | None,
            Field(
                ge=0.0,
                description=(
                    "A deadline in seconds for the whole query: expansion or rerank that would not fit, judged from the "
                    "model's measured speed, is skipped before it starts (noted); default: the server's config."
                ),
            ),
        ] = None,
        explain: Annotated[bool, Field(description="Include every result's per-stage scores from the trace.")] = False,
        tags: Annotated[
            list[str] | None,
            Field(
                description=(
                    "Only documents carrying every one of these front-matter tags (a filter, as `qmdlab query --tag`)."
                )
            ),
        ] = None,
        preferTags: Annotated[
            list[str] | None,
            Field(
                description=(
                    "Move results carrying any of these front-matter tags up by tagLift places (no filter; as "
                    "`qmdlab query --prefer-tag`)."
                )
            ),
        ] = None,
        tagLift: Annotated[
            int | None,
            Field(
                ge=0,
                description=(
                    "Places a preferTags result moves up (default: the server's configured lift, else 3 with preferTags)."
                ),
            ),
        ] = None,
    ) -> CallToolResult:
        """Best-quality search: hybrid BM25 + vector retrieval and RRF fusion, plus query expansion and LLM
        rerank where the server's preset turns them on (offline: off, measured not to help; qmd: on) or
        `expand`/`rerank` ask for them (slowest); `budget` sets a deadline in seconds. Use it for important or vague questions; use `search` for known keywords and
        `vsearch` for a quick conceptual lookup. Typed `searches` (lex/vec/hyde) replace the expander.
        `tags` keeps only documents with all those front-matter tags; `preferTags` (with `tagLift`) ranks
        documents with any of them higher without dropping the others.

        Each result has its docno, #docid, score, snippet with line number, heading breadcrumb, the
        section address for read_section/parent, the parent section (title and a short summary) and the
        nearest sibling sections.
        """
        return _user_errors(backend.query)(
            query=query,
            searches=[s.model_dump() for s in searches or []],
            collections=collections,
            intent=intent,
            limit=limit,
            minScore=minScore,
            candidateLimit=candidateLimit,
            rerank=rerank,
            explain=explain,
            tags=tags,
            preferTags=preferTags,
            tagLift=tagLift,
            expand=expand,
            budget=budget,
        )

    def search(
        query: Annotated[
            str, Field(min_length=1, description="Keywords or a phrase to find (BM25; quote an exact phrase).")
        ],
        limit: ResultLimit = 10,
        minScore: Annotated[
            StrictFloat,
            Field(allow_inf_nan=False, description="Drop results whose normalised BM25 score is below this."),
        ] = 0.0,
        collection: OneCollection = None,
        collections: SomeCollections = None,
    ) -> CallToolResult:
        """Fast keyword search (BM25 full text, no model). Use it when you know words, names, code identifiers or
        phrases that appear in the document; use `vsearch` when you only know the idea, `query` for the best
        ranking."""
        return _user_errors(backend.single_leg)("search", query, limit, minScore, collection, collections)

    def vsearch(
        query: Annotated[
            str, Field(min_length=1, description="A natural-language description of what you are looking for.")
        ],
        limit: ResultLimit = 10,
        minScore: Annotated[
            StrictFloat, Field(allow_inf_nan=False, description="Drop results whose cosine similarity is below this.")
        ] = 0.0,
        collection: OneCollection = None,
        collections: SomeCollections = None,
    ) -> CallToolResult:
        """Semantic search (vector embeddings only, no expansion or rerank). Use it for conceptual questions whose
        wording may differ from the documents' ("how do I ..."); use `search` for exact terms, `query` for the
        best ranking."""
        return _user_errors(backend.single_leg)("vsearch", query, limit, minScore, collection, collections)

    def get(
        file: Annotated[
            str,
            Field(
                description="Path ('collection/dir/file.md' or collection-relative), '#docid' or a bare docid; "
                "optional ':from:count' suffix or '#address' section."
            ),
        ],
        fromLine: Annotated[
            StrictFloat | None,
            Field(allow_inf_nan=False, description="First line (1-based; below 1 reads from line 1, as qmd)."),
        ] = None,
        maxLines: Annotated[
            StrictFloat | None,
            Field(allow_inf_nan=False, description="Lines to return at most (0 or less: none, as qmd)."),
        ] = None,
        lineNumbers: LineNumbers = True,
        maxChars: Annotated[int, Field(ge=0, description=_text_cap("the returned text"))] = 0,
    ) -> CallToolResult:
        """Read one indexed document (or a line range, or one section). `maxChars` caps the text: past the cap it
        ends with a line saying how many characters were left out and the line to read on from."""
        return _user_errors(backend.get, _document_result)(file, fromLine, maxLines, lineNumbers, maxChars)

    def multi_get(
        pattern: Annotated[
            str,
            Field(description="A glob over docnos/paths ('notes/**/*.md') or a comma-separated list of paths/#docids."),
        ],
        maxLines: Annotated[
            StrictFloat | None, Field(allow_inf_nan=False, description="Lines per document at most.")
        ] = None,
        maxBytes: Annotated[
            StrictFloat,
            Field(allow_inf_nan=False, description="Skip documents larger than this (bytes; 0 = the default, as qmd)."),
        ] = DEFAULT_MULTI_GET_MAX_BYTES,
        lineNumbers: LineNumbers = True,
        maxChars: Annotated[int, Field(ge=0, description=_text_cap("each document's text"))] = 0,
    ) -> CallToolResult:
        """Read several indexed documents at once (size-capped; `maxChars` caps each document's text, saying how
        much was left out)."""
        return _user_errors(backend.multi_get, _documents_result)(
            pattern, maxLines, maxBytes, lineNumbers, max_chars=maxChars
        )

    def status() -> CallToolResult:
        """Index status: documents and chunks per collection, embedding gaps, models."""
        return _user_errors(backend.status)()

    def outline(
        file: Annotated[str, Field(description="Path or '#docid' of an indexed document.")],
    ) -> CallToolResult:
        """A document's heading tree: each section's address, lines and chunk ids."""
        return _user_errors(backend.outline)(file)

    def read_section(
        file: Annotated[str, Field(description="Path or '#docid' of an indexed document.")],
        address: Annotated[
            str, Field(description="Section address from outline or a search result ('' = whole document).")
        ],
    ) -> CallToolResult:
        """The full text of one section (with its subsections)."""
        return _user_errors(backend.read_section)(file, address)

    def parent(
        file: Annotated[str, Field(description="Path or '#docid' of an indexed document.")],
        address: Annotated[str, Field(description="A section address; its enclosing section is returned.")],
    ) -> CallToolResult:
        """The section enclosing a section (one level up the heading tree), with its full text."""
        return _user_errors(backend.parent)(file, address)

    def jump_to_ref(
        file: Annotated[
            str,
            Field(
                description="Path, '#docid' or qmd:// URI of the document holding the reference; "
                "optional '#address' for the section."
            ),
        ],
        ref: Annotated[
            str,
            Field(
                description="Which reference: its number (as listed with ref ''), its target "
                "('howto/x.md#setup') or its link text. '' lists the section's references."
            ),
        ] = "",
        address: Annotated[str | None, Field(description="Section address (overrides '#address' in file).")] = None,
        maxChars: Annotated[int, Field(ge=0, description="Cap on the returned text (0 = no cap).")] = 4000,
    ) -> CallToolResult:
        """Follow a cross-reference written in a section (markdown link, [[wiki link]], qmd:// URI or a '.md'
        path) to the section or document it names, and return that text. Use it when a hit says "see X"."""
        return _user_errors(backend.jump_to_ref)(file, ref, address, maxChars)

    def read_chunks(
        file: Annotated[str, Field(description="Path, '#docid' or qmd:// URI of an indexed document.")],
        chunkIds: Annotated[list[int] | None, Field(description="Only these chunks (a result's chunk_id).")] = None,
        full: Annotated[
            bool, Field(description="Each chunk's text (capped by maxChars) instead of a preview.")
        ] = False,
        previewChars: Annotated[int, Field(ge=1, le=4000, description="Characters of each preview.")] = 240,
        maxChars: Annotated[int, Field(ge=0, description="Cap on full or parent text (0 = no cap).")] = 4000,
        parent: Annotated[
            Literal["section", "document"] | None,
            Field(
                description=(
                    "With one chunk id: return the section (or whole document) holding that chunk, with the chunk's "
                    "lines as 'highlight' (read a chunk hit in its context)."
                )
            ),
        ] = None,
    ) -> CallToolResult:
        """A document's chunks as short previews with their lines and heading breadcrumbs (cheap skim before
        reading), the chosen chunks' text, or one chunk read in its parent section/document."""
        return _user_errors(backend.read_chunks)(file, chunkIds, full, previewChars, maxChars, parent)

    fns: dict[str, Callable[..., CallToolResult]] = {
        "search": search,
        "vsearch": vsearch,
        "query": query,
        "get": get,
        "multi_get": multi_get,
        "status": status,
        "outline": outline,
        "read_section": read_section,
        "parent": parent,
        "jump_to_ref": jump_to_ref,
        "read_chunks": read_chunks,
    }
    tools: list[Tool] = [
        LenientTool.from_function(fns[name], title=TITLES[name], annotations=READ_ONLY) for name in TOOL_NAMES
    ]
    for alias, target in ALIASES.items():
        tools.append(
            LenientTool.from_function(
                fns[target],
                name=alias,
                title=TITLES[alias],
                annotations=READ_ONLY,
                description=f"Alias of `{target}` (qmd 1.x's tool name; same parameters and results). "
                + (fns[target].__doc__ or "").split("\n")[0].strip(),
            )
        )
    if deadline_s:
        tools = [_with_deadline(t, deadline_s, gate) for t in tools]
    server: MCPServer = MCPServer(
        "qmdlab",
        title="qmdlab knowledge base",
        instructions=build_instructions(backend),
        version=qmdlab.__version__,
        tools=tools,
        log_level="WARNING",
    )
    _add_resources(server, backend)
    return server


def _add_resources(server: MCPServer, backend: McpBackend) -> None:
    """Documents are read through one resource template, ``qmd://{collection}/{+path}`` (as qmd's
    ``qmd://{+path}``: no list — documents are found with the search tools, so a server over 100k
    documents lists none of them at start-up). The text is numbered and opened by the document's
    context, as qmd serves it; a path that names no served document reads as qmd's text
    ``Document not found: PATH`` (not a protocol error)."""
    from qmdlab.mcp_server.backend import _number, with_context

    def read_doc(docno: str) -> str:
        try:
            with backend.lock:
                doc = backend.document(docno)
                context = backend._doc_info(doc)["context"]
        except QmdlabError:
            return f"Document not found: {docno}"
        body = doc.body or ""
        lines = body.split("\n")
        if len(lines) > 1 and lines[-1] == "":
            lines = lines[:-1]
        return with_context(_number(lines, 1), context)

    @server.resource(
        "qmd://{collection}/{+path}",
        name="document",
        title="QMD Document",
        mime_type="text/markdown",
        description="An indexed markdown document: qmd://<collection>/<path> (find documents with the search tools)",
    )
    def document(collection: str, path: str) -> str:
        from urllib.parse import unquote

        return read_doc(unquote(f"{collection}/{path}"))

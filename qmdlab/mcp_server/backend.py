"""The backend behind every front end of the MCP server (tools, REST, resources).

:class:`McpBackend` owns one open :class:`~qmdlab.store.Index`, one warm
:class:`~qmdlab.models.ModelSet` and one :class:`~qmdlab.pipeline.lab.Lab`, built once and
reused for every request (models stay loaded between requests; releasing idle model
contexts is the model layer's job). All index and model access goes through one lock:
the SQLite connection and llama.cpp contexts are not safe for concurrent use, so
concurrent requests are served one after another, never failed.

Each public method returns ``(text, data)``: a short human-readable summary for the
agent and a JSON-able dict with the full details (the MCP ``structuredContent``, and the
REST response body). Retrieval itself is qmdlab's: this module only adapts arguments,
checks that a requested file belongs to an indexed collection, and formats results.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from qmdlab.errors import DocumentNotFoundError, QmdlabError
from qmdlab.pipeline.results import SNIPPET_CAP_JSON, ResultRow, hit_line, located_rows
from qmdlab.pipeline.results import snippet as make_snippet
from qmdlab.search.hit_context import context_of
from qmdlab.search.navigate import cap_text
from qmdlab.store.outline import DocumentOutline, Section
from qmdlab.store.refs import glob_docnos, is_glob, line_window, parse_ref, resolve_ref, split_refs

if TYPE_CHECKING:
    from qmdlab.pipeline.lab import Lab

SCHEME = "qmd"
DEFAULT_MULTI_GET_MAX_BYTES = 65_536
"""qmd's ``DEFAULT_MULTI_GET_MAX_BYTES`` (64 KB): ``multi_get`` skips larger documents."""
DEFAULT_MULTI_GET_MAX_DOCS = 50
_NO_CONTEXT: dict[str, Any] = {"address": "", "heading_path": [], "parent": None, "siblings": []}
"""Hit context of a result whose document is gone (:meth:`qmdlab.search.hit_context.HitContext.as_dict`)."""


def resource_uri(docno: str) -> str:
    """``qmd://collection/path`` for a docno ``collection/path``.

    >>> resource_uri("default/howto/git.md")
    'qmd://default/howto/git.md'
    """
    return f"{SCHEME}://{docno}"


def _is_traversal(ref: str) -> bool:
    """True for refs that try to leave a collection (``..`` components, NUL bytes).

    >>> _is_traversal("../../etc/passwd"), _is_traversal("a/../b.md"), _is_traversal("a/b..md")
    (True, True, False)
    """
    if "\x00" in ref:
        return True
    parts = re.split(r"[\\/]+", ref)
    return any(part == ".." for part in parts)


def _number(lines: Sequence[str], first: int) -> str:
    """qmd's ``addLineNumbers``: ``N: line``, unpadded.

    >>> _number(["a", "b"], 9)
    '9: a\\n10: b'
    """
    return "\n".join(f"{first + i}: {line}" for i, line in enumerate(lines))


def with_context(text: str, context: str | None) -> str:
    """A document's text as qmd's ``get`` / ``multi_get`` / resources serve it: opened by an
    ``<!-- Context: ... -->`` line when the document has a context.

    >>> with_context("1: x", "Team notes"), with_context("1: x", None)
    ('<!-- Context: Team notes -->\\n\\n1: x', '1: x')
    """
    return f"<!-- Context: {context} -->\n\n{text}" if context else text


def qmd_count(value: Any, default: int) -> int:
    """A count (``limit``, ``candidateLimit``, ``maxLines``) as qmd uses it, in JavaScript's
    ``slice(0, n)``: any number, truncated toward zero (2.5 → 2); ``None`` → ``default``. No upper
    cap (qmd has none); 0 or less means none.

    >>> qmd_count(2.5, 10), qmd_count(200, 10), qmd_count(None, 10), qmd_count(0, 10), qmd_count(-3.5, 10)
    (2, 200, 10, 0, -3)
    """
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise QmdlabError(f"expected a number, got {value!r}")
    return math.trunc(value)


def _note(stage: str, message: str) -> dict[str, Any]:
    """One note of a reply's ``notes`` (the shape of the trace's notes table)."""
    return {"qid": "q", "stage": stage, "message": message}


def _records(df: Any) -> list[dict[str, Any]]:
    return [] if df is None else list(df.to_dicts())


def _results_text(head: str, results: list[dict[str, Any]]) -> str:
    """A tool's text answer: ``head``, then per result its rank, docno, docid, score, heading
    breadcrumb, title and indented snippet."""
    out = [head]
    for r in results:
        crumb = " > ".join(r["heading_path"])
        out.append(
            f"{r['rank']}. {r['docno']} ({r['docid']}) score {r['score']:.3f}"
            + (f"  [{crumb}]" if crumb else "")
            + (f"\n   {r['title']}" if r.get("title") else "")
        )
        if r.get("snippet"):
            out.append("   " + r["snippet"].replace("\n", "\n   "))
    return "\n".join(out)


def _json_safe(value: Any) -> Any:
    """NaN/inf (not JSON) become ``None``; containers are cleaned recursively.

    >>> _json_safe({"a": [1.0, float("nan")], "b": float("inf")})
    {'a': [1.0, None], 'b': None}
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def qmd_status(backend: Any) -> dict[str, Any]:
    """qmd's ``status`` keys: ``totalDocuments``, ``needsEmbedding`` (documents with a chunk that has
    no vector for the embedder; 0 without one), ``hasVectorIndex``."""
    idx = backend.index
    st = idx.status()
    needs = 0
    embedder = getattr(backend.models, "embedder", None)
    if embedder is not None:
        try:
            needs = int(idx.chunks_needing_vectors(embedder.fingerprint)["docno"].n_unique())
        except Exception:  # a store error here must not take status down
            needs = 0
    return {
        "totalDocuments": int(st["documents"]),
        "needsEmbedding": needs,
        "hasVectorIndex": bool(st.get("vectors")),
    }


class McpBackend:
    """One index + warm models + a pipeline, shared by all requests of a server.

    Parameters
    ----------
    index : Index, str, Path or None
        An open index, or a name/path for :meth:`Index.open` (``None``: ``$QMDLAB_INDEX``
        or ``default``).
    preset : str or None
        Model preset for :func:`qmdlab.models.load_models` (``None``: ``$QMDLAB_PRESET``,
        else the library default). ``fake`` gives the deterministic test models.
    config : PipelineConfig or None
        Pipeline constants; per-request options (limit, minScore, candidateLimit,
        rerank, preferTags/tagLift) are passed to :meth:`Lab.query` as overrides of it.
    models : ModelSet or None
        Models to use instead of ``load_models(preset)``.
    """

    def __init__(self, index: Any = None, *, preset: str | None = None, config: Any = None, models: Any = None):
        from qmdlab.store import Index

        self.index = index if isinstance(index, Index) else Index.open(index, create=False)  # serve, never create
        self.preset = preset or os.environ.get("QMDLAB_PRESET") or None
        self._config = config
        self._models = models
        self._given_models = models is not None and preset is None
        self._lab: Lab | None = None
        self.lock = threading.RLock()

    # -- lazily built, then kept warm ---------------------------------------------
    @property
    def config(self):
        if self._config is None:
            from qmdlab.pipeline.config import PipelineConfig

            self._config = PipelineConfig()
        return self._config

    @property
    def models(self):
        if self._models is None:
            from qmdlab.models import load_models

            self._models = load_models(self.preset) if self.preset else load_models()
        return self._models

    def lab(self):
        if self._lab is None:
            from qmdlab.pipeline.lab import Lab

            self._lab = Lab(self.index, self.models, self.config)
        return self._lab

    def warm(self) -> None:
        """Build the pipeline (and whatever the model layer loads eagerly) now."""
        with self.lock:
            self.lab()

    # -- collections and documents ------------------------------------------------
    def _collections(self) -> list[Any]:
        return list(self.index.collections())

    def _check_collections(self, names: Sequence[str] | None) -> tuple[list[str] | None, list[dict[str, Any]]]:
        """The named collections that exist (``None``: no filter) and a note on those that do not.
        As qmd's (a filter on a name no document carries), an unknown collection is no error: it
        holds no results, and with only unknown ones nothing is searched (an empty list)."""
        if not names:
            return None, []
        known = {c.name for c in self._collections()}
        unknown = [n for n in names if n not in known]
        if not unknown:
            return list(names), []
        note = _note(
            "request",
            f"unknown collection(s): {', '.join(unknown)} (no results from them); "
            f"indexed collections: {', '.join(sorted(known)) or 'none'}",
        )
        return [n for n in names if n in known], [note]

    def _inside_collections(self, path: Path) -> bool:
        try:
            target = Path(path).resolve()
        except OSError:
            return False
        for coll in self._collections():
            root = Path(coll.root).expanduser().resolve()
            if target == root or root in target.parents:
                return True
        return False

    def document(self, ref: str):
        """Resolve a ref (docno, collection-relative path, ``#docid``) to an indexed document.

        Refuses ``..`` components and anything that does not resolve to a document of an
        indexed collection; the text served is the index's copy, never a fresh read of an
        arbitrary file.
        """
        ref = (ref or "").strip()
        if not ref:
            raise QmdlabError("empty document reference; give a path like 'collection/dir/file.md' or a '#docid'")
        if _is_traversal(ref):
            raise QmdlabError(
                f"refusing {ref!r}: '..' path components are not allowed; only files of indexed collections are served"
            )
        try:
            doc = self.index.get(ref)
        except QmdlabError as err:
            raise QmdlabError(
                f"no indexed document matches {ref!r} ({err}); only files of indexed collections are served"
            ) from None
        except (KeyError, LookupError, FileNotFoundError, ValueError):
            raise QmdlabError(
                f"no indexed document matches {ref!r}; only files of indexed collections are served"
            ) from None
        abs_path = getattr(doc, "abs_path", None)
        if abs_path is not None and not self._inside_collections(Path(abs_path)):
            raise QmdlabError(f"refusing {ref!r}: it is outside every indexed collection")
        return doc

    def _doc_info(self, doc: Any) -> dict[str, Any]:
        collection, _, path = doc.docno.partition("/")
        info = {
            "docno": doc.docno,
            "docid": getattr(doc, "docid", None),
            "collection": collection,
            "path": path,
            "uri": resource_uri(doc.docno),
            "title": getattr(doc, "title", None) or "",
        }
        try:
            contexts = self.index.contexts_for(doc.docno)
        except Exception:  # contexts are optional decoration
            contexts = []
        info["context"] = self.index.context_text(doc.docno) if contexts else None  # qmd's: one string, or null
        info["contexts"] = list(contexts)
        return info

    # -- tools ----------------------------------------------------------------------
    def get(
        self,
        file: str,
        from_line: int | None = None,
        max_lines: int | None = None,
        line_numbers: bool = True,
        max_chars: int = 0,
    ) -> tuple[str, dict[str, Any]]:
        """One document, a line range or a section, resolved as ``qmdlab get`` resolves it
        (:func:`qmdlab.store.refs.resolve_ref`, :func:`~qmdlab.store.refs.line_window`: a section is
        shown whole, a line range applies to a document). The text is numbered ``N: line`` by
        default and opened by the document's context, as qmd's ``get``."""
        with self.lock:
            doc, ref = resolve_ref(self.document, file, QmdlabError)
            body = doc.body or ""
            sec = None
            if ref.address is not None:
                sec = DocumentOutline.parse(body, getattr(doc, "title", "") or "").section(ref.address)
            info = self._doc_info(doc)
        lines = body.split("\n")
        if lines and lines[-1] == "" and len(lines) > 1:
            lines = lines[:-1]
        # qmd's reading of the numbers (server.ts:435, store.ts getDocumentBody): a start below 1 is
        # line 1, a fraction is cut off, a count of 0 or less gives no lines
        start = qmd_count(from_line, 1) if from_line is not None else ref.start
        count = max(0, qmd_count(max_lines, 0)) if max_lines is not None else ref.n_lines
        if start is not None:
            start = max(1, start)
        try:
            first, last = line_window(len(lines), start, count, (sec.line_start, sec.line_end) if sec else None)
        except ValueError as err:
            raise QmdlabError(f"{doc.docno}: {err}") from None
        selected = lines[first - 1 : last]
        capped = cap_text(
            _number(selected, first) if line_numbers else "\n".join(selected), max_chars, read_on=(doc.docno, first)
        )
        text = capped.text
        shown = capped.text.count("\n") if capped.truncated else len(selected)  # the note is no line
        shown = min(shown, len(selected))
        data = dict(
            info,
            name=doc.docno,
            text=text,
            line_start=first,
            line_end=first + shown - 1,
            total_lines=len(lines),
            truncated=first > 1 or last < len(lines) or capped.truncated,
        )
        if sec is not None:
            data["address"] = sec.address
            data["heading_path"] = list(sec.heading_path)
        return with_context(text, info["context"]), data

    def multi_get(
        self,
        pattern: str,
        max_lines: int | None = None,
        max_bytes: int = DEFAULT_MULTI_GET_MAX_BYTES,
        line_numbers: bool = True,
        max_docs: int = DEFAULT_MULTI_GET_MAX_DOCS,
        max_chars: int = 0,
    ) -> tuple[str, dict[str, Any]]:
        pattern = (pattern or "").strip()
        if not pattern:
            raise QmdlabError(
                "empty pattern; give a glob like 'notes/**/*.md' or a comma-separated list of paths/#docids"
            )
        # qmd's numbers (server.ts:495, 520): maxBytes 0 is the default; maxLines 0 keeps no line
        max_bytes = qmd_count(max_bytes, DEFAULT_MULTI_GET_MAX_BYTES) or DEFAULT_MULTI_GET_MAX_BYTES
        max_lines = None if max_lines is None else max(0, qmd_count(max_lines, 0))
        with self.lock:
            if is_glob(pattern):
                if _is_traversal(pattern):
                    raise QmdlabError(f"refusing {pattern!r}: '..' path components are not allowed")
                refs = glob_docnos(self.index.documents()["docno"].to_list(), pattern)
                if not refs:  # qmd's answer: an error line, not a failed call (store.ts findDocuments)
                    message = f"No files matched pattern: {pattern}"
                    return f"0 document(s), 0 skipped, 1 error(s)\n--- {message}", {
                        "documents": [],
                        "skipped": [],
                        "errors": [{"ref": pattern, "error": "no indexed document matches", "message": message}],
                    }
            else:
                refs = split_refs(pattern)
            if len(refs) > max_docs:
                raise QmdlabError(
                    f"{len(refs)} documents match {pattern!r}; at most {max_docs} per call — narrow the pattern"
                )
            documents, skipped, errors = [], [], []
            for ref in refs:
                try:
                    doc = self.document(ref)
                except QmdlabError as err:
                    errors.append({"ref": ref, "error": str(err)})
                    continue
                body = doc.body or ""
                size = len(body.encode("utf-8"))
                info = self._doc_info(doc)
                if size > max_bytes:
                    skipped.append(dict(info, size=size, reason=f"larger than maxBytes={max_bytes}; use get"))
                    continue
                lines = body.split("\n")
                if lines and lines[-1] == "" and len(lines) > 1:
                    lines = lines[:-1]
                shown = lines[:max_lines] if max_lines is not None else lines
                text = "\n".join(shown)
                if len(shown) < len(lines):  # qmd's note, numbered with the text
                    text += f"\n\n[... truncated {len(lines) - len(shown)} more lines]"
                capped = cap_text(
                    _number(text.split("\n"), 1) if line_numbers else text, max_chars, read_on=(doc.docno, 1)
                )
                documents.append(
                    dict(
                        info,
                        size=size,
                        text=capped.text,
                        total_lines=len(lines),
                        truncated=len(shown) < len(lines) or capped.truncated,
                    )
                )
        parts = [f"--- {d['docno']} (#{d['docid']})\n{with_context(d['text'], d['context'])}" for d in documents]
        parts += [f"--- {s['docno']} skipped: {s['reason']}" for s in skipped]
        parts += [f"--- {e['ref']}: {e['error']}" for e in errors]
        summary = f"{len(documents)} document(s), {len(skipped)} skipped, {len(errors)} error(s)"
        return summary + "\n" + "\n".join(parts), {"documents": documents, "skipped": skipped, "errors": errors}

    def outline(self, file: str) -> tuple[str, dict[str, Any]]:
        with self.lock:
            doc = self.document(file)
            outline = self._outline(doc)
            info = self._doc_info(doc)
        data = dict(info, sections=[s.as_dict() for s in outline.sections])
        return f"{doc.docno}: {len(outline.sections) - 1} section(s)\n{outline.tree_text()}", data

    def _outline(self, doc: Any) -> DocumentOutline:
        outline = DocumentOutline.parse(doc.body or "", getattr(doc, "title", "") or "")
        try:
            chunks = self.index.chunks([doc.docno])
            outline.attach_chunks(zip(chunks["chunk_id"].to_list(), chunks["line_start"].to_list()))
        except QmdlabError:
            pass
        return outline

    def read_section(self, file: str, address: str) -> tuple[str, dict[str, Any]]:
        return self._section_reply(file, address, DocumentOutline.section, "(document)")

    def parent(self, file: str, address: str) -> tuple[str, dict[str, Any]]:
        return self._section_reply(file, address, DocumentOutline.parent, "(document root)")

    def _section_reply(
        self,
        file: str,
        address: str,
        find: Callable[[DocumentOutline, str], Section | None],
        root_crumb: str,
    ) -> tuple[str, dict[str, Any]]:
        """The section ``find(outline, address)`` of a document (the one at ``address``, or its
        parent) with its text; ``root_crumb`` names the document root, which has no heading path."""
        with self.lock:
            doc = self.document(file)
            outline = self._outline(doc)
            sec = find(outline, address)
            info = self._doc_info(doc)
        if sec is None:  # only a parent can be missing: the document root has none
            raise QmdlabError(f"{address!r} is the document root of {doc.docno}; it has no parent")
        text = outline.section_text(sec.address)
        data = dict(info, **sec.as_dict(), text=text)
        crumb = " > ".join(sec.heading_path) or root_crumb
        return f"{doc.docno} § {crumb} [{sec.address}] lines {sec.line_start}-{sec.line_end}\n\n{text}", data

    def jump_to_ref(
        self, file: str, ref: str | int, address: str | None = None, maxChars: int = 4000
    ) -> tuple[str, dict[str, Any]]:
        """Follow a cross-reference of a section (:func:`qmdlab.search.crossrefs.jump_to_ref`);
        ``ref`` is its number, its target or its link text; with ``ref`` empty the section's
        references are listed."""
        from qmdlab.search.crossrefs import jump_to_ref, section_refs

        base, addr, _, _ = parse_ref(file)
        addr = address if address is not None else addr
        with self.lock:
            doc = self.document(base)
            if ref is None or str(ref).strip() == "":
                refs = section_refs(self.index, doc.docno, addr or None)
                data = {"docno": doc.docno, "address": addr or "", "refs": [r._asdict() for r in refs]}
                lines = [
                    f"{r.n}. {r.target} -> "
                    + (
                        (r.docno + (f"#{r.address}" if r.address else ""))
                        if r.docno
                        else f"cannot follow ({r.problem})"
                    )
                    for r in refs
                ]
                return f"{len(refs)} reference(s) in {doc.docno}#{addr or ''}\n" + "\n".join(lines), data
            j = jump_to_ref(self.index, doc.docno, ref, address=addr or None, max_chars=int(maxChars))
            info = self._doc_info(self.document(j.docno))
        data = dict(
            info,
            address=j.address,
            heading_path=list(j.heading_path),
            line_start=j.line_start,
            line_end=j.line_end,
            text=j.text,
            truncated=j.truncated,
            ref=j.ref._asdict(),
            source={"docno": j.source, "address": j.source_address},
        )
        crumb = " > ".join(j.heading_path) or "(whole document)"
        return (
            f"{j.source}#{j.source_address} ref {j.ref.n} ({j.ref.target}) -> {j.docno} § {crumb} "
            f"[{j.address}] lines {j.line_start}-{j.line_end}\n\n{j.text}"
        ), data

    def read_chunks(
        self,
        file: str,
        chunkIds: Sequence[int] | None = None,
        full: bool = False,
        previewChars: int = 240,
        maxChars: int = 4000,
        parent: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """Chunk previews of a document (or the chosen chunks' text); with ``parent`` and one
        chunk id, the section or document holding that chunk, its lines given as ``highlight``."""
        from qmdlab.search.chunk_views import backfill, read_chunks

        base = parse_ref(file).name
        with self.lock:
            doc = self.document(base)
            info = self._doc_info(doc)
            if parent is not None:
                if not chunkIds or len(chunkIds) != 1:
                    raise QmdlabError("parent needs exactly one chunk id in chunkIds (the chunk to read in its parent)")
                b = backfill(self.index, doc.docno, int(chunkIds[0]), level=parent, max_chars=int(maxChars))
                data = dict(
                    info,
                    chunk_id=b.chunk_id,
                    level=b.level,
                    address=b.address,
                    heading_path=list(b.heading_path),
                    line_start=b.line_start,
                    line_end=b.line_end,
                    highlight=list(b.highlight),
                    text=b.text,
                    truncated=b.truncated,
                )
                crumb = " > ".join(b.heading_path) or "(whole document)"
                return (
                    f"{doc.docno} chunk {b.chunk_id} (lines {b.highlight[0]}-{b.highlight[1]}, marked *) in "
                    f"§ {crumb} lines {b.line_start}-{b.line_end}\n\n{b.marked()}"
                ), data
            rows = read_chunks(
                self.index,
                doc.docno,
                list(chunkIds) if chunkIds else None,
                preview_chars=int(previewChars),
                full=bool(full),
                max_chars=int(maxChars),
            )
        data = dict(info, chunks=[c.as_dict() for c in rows])
        out = [f"{doc.docno}: {len(rows)} chunk(s)"]
        for c in rows:
            crumb = " > ".join(c.heading_path)
            out.append(
                f"chunk {c.chunk_id} lines {c.line_start}-{c.line_end}"
                + (f" § {crumb}" if crumb else "")
                + f"\n   {c.text}"
            )
        return "\n".join(out), data

    def status(self) -> tuple[str, dict[str, Any]]:
        from qmdlab.mcp_server.instructions import index_summary

        with self.lock:
            summary = dict(qmd_status(self), **index_summary(self))
            for c in summary["collections"]:  # qmd's keys beside qmdlab's
                c.update(path=c.get("root"), pattern=c.get("mask"), lastUpdated=None)
        lines = [
            f"index: {summary['index_dir']}",
            f"total documents: {summary['totalDocuments']}, needs embedding: {summary['needsEmbedding']}, "
            f"vector index: {'yes' if summary['hasVectorIndex'] else 'no'}",
        ]
        lines += [f"documents: {summary['documents']}, chunks: {summary['chunks']}"]
        for c in summary["collections"]:
            lines.append(f"  {c['name']}: {c['documents']} docs at {c['root']}")
        if summary.get("chunks_without_vectors") is not None:
            lines.append(f"chunks without vectors: {summary['chunks_without_vectors']}")
        lines.append("models: " + ", ".join(f"{k}={v}" for k, v in summary["models"].items()))
        return "\n".join(lines), summary

    # -- single-leg searches (qmd's ``search`` / ``vsearch`` tools) ----------------------
    def single_leg(
        self,
        tool: Literal["search", "vsearch"],
        query: str,
        limit: int = 10,
        minScore: float = 0.0,
        collection: str | None = None,
        collections: Sequence[str] | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """One retrieval leg alone: ``search`` is BM25 only (no model), ``vsearch`` vectors only."""
        from qmdlab.pipeline.results import build_rows

        text = (query or "").strip()
        if not text:
            raise QmdlabError(f"{tool} needs a non-empty 'query'")
        from qmdlab.search.lexical import check_query_length

        check_query_length(text, f"{tool} query")  # before the backend's lock: never embed a megabyte
        run = {"search": self._bm25_hits, "vsearch": self._vector_hits}[tool]
        names = list(collections or []) + ([collection] if collection else [])
        n = qmd_count(limit, 10)  # qmd: slice(0, limit); 0 or less = no results
        with self.lock:
            colls, notes = self._check_collections(names)
            results: list[dict[str, Any]] = []
            if n > 0 and colls != []:
                hits = [h for h in run(text, colls, n) if h.score >= float(minScore)]
                rows = build_rows(self.index, hits, text)
                results = self._rows(rows)
        data = _json_safe({"query": text, "tool": tool, "collections": colls, "results": results, "notes": notes})
        head = f"{len(results)} result(s) for {text!r} ({tool})"
        return _results_text("\n".join([head, *(x["message"] for x in notes)]), results), data

    def _bm25_hits(self, text: str, colls: list[str] | None, n: int):
        """:func:`qmdlab.search.bm25_search` with the pipeline's BM25 knobs."""
        from qmdlab.search import bm25_search

        return bm25_search(self.index, text, limit=n, collections=colls, **self.config.lexical())

    def _vector_hits(self, text: str, colls: list[str] | None, n: int):
        """The query's embedding against the chunk vectors (one best chunk per document)."""
        from qmdlab.search.vector import vector_search

        emb = self.models.embedder
        if emb is None:
            raise QmdlabError("vsearch needs an embedding model; this server runs without one (use search)")
        text = text.encode("utf-8", "ignore").decode("utf-8")  # bytes that were not UTF-8 are dropped
        return vector_search(
            self.index,
            emb.embed_query(text),
            fingerprint=emb.fingerprint,
            limit=n,
            collections=colls,
            ann=self.config.ann(),
        )

    # -- query ------------------------------------------------------------------------
    def query(
        self,
        query: str | None = None,
        searches: Sequence[dict[str, str]] | None = None,
        collections: Sequence[str] | None = None,
        intent: str | None = None,
        limit: int = 10,
        minScore: float = 0.0,
        candidateLimit: int = 40,
        rerank: bool | None = None,
        explain: bool = False,
        tags: Sequence[str] | None = None,
        preferTags: Sequence[str] | None = None,
        tagLift: int | None = None,
        expand: bool | None = None,
        budget: float | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """The hybrid pipeline; ``tags`` are required front-matter tags (all of them, as
        ``qmdlab query --tag``), ``preferTags``/``tagLift`` the tag rank-lift (``--prefer-tag``/
        ``--tag-lift``: :meth:`~qmdlab.pipeline.config.PipelineConfig.tag_preference`).
        ``expand``/``rerank`` ``None`` = the server config's choice, else the preset's default
        (:func:`qmdlab.pipeline.stages.plan_stages`); the first note says which stages ran and why.
        ``budget``: a deadline in seconds for the whole query (``qmdlab query --budget``; ``None`` = the
        server config's ``budget_s``)."""
        searches = [dict(s) for s in (searches or [])]
        text = (query or "").strip()
        if not text and not searches:
            raise QmdlabError("give a 'query' or 1-10 typed 'searches' ({type: lex|vec|hyde, query: ...})")
        if text and searches:  # qmd's rule (src/mcp/server.ts); `searches: []` beside a query is a plain query
            raise QmdlabError("'query' and 'searches' are mutually exclusive; provide only one")
        if len(searches) > 10:
            raise QmdlabError(f"at most 10 searches per query, got {len(searches)}")
        for s in searches:
            if s.get("type") not in ("lex", "vec", "hyde") or not str(s.get("query", "")).strip():
                raise QmdlabError(f"bad search {s!r}: each needs type lex|vec|hyde and a non-empty query")
        from qmdlab.search.lexical import check_query_length

        # before the backend's lock: a megabyte of vector or hyde text is refused, not embedded
        check_query_length(text)
        check_query_length(intent, "intent")
        for s in searches:
            check_query_length(str(s["query"]), f"{s['type']} search")
        n, candidates = qmd_count(limit, 10), qmd_count(candidateLimit, 40)
        with self.lock:
            colls, request_notes = self._check_collections(collections)
            if tagLift is not None and int(tagLift) < 0:
                raise QmdlabError(f"tagLift must be 0 or more, got {tagLift}")
            from qmdlab.pipeline.stages import plan_stages, preset_name

            staged, plan = plan_stages(
                self.config, preset_name(self.preset, models_given=self._given_models), expand=expand, rerank=rerank
            )
            overrides = {
                "limit": max(1, n),
                "min_score": float(minScore),
                "candidate_limit": max(1, candidates),
                "expand": staged.expand,
                "rerank": staged.rerank,
                **({"budget_s": float(budget)} if budget is not None else {}),
                **self.config.tag_preference(list(preferTags or ()), tagLift),
            }
            cfg = self.config.replace(**overrides)  # what Lab.query runs with
            filters = None
            if tags:
                from qmdlab.search import SearchFilters

                filters = SearchFilters(tuple(tags), None, None)
            if n <= 0 or candidates <= 0 or colls == []:  # qmd: slice(0, 0), or a filter nothing passes
                trace, results = None, []
            else:
                trace = self._run(text, searches, colls, intent, overrides, filters, plan)
                words = " ".join(x for x in (text, *(s["query"] for s in searches)) if x)
                results = self._results(trace, words, intent, explain, cfg)
        data: dict[str, Any] = {
            "query": text or None,
            "searches": searches,
            "intent": intent,
            "collections": colls,
            "tags": list(tags or []),
            "preferTags": list(cfg.tags),
            "tagLift": cfg.tag_lift,
            "results": results,
            "notes": request_notes + _records(getattr(trace, "notes", None)),
        }
        if explain and trace is not None:  # the same parts as `qmdlab query --json`
            from qmdlab.pipeline.explain import trace_json

            parts = trace_json(trace)
            data["expansions"], data["timings"] = parts["expansions"], parts["timings"]
        data = _json_safe(data)
        head = text or "; ".join(f"{s['type']}: {s['query']}" for s in searches)
        return _results_text(f"{len(results)} result(s) for {head!r}", results), data

    def _run(
        self,
        text: str,
        searches: list[dict[str, str]],
        collections: list[str] | None,
        intent: str | None,
        overrides: dict[str, Any],
        filters: Any = None,
        plan: Any = None,
    ):
        """Run the pipeline through qmdlab's API (the only place that calls the Lab)."""
        return self.lab().query(
            text,
            intent=intent or None,
            qid="q",
            collections=collections,
            filters=filters,
            searches=[(s["type"], s["query"]) for s in searches] or None,
            plan=plan,
            **overrides,
        )

    def _rows(
        self, rows: Sequence[ResultRow], chunk_of: dict[str, int] | None = None, blocks: dict | None = None
    ) -> list[dict[str, Any]]:
        """qmd's result objects (:func:`qmdlab.output.result_dicts`, the CLI's ``--json`` rows: ``file``
        a ``qmd://`` URI, ``docid`` with ``#``, ``context`` a string or ``null``, ``line`` the best
        line, the ``@@`` snippet capped at 300 characters and numbered as qmd's), with qmdlab's fields
        beside them: rank, docno, collection, path, uri, chunk_id, the snippet's heading breadcrumb
        and section address, its parent and siblings (and ``stages`` with ``blocks``)."""
        from qmdlab.output import result_dicts

        rows = located_rows(self.index, rows)
        out: list[dict[str, Any]] = []
        for r, d in zip(rows, result_dicts(rows, cap=SNIPPET_CAP_JSON, line_numbers=True)):
            try:
                doc = self.index.get(r.docno)
            except DocumentNotFoundError:  # renamed or removed while the query ran (the trace notes it)
                continue
            info = self._doc_info(doc)
            body = doc.body or ""
            hit_ctx = context_of(DocumentOutline.parse(body, info["title"]), r.docno, hit_line(r)) if body else None
            d["context"] = info["context"]
            d.update(
                rank=len(out) + 1,
                collection=info["collection"],
                path=info["path"],
                uri=info["uri"],
                contexts=info["contexts"],
                chunk_id=r.chunk_id if r.chunk_id is not None else (chunk_of or {}).get(r.docno),
                snippet_line=r.line,
                **(hit_ctx.as_dict() if hit_ctx else _NO_CONTEXT),
            )
            if blocks is not None:
                d["stages"] = blocks.get(r.docno)
            out.append(d)
        return out

    def _results(
        self, trace: Any, query_text: str, intent: str | None, explain: bool, config: Any = None
    ) -> list[dict[str, Any]]:
        """The trace's finished rows in qmd's shape (:meth:`_rows`): snippet and line come from the
        pipeline's ``results`` table, score and order from its ``final`` table."""
        final = trace.final.sort("final_rank")
        if final.height == 0:
            return []
        finished = {r.docno: r for r in trace.result_rows()}
        chunk_of: dict[str, int] = {}  # the chunk each result was judged on, else its best list hit
        for table in (trace.rerank, trace.lists.sort("rank")):
            for row in table.iter_rows(named=True):
                if row["chunk_id"] is not None:
                    chunk_of.setdefault(row["docno"], int(row["chunk_id"]))
        blocks = None
        if explain:  # the explain block of `qmdlab query --json`, one per result, under the query's config
            from qmdlab.pipeline.explain import result_explain

            blocks = {docno: b for (_, docno), b in result_explain(trace, config).items()}
        rows = []
        for row in final.iter_rows(named=True):
            docno, score = row["docno"], float(row["final_score"])
            done = finished.get(docno)
            if done is None:  # not in the pipeline's results table: the same snippet rule
                try:
                    doc = self.index.get(docno)
                except DocumentNotFoundError:
                    continue
                snip = make_snippet(doc.body or "", " ".join(x for x in (query_text, intent) if x))
                ctx = self.index.context_text(docno)
                done = ResultRow(
                    docno, doc.docid, score, snip.line, doc.title, ctx, snip.text, best_line=snip.best_line
                )
            rows.append(done._replace(score=score))
        return self._rows(rows, chunk_of, blocks)

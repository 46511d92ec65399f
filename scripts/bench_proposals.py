"""Prototypes of fixes for rows that miss their goal, measured by ``scripts/bench.py`` next to the
real code so the owning area can adopt them with numbers in hand. Nothing in ``qmdlab`` imports
this module; each prototype is checked against the real function's output before it is timed.

- :func:`list_files_scandir` — ``qmdlab.store.scan.list_files`` without pathlib: one
  ``os.scandir`` walk (directory entries carry the file type, so only one ``stat`` per file), the
  masks and ignores as precompiled regexes, ``realpath`` only for symlinks (a regular file
  reached without crossing a symlink is inside the root by construction), and ``abs_path`` a
  ``str`` (``read_text`` then needs ``open(path, "rb")`` instead of ``path.read_bytes()``).
- :func:`vector_search_reduceat` — ``qmdlab.search.vector.vector_search`` with the per-document
  best chunk found by ``np.maximum.reduceat`` (one O(n) pass) instead of an O(n log n)
  ``lexsort`` of every chunk score, and the best row located only inside the top documents.
"""
from __future__ import annotations

import os
import re
from typing import Iterator

import numpy as np


def _glob_regex(pattern: str) -> str:
    """The regex :func:`qmdlab.store.scan.glob_match` builds (same translation), to compile once."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape("["))
                i += 1
            else:
                body = pattern[i + 1 : j].replace("\\", "\\\\")
                out.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
                i = j + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def list_files_scandir(coll, max_bytes: int = 5 * 1024 * 1024) -> Iterator:
    """Same entries as ``qmdlab.store.scan.list_files`` (sorted by relative path)."""
    from qmdlab.store.scan import FileEntry

    root = str(coll.root)
    real_root = os.path.realpath(root)
    want = re.compile("|".join(f"(?:{_glob_regex(m)})" for m in coll.masks))
    ign = [re.compile(_glob_regex(p)) for p in coll.ignore] + [re.compile(_glob_regex("**/" + p)) for p in coll.ignore]
    found: list[tuple[str, os.DirEntry]] = []
    stack = [("", root)]
    while stack:
        prefix, path = stack.pop()
        try:
            it = os.scandir(path)
        except OSError:
            continue
        with it:
            for e in it:
                rel = prefix + e.name
                try:
                    is_dir = e.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir:
                    stack.append((rel + "/", e.path))
                    continue
                if want.fullmatch(rel) and not any(r.fullmatch(rel) for r in ign):
                    found.append((rel, e))
    found.sort(key=lambda x: x[0])
    for rel, e in found:
        try:
            if e.is_symlink():
                real = os.path.realpath(e.path)
                if not os.path.isfile(real):
                    continue
                st = os.stat(e.path)
                inside = real.startswith(real_root + os.sep)
            else:
                if not e.is_file(follow_symlinks=False):
                    continue
                st = e.stat(follow_symlinks=False)
                inside = True
        except OSError:
            continue
        skip = None if inside else "symlink"
        if skip is None and st.st_size > max_bytes:
            skip = "large"
        # a str path: building 10k pathlib objects costs more than the stat calls; ``read_text``
        # would open it with ``open(path, "rb")`` (it is only read when mtime/size changed)
        yield FileEntry(rel, e.path, st.st_mtime, st.st_size, skip)


def vector_search_reduceat(idx, query_vec: np.ndarray, *, fingerprint: str, limit: int = 20) -> list:
    """``vector_search`` (no collection/filter restriction) with an O(n) best-chunk-per-document."""
    from qmdlab.search.hit import Hit
    from qmdlab.search.vector import _group_starts, top_k

    vm = idx.vector_matrix(fingerprint)
    q = np.asarray(query_vec, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(q))
    if norm > 0:
        q = q / norm
    scores = vm.matrix @ q
    starts = _group_starts(vm.docnos)
    best = np.maximum.reduceat(scores, starts).astype(np.float64)
    ends = np.append(starts[1:], len(scores))
    hits = []
    for rank, g in enumerate(top_k(best, limit), 1):
        s, e = int(starts[g]), int(ends[g])
        r = s + int(np.argmax(scores[s:e]))  # first row on ties, as best_per_document
        hits.append(Hit(vm.docnos[r], int(vm.chunk_ids[r]), rank, float(best[g]), float(best[g])))
    return hits


def bm25_search_topk_first(idx, text: str, *, limit: int = 20, mode: str = "or") -> list:
    """``bm25_search`` without collection/tag filters, joining ``documents`` only for the top
    ``limit + 1`` FTS5 rows instead of every matching row (the FTS table holds active documents
    only, so the join cannot drop rows). Exact, ties included: when the score at the cut is
    shared by the row after it, it falls back to the full query."""
    from qmdlab.search import bm25_search
    from qmdlab.search.hit import Hit, normalize_bm25
    from qmdlab.search.lexical import BM25_WEIGHTS, build_fts_query

    query = build_fts_query(text, mode)
    if query is None or limit <= 0:
        return []
    w = ", ".join(str(x) for x in BM25_WEIGHTS)
    sql = ("SELECT d.collection || '/' || d.path AS docno, f.s FROM (SELECT rowid AS id, "
           f"bm25(documents_fts, {w}) AS s FROM documents_fts WHERE documents_fts MATCH ? ORDER BY s LIMIT ?) f "
           "JOIN documents d ON d.id = f.id WHERE d.active = 1 ORDER BY f.s, docno")
    with idx._lock:
        rows = idx.conn.execute(sql, (query, limit + 1)).fetchall()
    if len(rows) > limit and rows[limit - 1][1] == rows[limit][1]:
        return bm25_search(idx, text, limit=limit, mode=mode)
    return [Hit(d, None, r, float(s), normalize_bm25(float(s))) for r, (d, s) in enumerate(rows[:limit], 1)]


class MemoEmbedder:
    """An embedder whose ``embed_query`` results are memoised in memory (LRU), so a repeated
    query and its repeated expansion lines cost no model call; ``embed_documents`` passes
    through. (A proposal for ``qmdlab.models.cached``: the LLM cache covers the expander and
    the reranker but not query embeddings, which dominate a warm repeated query.)"""

    def __init__(self, inner, maxsize: int = 1024):
        from functools import lru_cache

        self.inner = inner
        self.model_id, self.fingerprint, self.dim = inner.model_id, inner.fingerprint, inner.dim
        self._query = lru_cache(maxsize=maxsize)(inner.embed_query)

    def embed_query(self, text: str) -> np.ndarray:
        return self._query(text).copy()

    def embed_documents(self, docs):
        return self.inner.embed_documents(docs)

    def __getattr__(self, name):
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

"""Exact vector search: cosine top-k over the index's in-memory float32 matrix.

The matrix rows are L2-normalised (see :meth:`qmdlab.store.Index.vector_matrix`), so cosine
similarity is one matrix-vector product. Each document is represented by its best chunk;
the top ``limit`` documents are picked with ``argpartition`` (ties: docno order).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from qmdlab.errors import DimensionMismatchError, StoreError
from qmdlab.search.filters import SearchFilters
from qmdlab.search.hit import Hit

if TYPE_CHECKING:
    from qmdlab.search.ann import AnnConfig
    from qmdlab.store import Index


class DocBest(NamedTuple):
    """Per-document best row: ``rows[i]`` is the matrix row of document ``i``'s best chunk."""

    rows: np.ndarray
    scores: np.ndarray


def best_per_document(scores: np.ndarray, starts: np.ndarray) -> DocBest:
    """Best row of each contiguous group (groups begin at ``starts``); first row on ties.

    >>> best_per_document(np.array([0.1, 0.9, 0.9, 0.2, -1.0]), np.array([0, 3]))
    DocBest(rows=array([1, 3]), scores=array([0.9, 0.2]))
    """
    n = len(scores)
    group = np.zeros(n, dtype=np.int64)
    group[starts[1:]] = 1
    group = np.cumsum(group)
    order = np.lexsort((np.arange(n), -scores, group))  # by group, score desc, row asc
    first = np.ones(n, dtype=bool)
    first[1:] = group[order][1:] != group[order][:-1]
    rows = order[first]
    return DocBest(rows, scores[rows])


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, best first, lower index first on ties.

    >>> top_k(np.array([0.2, 0.9, 0.5, 0.9]), 3)
    array([1, 3, 2])
    """
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    part = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    # argpartition may cut a tie arbitrarily: widen to every row tied with the k-th score
    kth = scores[part].min()
    cand = np.flatnonzero(scores >= kth)
    order = cand[np.lexsort((cand, -scores[cand]))]
    return order[:k]


_STARTS: dict[int, tuple[object, np.ndarray]] = {}


def _group_starts(docnos: list[str]) -> np.ndarray:
    key = id(docnos)
    hit = _STARTS.get(key)
    if hit is not None and hit[0] is docnos:
        return hit[1]
    starts = np.array([i for i in range(len(docnos)) if i == 0 or docnos[i] != docnos[i - 1]], dtype=np.int64)
    _STARTS.clear()
    _STARTS[key] = (docnos, starts)
    return starts


def allowed_docnos(idx: Index, collections: Iterable[str] | None, filters: SearchFilters | None) -> set[str] | None:
    """Docnos passing the collection and metadata filters; ``None`` means no restriction (no
    collection given and none excluded from unscoped searches)."""
    if collections is None:
        collections = idx.default_collections()
    if collections is None and (filters is None or filters.empty):
        return None
    where, params = idx._coll_clause(collections)
    fsql, fparams = (filters or SearchFilters()).sql("d")
    with idx._lock:
        rows = idx.conn.execute(
            f"SELECT d.collection || '/' || d.path FROM documents d WHERE d.active = 1{where}{fsql}",
            [*params, *fparams],
        ).fetchall()
    return {r[0] for r in rows}


def vector_search(
    idx: Index,
    query_vec: np.ndarray,
    *,
    fingerprint: str,
    limit: int = 20,
    collections: Iterable[str] | None = None,
    filters: SearchFilters | None = None,
    ann: AnnConfig | None = None,
) -> list[Hit]:
    """Top documents by the cosine similarity of their best chunk to ``query_vec``.

    Parameters
    ----------
    idx : qmdlab.store.Index
    query_vec : numpy.ndarray
        Query embedding, shape ``(dim,)`` (normalised here).
    fingerprint : str
        The embedder fingerprint the chunk vectors were stored under.
    limit : int
        Maximum number of documents.
    collections, filters
        As in :func:`qmdlab.search.bm25_search`.
    ann : AnnConfig, optional
        Take candidates from an HNSW graph (:mod:`qmdlab.search.ann`, needs ``qmdlab[ann]``) instead
        of scoring every chunk: approximate (recall@10 against exact is measured in README "Scaling
        up"). Each candidate document's best chunk is then scored exactly, so a document found gets
        the same chunk and score (to float32 rounding) as in exact search. With ``collections`` or
        ``filters``, and when ``limit`` asks for half the chunks or more, the search stays exact
        (the graph covers the whole index). ``None`` (default): exact.

    Returns
    -------
    list of Hit
        One hit per document, carrying its best chunk's id; ``score == backend_score`` = cosine
        similarity (``1 - cosine distance``). Empty when the index has no chunks, and when
        ``query_vec`` is all zeros or not finite (it has no direction to rank by).

    Raises
    ------
    StoreError
        The index has chunks but none is embedded under ``fingerprint`` (run ``qmdlab embed``).
    DimensionMismatchError
        ``query_vec`` and the stored vectors differ in dimension (``qmdlab embed -f``).
    qmdlab.store.limits.CapacityError
        The vector matrix would exceed the ``vector_bytes`` capacity limit.
    """
    vm = idx.vector_matrix(fingerprint)
    if vm.matrix.shape[0] == 0:
        if idx.chunks_needing_vectors(fingerprint).height == 0:
            return []
        others = sorted(set(idx.vector_fingerprints()) - {fingerprint})
        extra = f" (it holds vectors of {', '.join(others)})" if others else ""
        raise StoreError(f"index {idx.dir} has no vectors for embedder {fingerprint!r}{extra}; run `qmdlab embed`")
    q = np.asarray(query_vec, dtype=np.float32).reshape(-1)
    if q.shape[0] != vm.matrix.shape[1]:
        raise DimensionMismatchError(
            f"query vector has {q.shape[0]} dims but the index holds {vm.matrix.shape[1]}-d vectors for "
            f"{fingerprint!r}; re-embed with `qmdlab embed -f`"
        )
    norm = float(np.linalg.norm(q))
    if not np.isfinite(norm) or norm == 0.0:
        # A zero query vector (no query word in a keyword embedder's vocabulary, an all-zero
        # embedding) or a NaN/inf one has no direction: every cosine would be 0 or NaN, so any
        # ranking would be arbitrary. No hits.
        return []
    q = q / norm
    allowed = allowed_docnos(idx, collections, filters)
    if ann is not None and allowed is None:
        from qmdlab.store.vectors import document_fingerprint

        # one graph per stored matrix: a query adapter's searches use its base's
        hits = _ann_search(idx, vm, q, document_fingerprint(fingerprint), limit, ann)
        if hits is not None:
            return hits
    scores = vm.matrix @ q
    if allowed is not None:
        mask = np.fromiter((d in allowed for d in vm.docnos), dtype=bool, count=len(vm.docnos))
        scores = np.where(mask, scores, -np.inf)
    rows, best = top_documents(scores, _group_starts(vm.docnos), limit)
    return [
        Hit(vm.docnos[r], int(vm.chunk_ids[r]), rank, s, s)
        for rank, (r, s) in enumerate(zip(rows.tolist(), best.tolist()), 1)
    ]


class TopDocuments(NamedTuple):
    """The best documents, best first: ``rows[i]`` is the matrix row of the ``i``-th document's
    best chunk, ``scores[i]`` its score (float64)."""

    rows: np.ndarray
    scores: np.ndarray


def top_documents(scores: np.ndarray, starts: np.ndarray, limit: int) -> TopDocuments:
    """The ``limit`` documents with the best chunk scores (documents are the contiguous row groups
    beginning at ``starts``), best first, the earlier document first on ties; each document's best
    row is its first on ties; NaN ranks below every score and ``-inf`` rows are excluded.

    Same result as ranking :func:`best_per_document` with :func:`top_k` (the test compares them
    on tie-heavy random scores). Most queries take the short path: the ``4 * limit`` best *rows*
    (one ``argpartition``, what a raw top-k does anyway) name the top documents whenever they hold
    ``limit`` documents whose best score is above the partition's edge; otherwise every document's
    best is computed (one ``maximum.reduceat`` pass).

    >>> top_documents(np.array([0.1, 0.9, 0.9, 0.2, 0.95], dtype=np.float32), np.array([0, 3, 4]), 2)
    TopDocuments(rows=array([4, 1]), scores=array([0.94999999, 0.89999998]))
    """
    if limit <= 0 or len(scores) == 0:
        return TopDocuments(np.zeros(0, dtype=np.int64), np.zeros(0))
    fast = _top_documents_from_rows(scores, starts, limit)
    if fast is not None:
        return fast
    best = np.maximum.reduceat(scores, starts)
    if np.isnan(best).any():
        # ``best_per_document`` ranks a NaN chunk below every other chunk of its document (and
        # drops a document whose chunks are all NaN): do the same by treating NaN as -inf.
        scores = np.where(np.isnan(scores), -np.inf, scores)
        best = np.maximum.reduceat(scores, starts)
    best = best.astype(np.float64)
    groups = np.flatnonzero(np.isfinite(best))
    bscores = best[groups]
    ends = np.append(starts[1:], len(scores))
    rows = []
    picked = top_k(bscores, limit)
    for i in picked:
        g = int(groups[i])
        lo, hi = int(starts[g]), int(ends[g])
        rows.append(lo + int(np.argmax(scores[lo:hi])))  # first row on ties, as best_per_document
    return TopDocuments(np.array(rows, dtype=np.int64), bscores[picked])


def _top_documents_from_rows(scores: np.ndarray, starts: np.ndarray, limit: int) -> TopDocuments | None:
    """:func:`top_documents` from the ``4 * limit`` best rows alone, or ``None`` when they cannot
    decide it. Every row scoring above the partition's edge ``t`` is among them, so a document
    whose best score is above ``t`` is found with its true best row; if the ``limit``-th document
    found is above ``t``, no missing document can outrank it."""
    n = len(scores)
    m = max(4 * limit, 32)
    if m >= n:
        return None
    part = np.argpartition(-scores, m - 1)[:m]
    ps = scores[part]
    edge = ps.min()
    if not np.isfinite(edge) or np.isnan(ps).any():
        return None  # -inf (filtered rows) or NaN among the best rows: the full path handles them
    order = part[np.lexsort((part, -ps))]  # score desc, row asc (= document order, then chunk order)
    group = np.searchsorted(starts, order, side="right") - 1
    _, first = np.unique(group, return_index=True)  # each document's first (= best) row in that order
    if len(first) < limit:
        return None
    rows = order[np.sort(first)[:limit]]
    best = scores[rows]
    if best[-1] <= edge:
        return None  # the last document found ties with (or is) the edge: one at the edge may be missing
    return TopDocuments(rows.astype(np.int64), best.astype(np.float64))


def _ann_search(idx: Index, vm, q: np.ndarray, fingerprint: str, limit: int, ann: AnnConfig) -> list[Hit] | None:
    """Top documents among the HNSW graph's candidate chunks; each candidate document's chunks are
    scored exactly (best chunk, first on ties) and ranked as in exact search. ``None`` when the
    request needs half the rows or more (``--all``, a tiny index): exact search is then cheaper."""
    from qmdlab.search.ann import ann_graph, ann_rows

    n = vm.matrix.shape[0]
    k = max(limit, 1) * ann.overfetch
    if 2 * k > n:
        return None
    starts = _group_starts(vm.docnos)
    ends = np.append(starts[1:], n)
    handle = ann_graph(getattr(idx, "dir", None), fingerprint, vm, ann)
    while True:
        rows = ann_rows(handle, q, k, ann)
        groups = np.unique(np.searchsorted(starts, rows, side="right") - 1)
        if len(groups) >= limit:
            break
        k *= 2  # documents with many chunks: widen until ``limit`` documents are in
        if 2 * k > n:
            return None
    best_rows = np.empty(len(groups), dtype=np.int64)
    bscores = np.empty(len(groups), dtype=np.float64)
    for j, g in enumerate(groups):  # ascending group = docno order, as the exact ranking's ties
        lo, hi = int(starts[g]), int(ends[g])
        s = vm.matrix[lo:hi] @ q
        s = np.where(np.isnan(s), -np.inf, s)
        best_rows[j], bscores[j] = lo + int(np.argmax(s)), float(s.max())
    keep = np.isfinite(bscores)
    best_rows, bscores = best_rows[keep], bscores[keep]
    hits = []
    for rank, i in enumerate(top_k(bscores, limit), 1):
        r, s = int(best_rows[i]), float(bscores[i])
        hits.append(Hit(vm.docnos[r], int(vm.chunk_ids[r]), rank, s, s))
    return hits

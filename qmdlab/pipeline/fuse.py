"""Fusion: the recorded lists → the ``fused`` table, for one query or many at once.

A fusion method is one function in :data:`METHODS` (name → function). It reads the list entries
that enter fusion (:class:`Rows`, numpy arrays of the :class:`~qmdlab.pipeline.coded.CodedLists`)
and says what each adds to its document's ``rrf_base`` (:class:`Terms`: the terms, and whether it
drops entries, multiplies by the number of lists or adds qmd's top-rank bonus). :func:`fuse` does
the rest for every method alike: it adds a (query, document) pair's terms in ``list_id`` order with
Kahan compensation, adds the bonus and ranks each query's documents by ``fused_score`` desc, then
the better ``best_rank``, then ``docno`` (rankings are deterministic). Output columns: ``qid, docno,
rrf_base, best_rank, bonus, fused_score, fused_rank, n_lists``. An unknown method is a
:class:`~qmdlab.errors.ConfigError`. ``fusion=learned`` (a LightGBM model over trace features) is
:mod:`qmdlab.pipeline.learned`; :func:`fuse` hands a frame to it.

Which lists enter fusion is decided here too, per query, for every caller alike (:func:`select_lists`:
:meth:`qmdlab.Lab.query`, :func:`qmdlab.retune` and a tuning study all fuse through :func:`fuse`):
the expansion types of ``expand_types``, and the expansion gate: ``expand_gate: overlap`` drops a
query's expansion lists when their top ``expand_gate_k`` fused documents hold less than
``expand_gate_min_overlap`` of the original lists' top ``expand_gate_k`` — each side fused alone by
the config's method, so the gated query ranks exactly as with ``expand: false``; ``expand_gate:
rerank`` keeps only the expansion-list entries whose document is in the original lists' top
``expand_gate_k`` (fused alone), so expansion re-orders what the query found and brings in nothing
else — a wrong keyword cannot pull a document into the results, it can only lift one the query
already ranked.

Why that overlap: the gate asks whether the expansions search for what the query searches for. The
share of the original top-k that the expansion side also ranks in its top-k reads directly ("3 of the
query's top 10"), is cheap over thousands of queries (set membership of integer codes), and, unlike
Jaccard, does not fall when the expansions also bring new documents — recall beyond the original's
top-k is what expansion is for; with both sides k documents deep the two carry the same information
on different scales. Rank-biased overlap would weight the top ranks, which the fusion itself does.

Each formula lives in exactly one function:

=============== ===========================================================
``rrf_term``     ``weight / (k + rank)`` (1-based rank)
``rank_bonus``   +``bonus_rank1`` at best rank 1, +``bonus_rank23`` at 2–3
``max_norm``     ``score / max(score of the list)``
``channel_norm`` ``norm_sum``'s per-row score: BM25 ``max_norm``; vector: the cosine itself, floored at 0
``min_max``      ``(score − min) / max(max − min, 1e-9)`` (ranx's min-max)
``gate``         vector hits with ``score >= top1 − margin``, at most ``max_take``
=============== ===========================================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, overload

import numpy as np
import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.coded import (
    CodedLists,
    Fused,
    block_sizes,
    changes,
    empty_fused,
    rank_within,
    segments,
    sort_order,
)
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.trace import empty


class Rows(NamedTuple):
    """The list entries a fusion method reads (the rows of :class:`~qmdlab.pipeline.coded.CodedLists`
    that enter fusion): one array entry per entry."""

    rank: np.ndarray  # float64, 1-based rank in its list
    score: np.ndarray  # the list's normalised score
    weight: np.ndarray  # the list's weight under the config
    vec: np.ndarray  # bool: an entry of a vector list
    lst: np.ndarray  # list code (one per query and list_id), for list-wise statistics
    n_lists: int  # number of list codes
    row: np.ndarray  # position in the input table (ordinal ties)

    @classmethod
    def of(cls, lists: CodedLists, idx: np.ndarray | None, weight: np.ndarray | None) -> Rows:
        """The rows ``idx`` of ``lists`` (None: all) with the weights ``weight`` (None: recorded)."""
        w = lists.weight if weight is None else weight
        if idx is None:
            rankf = lists.cache.get("rankf")
            if rankf is None:
                rankf = lists.cache["rankf"] = lists.rank.astype(np.float64)
            return cls(rankf, lists.score, w, lists.vec, lists.lst, lists.n_lists, lists.row)
        return cls(
            lists.rank[idx].astype(np.float64),
            lists.score[idx],
            w[idx],
            lists.vec[idx],
            lists.lst[idx],
            lists.n_lists,
            lists.row[idx],
        )


class Terms(NamedTuple):
    """What a fusion method makes of :class:`Rows`."""

    term: np.ndarray
    """Each entry's contribution to its document's ``rrf_base``."""
    keep: np.ndarray | None = None
    """Entries that enter fusion (None: all); the others add nothing and do not count in ``n_lists``."""
    times_n: bool = False
    """``rrf_base = n_lists · Σ term`` (CombMNZ)."""
    bonus: tuple[float, float] | None = None
    """qmd's top-rank bonus ``(at best rank 1, at best rank 2–3)``."""


# -- formulas (one function each) ------------------------------------------------------
def rrf_term(k: float, rank: np.ndarray, weight: np.ndarray | float = 1.0) -> np.ndarray:
    """Reciprocal-rank contribution ``weight / (k + rank)`` of list entries.

    >>> rrf_term(60, np.array([1.0, 3.0]), np.array([2.0, 1.0])).tolist() == [2.0 / 61, 1.0 / 63]
    True
    """
    return weight / (float(k) + rank)


def rank_bonus(best_rank: np.ndarray, bonus_rank1: float, bonus_rank23: float) -> np.ndarray:
    """qmd's top-rank bonus: ``bonus_rank1`` if best rank is 1, ``bonus_rank23`` if 2–3, else 0.

    >>> rank_bonus(np.array([1, 2, 3, 4]), 0.05, 0.02).tolist()
    [0.05, 0.02, 0.02, 0.0]
    """
    return np.where(best_rank == 1, float(bonus_rank1), np.where(best_rank <= 3, float(bonus_rank23), 0.0))


def list_max(rows: Rows, values: np.ndarray) -> np.ndarray:
    """The maximum of ``values`` over each entry's list, per entry."""
    out = np.full(rows.n_lists, -np.inf)
    np.maximum.at(out, rows.lst, values)
    return out[rows.lst]


def list_min(rows: Rows, values: np.ndarray) -> np.ndarray:
    """The minimum of ``values`` over each entry's list, per entry."""
    out = np.full(rows.n_lists, np.inf)
    np.minimum.at(out, rows.lst, values)
    return out[rows.lst]


def max_norm(score: np.ndarray, top: np.ndarray) -> np.ndarray:
    """``score / top`` (``top``: the list's best score; 0 when it is not positive).

    >>> max_norm(np.array([0.8, 0.2, 0.3]), np.array([0.8, 0.8, 0.0])).tolist()
    [1.0, 0.25, 0.0]
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(top > 0, score / top, 0.0)


def min_max(score: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """ranx's min-max normalisation within a list: ``(s − min) / max(max − min, 1e-9)``.

    >>> [round(x, 12) for x in min_max(np.array([0.9, 0.5, 0.1]), np.full(3, 0.1), np.full(3, 0.9)).tolist()]
    [1.0, 0.5, 0.0]
    """
    return (score - lo) / np.maximum(hi - lo, 1e-9)


def channel_norm(rows: Rows) -> np.ndarray:
    """``norm_sum``'s normalised score: a BM25 entry is divided by its list's best (:func:`max_norm`),
    a vector entry keeps its cosine (floored at 0). Dividing the cosine by the list's best would give
    the nearest chunk 1.0 even when nothing is close; the raw cosine keeps "nothing here is close" low.
    """
    return np.where(rows.vec, np.maximum(rows.score, 0.0), max_norm(rows.score, list_max(rows, rows.score)))


def channel_weight(rows: Rows, config: PipelineConfig) -> np.ndarray:
    """``norm_sum`` channel weight of each entry from its source (vec | fts)."""
    return np.where(rows.vec, float(config.norm_weight_vec), float(config.norm_weight_fts))


def gate(rows: Rows, margin: float, max_take: int) -> np.ndarray:
    """The semantic admission gate of gated memory recall: keep a vector hit only if its cosine is
    ``>= top1 − margin`` of its list, at most ``max_take`` per list (the best, ties in row order);
    BM25 entries pass. Returns the mask of entries kept."""
    score, lst = rows.score, rows.lst
    order = np.lexsort((rows.row, -score, lst))
    n = len(order)
    starts = segments(lst[order])
    ordinal = np.empty(n, dtype=np.int64)
    ordinal[order] = rank_within(starts, n)
    admitted = (score >= list_max(rows, score) - margin) & (ordinal <= max_take)
    return ~rows.vec | admitted


# -- the methods (name → function: METHODS) -----------------------------------------------
def qmd_rrf(rows: Rows, config: PipelineConfig) -> Terms:
    """qmd's weighted RRF: ``Σ weight/(k+rank)`` plus the top-rank bonus."""
    return Terms(rrf_term(config.rrf_k, rows.rank, rows.weight), bonus=(config.bonus_rank1, config.bonus_rank23))


def rrf(rows: Rows, config: PipelineConfig) -> Terms:
    """Plain rank-only RRF ``Σ 1/(k+rank)`` (ranks only); list weights are ignored."""
    return Terms(rrf_term(config.rrf_k, rows.rank))


def norm_sum(rows: Rows, config: PipelineConfig) -> Terms:
    """Channel score sum: per-channel scores (:func:`channel_norm`: BM25 over its list's best,
    vector cosine as is) times the channel weight, summed."""
    return Terms(channel_weight(rows, config) * channel_norm(rows))


def gated_rrf(rows: Rows, config: PipelineConfig) -> Terms:
    """Gated memory recall: :func:`gate` the vector lists, then plain RRF."""
    return Terms(rrf_term(config.rrf_k, rows.rank), keep=gate(rows, config.gate_margin, config.gate_max_take))


def wsum_minmax(rows: Rows, config: PipelineConfig) -> Terms:
    """ranx ``wsum`` with min-max norm: ``Σ weight · min_max(score)``."""
    return Terms(rows.weight * min_max(rows.score, list_min(rows, rows.score), list_max(rows, rows.score)))


def combmnz(rows: Rows, config: PipelineConfig) -> Terms:
    """ranx ``mnz`` with min-max norm: ``n_lists · Σ min_max(score)`` (unweighted)."""
    return Terms(min_max(rows.score, list_min(rows, rows.score), list_max(rows, rows.score)), times_n=True)


METHODS: dict[str, Callable[[Rows, PipelineConfig], Terms]] = {
    "qmd_rrf": qmd_rrf,
    "rrf": rrf,
    "norm_sum": norm_sum,
    "gated_rrf": gated_rrf,
    "wsum_minmax": wsum_minmax,
    "combmnz": combmnz,
}
"""Every formula fusion method, by name (``PipelineConfig.fusion``); ``learned`` is not a formula."""


def method(name: str) -> Callable[[Rows, PipelineConfig], Terms]:
    """The function of fusion method ``name``; an unknown name is a :class:`ConfigError`."""
    try:
        return METHODS[name]
    except KeyError:
        extra = " (fusion=learned needs the frame path: fuse(lists_frame, config, docs))" if name == "learned" else ""
        raise ConfigError(f"unknown fusion method {name!r}; choose one of: {', '.join(METHODS)}{extra}") from None


class ExpansionGate(NamedTuple):
    """The expansion gate's measure of each query it applies to (both sides present).

    ``overlap = shared / size``: ``size`` documents in the original lists' top ``k`` (fused alone),
    ``shared`` of them also in the expansion lists' top ``k``; ``gated`` where
    ``overlap < threshold``."""

    query: np.ndarray  # query codes (of the CodedLists)
    shared: np.ndarray
    size: np.ndarray
    overlap: np.ndarray
    gated: np.ndarray
    k: int
    threshold: float


class ExpansionScope(NamedTuple):
    """``expand_gate: rerank`` per query with both sides present: of its ``entries`` expansion-list
    entries, ``dropped`` name a document outside the original lists' top ``k`` (fused alone)."""

    query: np.ndarray  # query codes (of the CodedLists)
    entries: np.ndarray
    dropped: np.ndarray
    k: int


class Selection(NamedTuple):
    """The rows of the coded lists that enter fusion under a config (:func:`select_lists`)."""

    active: np.ndarray | None
    """Mask over the coded rows (None: all)."""
    gate: ExpansionGate | None = None
    """The gate's measure (None: ``expand_gate: off``)."""
    typed_out: np.ndarray | None = None
    """Per query code, how many of its lists are of an expansion type ``expand_types`` leaves out
    (None: none anywhere)."""
    scope: ExpansionScope | None = None
    """What ``expand_gate: rerank`` dropped (None: another gate)."""


EXPANSION_TYPES = ("lex", "vec", "hyde")


def select_lists(
    lists: CodedLists, config: PipelineConfig, active: np.ndarray | None = None, weight: np.ndarray | None = None
) -> Selection:
    """The rows of ``active`` (a mask over the coded rows; None: all) that enter fusion under
    ``config``: expansion lists of a type ``expand_types`` leaves out are dropped, then, with
    ``expand_gate: overlap``, each query's expansion lists when the gate closes (module docstring).
    ``weight``: the rows' list weights (None: recorded), as :func:`fuse` takes them."""
    fused_types = set(config.expand_types.split(","))  # the switches (expand, hyde) are the caller's active
    kind_orig = np.array([t not in EXPANSION_TYPES for _, t in lists.kinds], dtype=bool)
    kind_ok = np.array([t not in EXPANSION_TYPES or t in fused_types for _, t in lists.kinds], dtype=bool)
    typed_out = None
    if len(kind_ok) and not kind_ok.all():
        out_rows = ~kind_ok[lists.kind]
        if active is not None:
            out_rows &= active
        if out_rows.any():
            lst = np.unique(lists.lst[out_rows])  # the lists left out, counted per query
            owner = np.zeros(lists.n_lists, dtype=np.int64)
            owner[lists.lst] = lists.query
            typed_out = np.bincount(owner[lst], minlength=len(lists.qids))
            active = ~out_rows if active is None else active & ~out_rows
    if config.expand_gate == "off" or not lists.n_rows:
        return Selection(active, None, typed_out)
    orig_row = kind_orig[lists.kind] if len(kind_orig) else np.zeros(0, bool)
    act = np.ones(lists.n_rows, dtype=bool) if active is None else active
    if config.expand_gate == "rerank":
        outside, scope = expansion_scope(lists, config, act & orig_row, act & ~orig_row, weight)
        return Selection(act & ~outside, None, typed_out, scope)
    gate = expansion_gate(lists, config, act & orig_row, act & ~orig_row, weight)
    if gate.gated.any():
        closed = np.zeros(len(lists.qids), dtype=bool)
        closed[gate.query[gate.gated]] = True
        act = act & ~(~orig_row & closed[lists.query])
    return Selection(act, gate, typed_out)


def expansion_gate(
    lists: CodedLists,
    config: PipelineConfig,
    original: np.ndarray,
    expansion: np.ndarray,
    weight: np.ndarray | None = None,
) -> ExpansionGate:
    """The gate's overlap per query: the ``original`` rows and the ``expansion`` rows (masks over the
    coded rows) fused apart by ``config``'s method, and the share of the original side's top
    ``expand_gate_k`` documents found in the expansion side's top ``expand_gate_k``."""
    k, fn = int(config.expand_gate_k), method(config.fusion)
    n_q = len(lists.qids)
    o = _fuse(lists, config, fn, original, weight)
    e = _fuse(lists, config, fn, expansion, weight)
    o = o.take(np.flatnonzero(o.fused_rank <= k))
    e = e.take(np.flatnonzero(e.fused_rank <= k))
    n_docs = max(len(lists.docnos), 1)
    shared_row = np.isin(o.query * n_docs + o.doc, e.query * n_docs + e.doc)
    size = np.bincount(o.query, minlength=n_q)
    shared = np.bincount(o.query[shared_row], minlength=n_q)
    both = (size > 0) & (np.bincount(e.query, minlength=n_q) > 0)
    q = np.flatnonzero(both)
    overlap = shared[q] / size[q]
    threshold = float(config.expand_gate_min_overlap)
    return ExpansionGate(q, shared[q], size[q], overlap, overlap < threshold, k, threshold)


def expansion_scope(
    lists: CodedLists,
    config: PipelineConfig,
    original: np.ndarray,
    expansion: np.ndarray,
    weight: np.ndarray | None = None,
) -> tuple[np.ndarray, ExpansionScope]:
    """``expand_gate: rerank``: the ``expansion`` rows (a mask over the coded rows) whose document is
    not among the ``original`` rows' top ``expand_gate_k`` fused documents (by ``config``'s method),
    as a mask over the coded rows, and the counts per query. A query without original lists keeps
    its expansion lists whole (as the overlap gate never gates it)."""
    k = int(config.expand_gate_k)
    n_q = len(lists.qids)
    o = _fuse(lists, config, method(config.fusion), original, weight)
    o = o.take(np.flatnonzero(o.fused_rank <= k))
    n_docs = max(len(lists.docnos), 1)
    has_original = np.bincount(o.query, minlength=n_q) > 0
    outside = (
        expansion & has_original[lists.query] & ~np.isin(lists.query * n_docs + lists.doc, o.query * n_docs + o.doc)
    )
    entries = np.bincount(lists.query[expansion], minlength=n_q)
    q = np.flatnonzero(has_original & (entries > 0))
    dropped = np.bincount(lists.query[outside], minlength=n_q)
    return outside, ExpansionScope(q, entries[q], dropped[q], k)


def selection_notes(selection: Selection, qids: Sequence[str], config: PipelineConfig) -> list[tuple[str, str]]:
    """``(qid, message)`` trace notes (stage ``fuse``) of what :func:`select_lists` decided: each
    gated query and each query the gate let through (with its overlap), and each query whose lists
    of a type ``expand_types`` leaves out were not fused; query by query."""
    out: list[tuple[int, str]] = []
    if selection.typed_out is not None:
        for q in np.flatnonzero(selection.typed_out).tolist():
            n = int(selection.typed_out[q])
            out.append(
                (
                    q,
                    f"expand_types {config.expand_types}: {n} expansion list{'s' * (n > 1)} of other types not fused",
                )
            )
    g = selection.gate
    if g is not None:
        for q, sh, n, o, closed in zip(
            g.query.tolist(), g.shared.tolist(), g.size.tolist(), g.overlap.tolist(), g.gated.tolist()
        ):
            how = f"the expansion lists' top {g.k} hold {sh} of the original lists' top {n}"
            if closed:
                out.append((q, f"expansion gated: overlap {o:.2f} < {g.threshold:.2f} ({how}): original lists only"))
            else:
                out.append((q, f"expansion kept: overlap {o:.2f} >= {g.threshold:.2f} ({how})"))
    sc = selection.scope
    if sc is not None:
        for q, n, d in zip(sc.query.tolist(), sc.entries.tolist(), sc.dropped.tolist()):
            out.append(
                (
                    q,
                    f"expansion re-ranks the original lists' top {sc.k}: {d} of {n} expansion entries "
                    f"name other documents, not fused",
                )
            )
    out.sort(key=lambda n: n[0])  # query by query, as Lab.query notes them (stable: types, then gate)
    return [(qids[q], m) for q, m in out]


class _Blocks(NamedTuple):
    """The rows of each (query, document) pair among the rows fused: a block of adjacent rows."""

    starts: np.ndarray  # first row of each pair
    sizes: np.ndarray  # rows of each pair
    best: np.ndarray  # best (lowest) rank of each pair
    n_lists: np.ndarray  # distinct lists of each pair
    steps: list[tuple[np.ndarray, np.ndarray]]  # per position j ≥ 1: (rows at j, their pair)


def _blocks(lists: CodedLists, idx: np.ndarray | None) -> _Blocks:
    """:class:`_Blocks` of the rows ``idx`` (None: all rows, computed once per coded lists)."""
    if idx is None and "blocks" in lists.cache:
        return lists.cache["blocks"]
    pair = lists.pair if idx is None else lists.pair[idx]
    m = len(pair)
    new_pair = changes(pair)
    starts = np.flatnonzero(new_pair)
    sizes = block_sizes(starts, m)
    best = np.minimum.reduceat(lists.rank if idx is None else lists.rank[idx], starts)
    n_lists = sizes
    if lists.repeats:  # distinct lists per pair (rows in list_id order: a list held twice counts once)
        lid = lists.list_id if idx is None else lists.list_id[idx]
        n_lists = np.add.reduceat((new_pair | changes(lid)).astype(np.int64), starts)
    steps = []
    if m > 256 and m > len(starts):
        pos = rank_within(starts, m) - 1
        owner = np.repeat(np.arange(len(starts)), sizes)
        for j in range(1, int(sizes.max())):
            at = np.flatnonzero(pos == j)
            steps.append((at, owner[at]))
    out = _Blocks(starts, sizes, best, n_lists, steps)
    if idx is None:
        lists.cache["blocks"] = out
    return out


def _kahan_sums(term: np.ndarray, b: _Blocks) -> np.ndarray:
    """The sum of each block of ``term``, left to right with Kahan compensation — polars' float
    group sum, so the floats are those of a group-by — vectorised over the blocks (one step per
    position in a block)."""
    m = len(term)
    s = term[b.starts].copy()
    if m == len(b.starts):
        return s
    if m <= 256:  # a few rows (one query): the same additions in a Python loop, fewer numpy calls
        terms, out = term.tolist(), s.tolist()
        for i, (a, size) in enumerate(zip(b.starts.tolist(), b.sizes.tolist())):
            total, c = out[i], 0.0
            for v in terms[a + 1 : a + size]:
                y = v - c
                t = total + y
                c = (t - total) - y
                total = t
            out[i] = total
        return np.array(out, dtype=np.float64)
    comp = np.zeros(len(b.starts))
    for at, g in b.steps:
        y = term[at] - comp[g]
        t = s[g] + y
        comp[g] = (t - s[g]) - y
        s[g] = t
    return s


@overload
def fuse(
    lists: CodedLists,
    config: PipelineConfig,
    docs: None = None,
    *,
    active: np.ndarray | None = None,
    weight: np.ndarray | None = None,
    selection: Selection | None = None,
) -> Fused: ...


@overload
def fuse(
    lists: pl.DataFrame,
    config: PipelineConfig,
    docs: pl.DataFrame | None = None,
    *,
    active: None = None,
    weight: None = None,
    selection: None = None,
) -> pl.DataFrame: ...


def fuse(lists, config, docs=None, *, active=None, weight=None, selection=None):
    """Fuse with ``config.fusion``; the stage's one function.

    Given :class:`~qmdlab.pipeline.coded.CodedLists`, fuses the rows ``active`` (a mask over the
    coded rows; default all) with the list weights ``weight`` (one per coded row; default the
    recorded ones) and returns :class:`~qmdlab.pipeline.coded.Fused` arrays; of those rows, the ones
    :func:`select_lists` keeps enter fusion (``expand_types``, the expansion gate; ``selection``: its
    result, already computed for these arguments, e.g. to note it). Given a ``lists``
    frame, returns the ``fused`` frame (coding it first); ``docs``
    (:func:`qmdlab.pipeline.learned.doc_features`) is for ``fusion=learned`` only, which is not a
    formula but a LightGBM model over trace features (:mod:`qmdlab.pipeline.learned`).

    >>> lists = pl.DataFrame({"qid": ["q"] * 3, "list_id": [0, 0, 1], "source": ["fts", "fts", "vec"],
    ...     "query_type": ["original"] * 3, "subquery": ["x"] * 3, "docno": ["a", "b", "b"], "chunk_id": [1, 2, 2],
    ...     "rank": [1, 2, 1], "backend_score": [0.9, 0.8, 0.7], "score": [0.9, 0.8, 0.7], "weight": [2.0] * 3})
    >>> fuse(lists, PipelineConfig())["docno"].to_list()
    ['b', 'a']
    """
    if isinstance(lists, pl.DataFrame):
        if config.fusion == "learned":
            from qmdlab.pipeline.learned import learned

            left = [t for t in EXPANSION_TYPES if t not in config.expand_types.split(",")]
            if left:  # expand_types (the gate needs a formula method: PipelineConfig refuses it here)
                lists = lists.filter(~pl.col("query_type").is_in(left))
            return learned(lists, config, docs)
        fn = method(config.fusion)
        if lists.height == 0:
            return empty("fused")
        coded = CodedLists(lists)
        return coded.fused_table(_fuse(coded, config, fn, select_lists(coded, config).active, None), frame=True)
    if selection is None:
        selection = select_lists(lists, config, active, weight)
    return _fuse(lists, config, method(config.fusion), selection.active, weight)


def _fuse(
    lists: CodedLists,
    config: PipelineConfig,
    fn: Callable[[Rows, PipelineConfig], Terms],
    active: np.ndarray | None,
    weight: np.ndarray | None,
) -> Fused:
    idx = None if active is None or active.all() else np.flatnonzero(active)
    terms = fn(Rows.of(lists, idx, weight), config)
    term = terms.term
    if terms.keep is not None and not terms.keep.all():
        idx = np.flatnonzero(terms.keep) if idx is None else idx[terms.keep]
        term = term[terms.keep]
    if (lists.n_rows if idx is None else len(idx)) == 0:
        return empty_fused()
    blocks = _blocks(lists, idx)
    base = _kahan_sums(term, blocks)
    best, n_lists = blocks.best, blocks.n_lists
    if terms.times_n:
        base = base * n_lists.astype(np.float64)
    bonus = rank_bonus(best, *terms.bonus) if terms.bonus is not None else np.zeros(len(best))
    score = base + bonus
    fpair = (lists.pair if idx is None else lists.pair[idx])[blocks.starts]
    fq = lists.pair_query[fpair]
    first = lists.query_key(idx)
    group = fq if first is None else first[fq]
    # fused_score desc, best_rank, docno within each query; pairs are in (query, docno) order, so
    # their position breaks the last ties
    order = sort_order(group, score, best, int(best.max()) + 1)
    fq = fq[order]
    return Fused(
        fq,
        lists.pair_doc[fpair[order]],
        fpair[order],
        base[order],
        best[order],
        bonus[order],
        score[order],
        rank_within(segments(fq), len(order)),
        n_lists[order],
    )


@overload
def candidates(fused: Fused, limit: int) -> Fused: ...


@overload
def candidates(fused: pl.DataFrame, limit: int) -> pl.DataFrame: ...


def candidates(fused, limit):
    """The candidate cut: the top ``limit`` fused documents of every query (``fused_rank <= limit``),
    of :class:`~qmdlab.pipeline.coded.Fused` arrays or of a ``fused`` frame."""
    if isinstance(fused, pl.DataFrame):
        return fused.filter(pl.col("fused_rank") <= limit)
    keep = fused.fused_rank <= limit
    return fused if keep.all() else fused.take(np.flatnonzero(keep))


def contributions(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """Per list entry, what it added to its document's ``rrf_base`` under ``config``
    (``contribution`` column; 0 for entries the gate of ``gated_rrf`` rejects and for lists
    :func:`select_lists` leaves out; the recorded weights). Used by ``--explain``.
    """
    if lists.height == 0:
        return lists.with_columns(contribution=pl.lit(0.0))
    if config.fusion == "learned":  # a tree model has no per-list share; see learned.contributions (per feature)
        return lists.with_columns(contribution=pl.lit(None, dtype=pl.Float64))
    coded = CodedLists(lists)
    terms = method(config.fusion)(Rows.of(coded, None, None), config)
    term = terms.term
    if terms.keep is not None:
        term = np.where(terms.keep, term, 0.0)
    chosen = select_lists(coded, config).active
    if chosen is not None:  # lists expand_types leaves out, or the gate drops, add nothing
        term = np.where(chosen, term, 0.0)
    if terms.times_n:  # each entry's share of n_lists · Σ term
        pair, lid = coded.pair, coded.list_id
        new_pair = changes(pair)
        starts = np.flatnonzero(new_pair)
        n = np.add.reduceat((new_pair | changes(lid)).astype(np.int64), starts)
        term = term * np.repeat(n, block_sizes(starts, len(pair))).astype(np.float64)
    return lists.with_columns(contribution=pl.Series(coded.in_input_order(term), dtype=pl.Float64))


__all__ = [
    "fuse",
    "candidates",
    "select_lists",
    "expansion_gate",
    "selection_notes",
    "Selection",
    "ExpansionGate",
    "METHODS",
    "method",
    "Rows",
    "Terms",
    "qmd_rrf",
    "rrf",
    "norm_sum",
    "gated_rrf",
    "wsum_minmax",
    "combmnz",
    "rrf_term",
    "rank_bonus",
    "list_max",
    "list_min",
    "channel_weight",
    "channel_norm",
    "max_norm",
    "min_max",
    "gate",
    "contributions",
]

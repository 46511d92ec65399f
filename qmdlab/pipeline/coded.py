"""Integer-coded lists: the one form the cheap stages compute on (docs/design.md, pipeline steps 4-8).

The retrieval lists of one query (:meth:`qmdlab.Lab.query`) or the recorded lists of thousands of
queries (:func:`qmdlab.retune`, a tuning :class:`~qmdlab.eval.study.Study`) become numpy arrays:
every query, document and (query, document) pair gets an integer code, and the rows are laid out
in segments — a query's rows are one contiguous block (:attr:`CodedLists.offsets`), and within it
a pair's rows are adjacent, in ``list_id`` order (the order its contributions are added). Each
stage module has one numpy function over this form — :func:`qmdlab.pipeline.fuse.fuse`,
:func:`~qmdlab.pipeline.fuse.candidates`, :func:`qmdlab.pipeline.blend.blend`,
:func:`qmdlab.pipeline.finish.finish` — and its results (:class:`Fused`, :class:`Final`) keep the
layout: rows grouped by query, queries in order, each query's rows in rank order. The same
kernel therefore runs a block of one query or of every query of a suite.

Codes: queries in first-seen order, documents in sorted docno order (a docno tie-break is a
code comparison), pairs in (query, document) order.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple, overload

import numpy as np
import polars as pl

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.retrieve import list_kept, list_weight
from qmdlab.pipeline.trace import SCHEMAS, Columns


class Names:
    """The names of codes ``0..n-1`` (qids or docnos): a list or a polars Series, the other built on
    first use.

    >>> n = Names(["a", "b"])
    >>> n.take(np.array([1, 0, 1])), n.gather(np.array([1])).to_list(), n.index()["b"]
    (['b', 'a', 'b'], ['b'], 1)
    """

    __slots__ = ("_list", "_series", "_index")

    def __init__(self, names: builtins.list[str] | pl.Series):
        self._list: builtins.list[str] | None = names if isinstance(names, builtins.list) else None
        self._series: pl.Series | None = names if isinstance(names, pl.Series) else None
        self._index: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self._list) if self._list is not None else len(self._series)  # type: ignore[arg-type]

    @property
    def list(self) -> builtins.list[str]:
        if self._list is None:
            self._list = self._series.to_list()  # type: ignore[union-attr]
        return self._list

    @property
    def series(self) -> pl.Series:
        if self._series is None:
            self._series = pl.Series(self._list, dtype=pl.String)
        return self._series

    def index(self) -> dict[str, int]:
        """``{name: code}``."""
        if self._index is None:
            self._index = {n: i for i, n in enumerate(self.list)}
        return self._index

    def take(self, codes: np.ndarray) -> builtins.list[str]:
        """The names of ``codes`` as a list."""
        names = self.list
        return [names[i] for i in codes.tolist()]

    def gather(self, codes: np.ndarray) -> pl.Series:
        """The names of ``codes`` as a String Series."""
        if not len(codes):
            return pl.Series([], dtype=pl.String)
        return self.series.gather(codes)


def first_seen_codes(values: Sequence[str] | pl.Series) -> tuple[np.ndarray, Names]:
    """Codes numbering the distinct values in order of first appearance.

    >>> c, n = first_seen_codes(["b", "a", "b"])
    >>> c.tolist(), n.list
    ([0, 1, 0], ['b', 'a'])
    >>> c, n = first_seen_codes(pl.Series(["b", "a", "b"]))
    >>> c.tolist(), n.list
    ([0, 1, 0], ['b', 'a'])
    """
    if not isinstance(values, pl.Series):
        index: dict[str, int] = {}
        codes = [index.setdefault(v, len(index)) for v in values]
        return np.array(codes, dtype=np.int64), Names(list(index))
    return _enum_codes(values, values.unique(maintain_order=True))


def _enum_codes(values: pl.Series, names: pl.Series) -> tuple[np.ndarray, Names]:
    """Codes of ``values`` as positions in ``names`` (every distinct value once): a cast to an enum."""
    if values.len() == 0:
        return np.zeros(0, np.int64), Names(pl.Series([], dtype=pl.String))
    codes = values.cast(pl.Enum(names)).to_physical().to_numpy().astype(np.int64)
    return codes, Names(names)


def sorted_codes(values: Sequence[str] | pl.Series) -> tuple[np.ndarray, Names]:
    """Codes numbering the distinct values in sorted order (polars' string order: by code point).

    >>> c, n = sorted_codes(["b", "a", "b"])
    >>> c.tolist(), n.list
    ([1, 0, 1], ['a', 'b'])
    """
    if not isinstance(values, pl.Series):
        names = sorted(set(values))
        index = {v: i for i, v in enumerate(names)}
        return np.array([index[v] for v in values], dtype=np.int64), Names(names)
    return _enum_codes(values, values.unique().sort())


def changes(values: np.ndarray) -> np.ndarray:
    """True where a row starts a run of equal values (the first row included).

    >>> changes(np.array([4, 4, 1, 2, 2])).tolist()
    [True, False, True, True, False]
    """
    out = np.empty(len(values), dtype=bool)
    if len(values):
        out[0] = True
        np.not_equal(values[1:], values[:-1], out=out[1:])
    return out


def segments(query: np.ndarray) -> np.ndarray:
    """Start offset of each query's block in rows grouped by query.

    >>> segments(np.array([4, 4, 1, 2, 2])).tolist()
    [0, 2, 3]
    """
    return np.flatnonzero(changes(query))


def block_sizes(starts: np.ndarray, n: int) -> np.ndarray:
    """Rows in each block of ``n`` rows whose blocks start at ``starts``.

    >>> block_sizes(np.array([0, 2, 3]), 5).tolist()
    [2, 1, 2]
    """
    out = np.empty(len(starts), dtype=np.int64)
    if len(starts):
        np.subtract(starts[1:], starts[:-1], out=out[:-1])
        out[-1] = n - starts[-1]
    return out


def rank_within(starts: np.ndarray, n: int) -> np.ndarray:
    """1-based position of each row within its block (blocks starting at ``starts``).

    >>> rank_within(np.array([0, 2, 3]), 5).tolist()
    [1, 2, 1, 1, 2]
    """
    if not n:
        return np.zeros(0, np.int64)
    return np.arange(1, n + 1, dtype=np.int64) - np.repeat(starts, block_sizes(starts, n))


def sort_order(group: np.ndarray, score: np.ndarray, tie: np.ndarray | None = None, n_tie: int = 1) -> np.ndarray:
    """The permutation sorting by ``group`` ascending, ``score`` descending, ``tie`` ascending
    (``0 <= tie < n_tie``), then position — ``np.lexsort((arange, tie, -score, group))``, computed as
    one integer sort: scores become dense ranks (equal floats, ``-0.0`` and ``0.0`` included, share
    one) and the keys one int64. Falls back to ``np.lexsort`` when the key would not fit in 63 bits.

    >>> sort_order(np.array([1, 0, 0, 0]), np.array([0.5, 0.2, 0.9, 0.2]), np.array([1, 2, 1, 2]), 3).tolist()
    [2, 1, 3, 0]
    """
    n = len(score)
    if n == 0:
        return np.zeros(0, np.int64)
    if n <= 512:  # one call: cheaper than the integer key for a few rows (one query)
        keys = (np.arange(n), -score) if tie is None else (np.arange(n), tie, -score)
        return np.lexsort((*keys, group))
    neg = -score
    o = np.argsort(neg)
    sv = neg[o]
    dense = np.cumsum(changes(sv)) - 1
    rank = np.empty(n, np.int64)
    rank[o] = dense
    n_rank = int(dense[-1]) + 1
    n_group = int(group.max()) + 1
    if float(n_group) * n_rank * n_tie * n >= 2.0**62 or group.min() < 0 or (tie is not None and tie.min() < 0):
        keys = (np.arange(n), rank) if tie is None else (np.arange(n), tie, rank)
        return np.lexsort((*keys, group))
    key = group.astype(np.int64) * n_rank + rank
    if tie is not None:
        key = key * n_tie + tie
    key = np.sort(key * n + np.arange(n, dtype=np.int64))
    return key % n


class Fused(NamedTuple):
    """The ``fused`` table as arrays: rows grouped by query (queries in order), each query's rows in
    ``fused_rank`` order. ``pair`` indexes the pairs of the :class:`CodedLists` fused (-1 for rows
    coded from a frame)."""

    query: np.ndarray
    doc: np.ndarray
    pair: np.ndarray
    rrf_base: np.ndarray
    best_rank: np.ndarray
    bonus: np.ndarray
    fused_score: np.ndarray
    fused_rank: np.ndarray
    n_lists: np.ndarray

    def take(self, idx: np.ndarray) -> Fused:
        return Fused(*(a[idx] for a in self))


class Final(NamedTuple):
    """The ``final`` table as arrays, laid out as :class:`Fused`; ``has_rerank`` is False where
    ``rerank_score`` is null."""

    query: np.ndarray
    doc: np.ndarray
    pair: np.ndarray
    fused_rank: np.ndarray
    position_score: np.ndarray
    blend_weight: np.ndarray
    rerank_score: np.ndarray
    has_rerank: np.ndarray
    final_score: np.ndarray
    final_rank: np.ndarray

    def take(self, idx: np.ndarray) -> Final:
        return Final(*(a[idx] for a in self))


def empty_fused() -> Fused:
    e, f = np.zeros(0, np.int64), np.zeros(0)
    return Fused(e, e, e, f, e, f, f, e, e)


def empty_final() -> Final:
    e, f = np.zeros(0, np.int64), np.zeros(0)
    return Final(e, e, e, e, f, f, f, np.zeros(0, bool), f, e)


class CodedLists:
    """The ``lists`` table of one or many queries as integer codes, rows in sum order.

    Parameters
    ----------
    table : Columns or polars.DataFrame
        The ``lists`` table (:data:`~qmdlab.pipeline.trace.SCHEMAS`): one query's plain columns
        or the recorded lists of any number of queries.

    Row arrays (one entry per list entry, grouped by query, then by pair, then by ``list_id``):
    ``row`` (position in ``table``), ``query``, ``doc``, ``pair``, ``list_id``, ``lst`` (a code per
    (query, list)), ``rank``, ``score``, ``weight`` (the recorded one), ``kind`` (index into
    ``kinds``, the (source, query_type) of each list), ``vec``.

    >>> lists = Columns({"qid": ["q"] * 3, "list_id": [0, 0, 1], "source": ["fts", "fts", "vec"],
    ...     "query_type": ["original"] * 3, "subquery": ["x"] * 3, "docno": ["b", "a", "b"],
    ...     "chunk_id": [1, 2, 2], "rank": [1, 2, 1], "backend_score": [1.0, 0.5, 0.9],
    ...     "score": [0.9, 0.8, 0.7], "weight": [2.0] * 3})
    >>> c = CodedLists(lists)
    >>> c.docnos.list, c.doc.tolist(), c.pair.tolist(), c.offsets.tolist()
    (['a', 'b'], [0, 1, 1], [0, 1, 1], [0, 3])
    """

    def __init__(self, table: Columns | pl.DataFrame):
        frame = isinstance(table, pl.DataFrame)
        n = table.height if isinstance(table, pl.DataFrame) else len(table["qid"])
        self.n_rows = n

        def col(name: str, dtype: Any) -> np.ndarray:
            if frame:
                return table[name].to_numpy().astype(dtype, copy=False)
            return np.array(table[name], dtype=dtype)

        q, self.qids = first_seen_codes(table["qid"])
        d, self.docnos = sorted_codes(table["docno"])
        if frame:
            src, src_names = sorted_codes(table["source"])
            qt, qt_names = sorted_codes(table["query_type"])
            kind_key, kind = np.unique(src * max(len(qt_names), 1) + qt, return_inverse=True)
            kind = kind.reshape(-1)
            self.kinds = [
                (src_names.list[k // max(len(qt_names), 1)], qt_names.list[k % max(len(qt_names), 1)])
                for k in kind_key.tolist()
            ]
        else:
            index: dict[tuple[str, str], int] = {}
            kind = np.array(
                [index.setdefault(st, len(index)) for st in zip(table["source"], table["query_type"])], dtype=np.int64
            )
            self.kinds = list(index)
        list_id = col("list_id", np.int64) if n else np.zeros(0, np.int64)
        n_docs = max(len(self.docnos), 1)
        key = q * n_docs + d
        order = np.lexsort((list_id, key))  # pair-major (so query-major), then list_id, then row
        key = key[order]
        new_pair = changes(key)
        pair_key = key[new_pair]
        self.n_pairs = len(pair_key)
        self.pair_query = pair_key // n_docs
        self.pair_doc = pair_key % n_docs
        self.row = order
        self.pair = np.cumsum(new_pair) - 1
        self.query = q[order]
        self.doc = d[order]
        self.list_id = list_id[order]
        self.rank = col("rank", np.int64)[order] if n else np.zeros(0, np.int64)
        self.score = col("score", np.float64)[order] if n else np.zeros(0)
        self.weight = col("weight", np.float64)[order] if n else np.zeros(0)
        self.kind = kind[order]
        kind_vec = np.array([s == "vec" for s, _ in self.kinds], dtype=bool)
        self.vec = kind_vec[self.kind] if n else np.zeros(0, bool)
        span = int(list_id.max()) - int(list_id.min()) + 1 if n else 1
        lkey = self.query * span + (self.list_id - (int(list_id.min()) if n else 0))
        if len(self.qids) * span <= 4 * n + 64:  # the key itself is a compact code
            self.lst, self.n_lists = lkey, len(self.qids) * span
        else:
            _, lst = np.unique(lkey, return_inverse=True)
            self.lst = lst.reshape(-1)
            self.n_lists = int(self.lst.max()) + 1 if n else 0
        self.offsets = np.searchsorted(self.query, np.arange(len(self.qids) + 1))
        # a list holding a document twice (its entries then count as one list of the pair)
        self.repeats = bool(n and np.any((self.pair[1:] == self.pair[:-1]) & (self.list_id[1:] == self.list_id[:-1])))
        # the queries' rows are one block each in the input: a row filter keeps their order
        self.contiguous = bool(len(self.qids) <= 1 or np.all(np.diff(q) >= 0) or _blocks(q))
        self._pairs_frame: pl.DataFrame | None = None
        self.cache: dict[str, Any] = {}  # what the stage functions derive once from these rows

    # -- the config's view of the recorded lists ------------------------------------------
    def active(self, config: PipelineConfig, keep: np.ndarray | None = None) -> np.ndarray:
        """The rows ``config`` keeps (ranks within ``list_limit``, the ``vector``/``hyde``/``expand``
        switches: :func:`list_kept`), as a mask over the coded rows; ``keep`` is an optional mask
        over the rows of the input table (a study's ``lists`` filter)."""
        kinds = np.array([list_kept(config, s, t) for s, t in self.kinds], dtype=bool)
        act = self.rank <= config.list_limit
        if not kinds.all():
            act &= kinds[self.kind]
        if keep is not None:
            act &= np.asarray(keep, dtype=bool)[self.row]
        return act

    def weights(self, config: PipelineConfig) -> np.ndarray:
        """Each row's list weight under ``config`` (:func:`list_weight` of its list type)."""
        return np.array([list_weight(config, s, t) for s, t in self.kinds], dtype=np.float64)[self.kind]

    def in_input_order(self, values: np.ndarray) -> np.ndarray:
        """``values`` (one per coded row) in the row order of the input table."""
        out = np.empty_like(values)
        out[self.row] = values
        return out

    def query_key(self, idx: np.ndarray | None) -> np.ndarray | None:
        """The order of the queries among the rows ``idx`` (None: all; first-seen in the input) when
        it is not the query codes' own order (queries interleaved in the input and rows filtered),
        else None."""
        if self.contiguous or idx is None:
            return None
        first = np.full(len(self.qids), self.n_rows, dtype=np.int64)
        np.minimum.at(first, self.query[idx], self.row[idx])
        return first

    # -- lookups ------------------------------------------------------------------------------
    def pairs_frame(self) -> pl.DataFrame:
        """``qid, docno, _p`` of every pair (``_p``: its code)."""
        if self._pairs_frame is None:
            self._pairs_frame = pl.DataFrame(
                {
                    "qid": self.qids.gather(self.pair_query),
                    "docno": self.docnos.gather(self.pair_doc),
                    "_p": np.arange(self.n_pairs, dtype=np.int64),
                }
            )
        return self._pairs_frame

    def pair_values(self, table: pl.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
        """``(value, has)`` per pair from ``table`` (``qid, docno, <column>``; null values and pairs
        not coded are left out; the first row of a pair scored twice wins)."""
        vals, has = np.zeros(self.n_pairs), np.zeros(self.n_pairs, dtype=bool)
        if not self.n_pairs or table.height == 0:
            return vals, has
        t = table.select(pl.col("qid").cast(pl.String), pl.col("docno").cast(pl.String), pl.col(column)).drop_nulls(
            column
        )
        got = self.pairs_frame().join(t.unique(["qid", "docno"], keep="first"), on=["qid", "docno"], how="inner")
        idx = got["_p"].to_numpy()
        vals[idx] = got[column].cast(pl.Float64).to_numpy()
        has[idx] = True
        return vals, has

    # -- tables -------------------------------------------------------------------------------
    @overload
    def fused_table(self, f: Fused, *, frame: Literal[True]) -> pl.DataFrame: ...
    @overload
    def fused_table(self, f: Fused, *, frame: Literal[False]) -> Columns: ...
    def fused_table(self, f: Fused, *, frame: bool) -> Columns | pl.DataFrame:
        """The ``fused`` table of :func:`~qmdlab.pipeline.fuse.fuse`'s arrays."""
        return fused_table(f, self.qids, self.docnos, frame=frame)

    @overload
    def final_table(self, f: Final, *, frame: Literal[True]) -> pl.DataFrame: ...
    @overload
    def final_table(self, f: Final, *, frame: Literal[False]) -> Columns: ...
    def final_table(self, f: Final, *, frame: bool) -> Columns | pl.DataFrame:
        """The ``final`` table of :func:`~qmdlab.pipeline.blend.blend`'s or
        :func:`~qmdlab.pipeline.finish.finish`'s arrays."""
        return final_table(f, self.qids, self.docnos, frame=frame)


def _blocks(q: np.ndarray) -> bool:
    """Whether every query's rows are one block (so a row filter keeps the query order)."""
    firsts = q[changes(q)]
    return len(np.unique(firsts)) == len(firsts)


@overload
def fused_table(f: Fused, qids: Names, docnos: Names, *, frame: Literal[True]) -> pl.DataFrame: ...
@overload
def fused_table(f: Fused, qids: Names, docnos: Names, *, frame: Literal[False]) -> Columns: ...
@overload
def fused_table(f: Fused, qids: Names, docnos: Names, *, frame: bool) -> Columns | pl.DataFrame: ...
def fused_table(f: Fused, qids: Names, docnos: Names, *, frame: bool) -> Columns | pl.DataFrame:
    """The ``fused`` table (plain columns or a frame) of :class:`Fused` arrays."""
    if not frame:
        return Columns(
            {
                "qid": qids.take(f.query),
                "docno": docnos.take(f.doc),
                "rrf_base": f.rrf_base.tolist(),
                "best_rank": f.best_rank.tolist(),
                "bonus": f.bonus.tolist(),
                "fused_score": f.fused_score.tolist(),
                "fused_rank": f.fused_rank.tolist(),
                "n_lists": f.n_lists.tolist(),
            }
        )
    return pl.DataFrame(
        {
            "qid": qids.gather(f.query),
            "docno": docnos.gather(f.doc),
            "rrf_base": f.rrf_base,
            "best_rank": f.best_rank,
            "bonus": f.bonus,
            "fused_score": f.fused_score,
            "fused_rank": f.fused_rank,
            "n_lists": f.n_lists,
        },
        schema=SCHEMAS["fused"],
    )


@overload
def final_table(f: Final, qids: Names, docnos: Names, *, frame: Literal[True]) -> pl.DataFrame: ...
@overload
def final_table(f: Final, qids: Names, docnos: Names, *, frame: Literal[False]) -> Columns: ...
@overload
def final_table(f: Final, qids: Names, docnos: Names, *, frame: bool) -> Columns | pl.DataFrame: ...
def final_table(f: Final, qids: Names, docnos: Names, *, frame: bool) -> Columns | pl.DataFrame:
    """The ``final`` table (plain columns or a frame) of :class:`Final` arrays."""
    if not frame:
        rr = f.rerank_score.tolist()
        return Columns(
            {
                "qid": qids.take(f.query),
                "docno": docnos.take(f.doc),
                "fused_rank": f.fused_rank.tolist(),
                "position_score": f.position_score.tolist(),
                "blend_weight": f.blend_weight.tolist(),
                "rerank_score": [v if h else None for v, h in zip(rr, f.has_rerank.tolist())],
                "final_score": f.final_score.tolist(),
                "final_rank": f.final_rank.tolist(),
            }
        )
    rr = pl.Series("rerank_score", f.rerank_score, dtype=pl.Float64)
    if not f.has_rerank.all():
        rr = rr.set(pl.Series(~f.has_rerank), None)  # type: ignore[arg-type]
    return pl.DataFrame(
        {
            "qid": qids.gather(f.query),
            "docno": docnos.gather(f.doc),
            "fused_rank": f.fused_rank,
            "position_score": f.position_score,
            "blend_weight": f.blend_weight,
            "rerank_score": rr,
            "final_score": f.final_score,
            "final_rank": f.final_rank,
        },
        schema=SCHEMAS["final"],
    )


def code_run(qid: Sequence[str] | pl.Series, docno: Sequence[str] | pl.Series):
    """``(order, query, doc, qids, docnos)`` of a run-like table (``fused`` or ``final`` rows):
    codes of each row, and ``order``, the stable permutation grouping the rows by query (queries in
    first-seen order) — the layout the kernels read."""
    q, qids = first_seen_codes(qid)
    d, docnos = sorted_codes(docno)
    order = np.argsort(q, kind="stable")
    return order, q, d, qids, docnos


def scores_for(
    qids: Sequence[str] | pl.Series,
    docnos: Sequence[str] | pl.Series,
    table: Columns | pl.DataFrame | None,
    column: str = "rerank_score",
) -> tuple[np.ndarray, np.ndarray]:
    """``(value, has)`` for each (qid, docno) from the rows of ``table`` (one query's plain columns or
    a frame; null values count as missing; the first row of a pair wins).

    >>> scores_for(["q", "q"], ["a", "b"], Columns({"qid": ["q"], "docno": ["b"], "rerank_score": [0.5]}))
    (array([0. , 0.5]), array([False,  True]))
    """
    n = len(docnos)
    vals, has = np.zeros(n), np.zeros(n, dtype=bool)
    if table is None or n == 0:
        return vals, has
    if isinstance(table, pl.DataFrame):
        if table.height == 0:
            return vals, has
        t = table.select(pl.col("qid").cast(pl.String), pl.col("docno").cast(pl.String), pl.col(column))
        t = t.drop_nulls(column).unique(["qid", "docno"], keep="first", maintain_order=True)
        keys = pl.DataFrame(
            {"qid": qids, "docno": docnos, "_i": np.arange(n, dtype=np.int64)},
            schema={"qid": pl.String, "docno": pl.String, "_i": pl.Int64},
        )
        got = keys.join(t, on=["qid", "docno"], how="inner")
        idx = got["_i"].to_numpy()
        vals[idx] = got[column].cast(pl.Float64).to_numpy()
        has[idx] = True
        return vals, has
    score: dict[tuple[str, str], float] = {}
    for q, d, v in zip(table["qid"], table["docno"], table[column]):
        if v is not None:
            score.setdefault((q, d), float(v))
    for i, key in enumerate(zip(qids, docnos)):
        v = score.get(key)
        if v is not None:
            vals[i], has[i] = v, True
    return vals, has


__all__ = [
    "CodedLists",
    "Names",
    "Fused",
    "Final",
    "empty_fused",
    "empty_final",
    "segments",
    "changes",
    "block_sizes",
    "rank_within",
    "sort_order",
    "first_seen_codes",
    "sorted_codes",
    "code_run",
    "scores_for",
    "fused_table",
    "final_table",
]

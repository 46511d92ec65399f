"""Finish: dedupe (by docno, then by content digest), min-score, tag rank-lift, limit (docs/design.md, pipeline step 8).

:func:`finish` works on :class:`~qmdlab.pipeline.coded.Final` arrays of one query or of many (it is
part of :meth:`qmdlab.Lab.query` and of :func:`qmdlab.retune`) or on a ``final`` frame. What it
needs of the index — each document's content digest and tags — comes as :class:`DocFlags`
(:func:`doc_flags` of the ``doc_tags`` frame). Snippets with line numbers come from
:mod:`qmdlab.pipeline.results` (the same helper ``search`` uses) when
:class:`~qmdlab.pipeline.lab.Lab` builds the ``results`` table.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import NamedTuple, overload

import numpy as np
import polars as pl

from qmdlab.pipeline.coded import Final, Names, block_sizes, code_run, rank_within, segments
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.trace import SCHEMAS


class DocFlags(NamedTuple):
    """What finish needs of each document (indexed by document code)."""

    hash: np.ndarray | None
    """Content digest code (-1: none); None when content dedupe is off."""
    lift: np.ndarray | None
    """Whether its tags overlap the preferred tags; None when the tag lift is off."""


_CACHE: list = [None, {}]  # (weakref to a doc_tags frame, what was derived from it): one frame per index state


def _derived(doc_tags: pl.DataFrame) -> dict:
    """A dict kept for the ``doc_tags`` frame last asked about, so a lab that passes the same frame to
    every query reads it once."""
    ref = _CACHE[0]
    if ref is not None and ref() is doc_tags:
        return _CACHE[1]
    out: dict = {}
    try:
        _CACHE[:] = [weakref.ref(doc_tags), out]
    except TypeError:  # not weak-referenceable: no cache
        pass
    return out


def doc_hashes(doc_tags: pl.DataFrame) -> dict[str, str | None]:
    """``{docno: content digest}`` of ``doc_tags`` (the first row of a docno listed twice).

    >>> doc_hashes(pl.DataFrame({"docno": ["a", "b", "a"], "hash": ["x", None, "y"]}))
    {'a': 'x', 'b': None}
    """
    got = _derived(doc_tags)
    if "hash" not in got:
        out: dict[str, str | None] = {}
        for d, h in zip(doc_tags.get_column("docno").to_list(), doc_tags.get_column("hash").to_list()):
            out.setdefault(d, h)
        got["hash"] = out
    return got["hash"]


def lifted_docs(doc_tags: pl.DataFrame, tags: Sequence[str]) -> set[str]:
    """The docnos whose tags overlap ``tags`` (case-insensitive; the first row of a docno listed twice).

    >>> sorted(lifted_docs(pl.DataFrame({"docno": ["a", "b"], "tags": [["Git"], []]}), ["GIT"]))
    ['a']
    """
    want = frozenset(t.lower() for t in tags)
    got = _derived(doc_tags)
    key = ("lift", want)
    if key not in got:
        seen: set[str] = set()
        out: set[str] = set()
        for d, ts in zip(doc_tags.get_column("docno").to_list(), doc_tags.get_column("tags").to_list()):
            if d in seen:
                continue
            seen.add(d)
            if any(t is not None and t.lower() in want for t in ts or ()):
                out.add(d)
        got[key] = out
    return got[key]


def doc_flags(doc_tags: pl.DataFrame | None, docnos: Names, config: PipelineConfig) -> DocFlags | None:
    """:class:`DocFlags` of the documents ``docnos`` (their codes) from ``doc_tags`` (``docno, tags``
    and, for content dedupe, ``hash``); None when neither content dedupe nor a tag lift applies."""
    if doc_tags is None:
        return None
    h = None
    if config.dedupe_content and "hash" in doc_tags.columns:
        hashes = doc_hashes(doc_tags)
        codes: dict[str, int] = {}
        h = np.array(
            [-1 if (x := hashes.get(d)) is None else codes.setdefault(x, len(codes)) for d in docnos.list],
            dtype=np.int64,
        )
    lift = None
    if config.tags and config.tag_lift > 0 and "tags" in doc_tags.columns:
        lifted = lifted_docs(doc_tags, config.tags)
        lift = np.array([d in lifted for d in docnos.list], dtype=bool)
    return None if h is None and lift is None else DocFlags(h, lift)


def content_duplicates(query: np.ndarray, doc: np.ndarray, hash_of_doc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(dup, kept)``: the rows (of rows grouped by query, in rank order) whose document's content
    digest equals that of a better-ranked row of the same query, and that row.

    >>> content_duplicates(np.array([0, 0, 0]), np.array([5, 6, 7]), np.array([-1] * 5 + [1, 2, 1]))
    (array([2]), array([0]))
    """
    h = hash_of_doc[doc]
    rows = np.flatnonzero(h >= 0)
    if not len(rows):
        e = np.zeros(0, np.int64)
        return e, e
    key = query[rows] * (int(h.max()) + 1) + h[rows]
    if len(rows) <= 256:  # a few rows (one query): a dict, fewer numpy calls
        first: dict[int, int] = {}
        kept = np.array([first.setdefault(k, r) for k, r in zip(key.tolist(), rows.tolist())], dtype=np.int64)
    else:
        _, at, inverse = np.unique(key, return_index=True, return_inverse=True)
        kept = rows[at[inverse.reshape(-1)]]
    dup = kept != rows
    return rows[dup], kept[dup]


def _finish_rows(
    query: np.ndarray,
    doc: np.ndarray,
    score: np.ndarray,
    rank: np.ndarray,
    config: PipelineConfig,
    flags: DocFlags | None,
    unique: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, final_rank)``: the rows kept (of rows grouped by query), in output order, and their
    new ranks. ``unique``: no (query, document) pair is held twice."""
    n = len(query)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = segments(query)
    group = np.repeat(np.arange(len(starts)), block_sizes(starts, n))
    sel = np.arange(n, dtype=np.int64)
    if np.any((np.diff(rank) < 0) & (np.diff(group) == 0)):
        sel = np.lexsort((rank, group))  # by rank within each query (stable)
    if not unique:  # dedupe by (query, docno): the best-ranked row of a pair
        key = group[sel] * (int(doc.max()) + 1) + doc[sel]
        _, first = np.unique(key, return_index=True)
        sel = sel[np.sort(first)]
    if flags is not None and flags.hash is not None and config.dedupe_content:
        dup, _ = content_duplicates(group[sel], doc[sel], flags.hash)
        if len(dup):
            sel = np.delete(sel, dup)
    # min score, with the fallback probe for a query left with nothing
    s = score[sel]
    passed = s >= config.min_score
    if config.min_score_fallback > 0 and config.fallback_max > 0 and len(sel):
        g = group[sel]
        st = segments(g)
        qany = np.logical_or.reduceat(passed, st)
        if not qany.all():
            sizes = block_sizes(st, len(sel))
            probe = s >= config.min_score - config.min_score_fallback
            csum = np.cumsum(probe)
            before = np.repeat(csum[st] - probe[st], sizes)
            passed = np.where(np.repeat(~qany, sizes), probe & (csum - before <= int(config.fallback_max)), passed)
    sel = sel[passed]
    new = rank_within(segments(group[sel]), len(sel))
    if flags is not None and flags.lift is not None and config.tags and config.tag_lift > 0 and len(sel):
        lifted = flags.lift[doc[sel]]
        key = np.where(lifted, np.maximum(new - int(config.tag_lift), 1), new)
        order = np.lexsort((new, ~lifted, key, group[sel]))
        sel = sel[order]
        new = rank_within(segments(group[sel]), len(sel))
    keep = new <= config.limit
    if not keep.all():
        sel, new = sel[keep], new[keep]
    return sel, new


@overload
def finish(final: Final, config: PipelineConfig, doc_tags: DocFlags | None = None) -> Final: ...


@overload
def finish(final: pl.DataFrame, config: PipelineConfig, doc_tags: pl.DataFrame | None = None) -> pl.DataFrame: ...


def finish(final, config, doc_tags=None):
    """Dedupe by (qid, docno) and, with ``dedupe_content`` and content digests, by content digest
    (:func:`content_duplicates`: the better-ranked document stays); drop ``final_score < min_score``
    (with ``min_score_fallback`` > 0, a query left with nothing keeps its best ``fallback_max`` rows
    scoring at least ``min_score - min_score_fallback``: the fallback probe); renumber; move documents
    whose tags overlap ``tags`` up by at most ``tag_lift`` places (a lifted document at rank *r* goes
    just before the one at ``max(1, r - tag_lift)``); keep ``limit`` per query.

    :class:`~qmdlab.pipeline.coded.Final` arrays (with :class:`DocFlags`) give arrays; a frame (with
    the ``doc_tags`` frame: ``docno, tags`` and optionally ``hash``) gives a frame of the same columns.

    >>> f = pl.DataFrame({"qid": ["q"] * 3, "docno": ["a", "b", "a"], "final_score": [0.9, 0.5, 0.4],
    ...                   "final_rank": [1, 2, 3]})
    >>> finish(f, PipelineConfig(min_score=0.45, limit=5))["docno"].to_list()
    ['a', 'b']
    >>> h = pl.DataFrame({"docno": ["a", "b"], "tags": [[], []], "hash": ["x", "x"]})
    >>> finish(f, PipelineConfig(limit=5), doc_tags=h)["docno"].to_list()
    ['a']
    >>> t = pl.DataFrame({"docno": ["b"], "tags": [["git"]]})
    >>> finish(f, PipelineConfig(tags=("git",), tag_lift=1), doc_tags=t)["docno"].to_list()
    ['b', 'a']
    """
    if isinstance(final, pl.DataFrame):
        return _finish_frame(final, config, doc_tags)
    # rows from the coded lists hold each pair once
    unique = bool(len(final.pair) == 0 or final.pair[0] >= 0)
    sel, ranks = _finish_rows(
        final.query, final.doc, final.final_score, final.final_rank, config, doc_tags, unique=unique
    )
    return final.take(sel)._replace(final_rank=ranks)


def _finish_frame(final: pl.DataFrame, config: PipelineConfig, doc_tags: pl.DataFrame | None) -> pl.DataFrame:
    cols = [c for c in SCHEMAS["final"] if c in final.columns]
    if final.height == 0:
        return final.select(cols)
    order, q, d, _, docnos = code_run(final["qid"], final["docno"])
    flags = doc_flags(doc_tags, docnos, config)
    score = final["final_score"].cast(pl.Float64).fill_null(float("nan")).to_numpy()[order]
    rank = final["final_rank"].to_numpy().astype(np.int64)[order]
    sel, ranks = _finish_rows(q[order], d[order], score, rank, config, flags, unique=False)
    out = final.select(cols)[order[sel]]
    return out.with_columns(final_rank=pl.Series(ranks, dtype=pl.Int64))


__all__ = ["finish", "DocFlags", "doc_flags", "doc_hashes", "lifted_docs", "content_duplicates"]

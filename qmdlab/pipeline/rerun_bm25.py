"""Re-run the BM25 lists of recorded traces under new lexical knobs (the fast re-query path).

:func:`qmdlab.retune` never touches the index, so it cannot change what BM25 returned. The
lexical knobs of :class:`~qmdlab.pipeline.config.PipelineConfig` (``bm25_weight_*``,
``bm25_prefix``, ``bm25_stopwords``, ``bm25_mode``, ``bm25_min_match``) change the BM25 lists
themselves, so :func:`rerun_bm25` re-runs every recorded ``fts`` list (the original query and each
``lex`` line, with the recorded sub-query text) against the index and swaps the new hits in;
the vector lists, expansions and rerank scores are kept. Then :func:`qmdlab.retune` /
:class:`qmdlab.eval.study.Study` re-fuse as usual.

One BM25 call per recorded list: on CISI (1,460 abstracts, long queries) about 15 ms per query,
on the default corpus about 2 ms, against ~0.1–0.3 ms per query for a re-fusion
(``experiments/refuse_timing/``)
(``tests/pipeline/test_rerun_bm25.py`` checks equality with a fresh pipeline run). A :class:`Bm25RerunCache`
remembers the lists per knob setting, so moving a fusion slider after a lexical one costs
nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import polars as pl

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.retrieve import Route, hits_frame
from qmdlab.pipeline.trace import SCHEMAS, Trace

LEXICAL_FIELDS = tuple(f for f in PipelineConfig.stage_fields()["bm25"] if f != "list_limit")
"""The :class:`PipelineConfig` fields that change BM25 results (and need :func:`rerun_bm25`): the
``bm25`` stage's options but ``list_limit``, which every list shares (:func:`lexical_key` adds it)."""


def lexical_key(config: PipelineConfig) -> tuple:
    """The lexical knobs of ``config`` (plus ``list_limit``) as a hashable key."""
    return tuple(getattr(config, f) for f in LEXICAL_FIELDS) + (config.list_limit,)


class Bm25RerunCache:
    """``{lexical_key: lists}`` for one recorded ``lists`` table (the notebook keeps one)."""

    def __init__(self, maxsize: int = 32):
        self.maxsize = maxsize
        self._store: dict[tuple, pl.DataFrame] = {}

    def get(self, key: tuple) -> pl.DataFrame | None:
        return self._store.get(key)

    def put(self, key: tuple, lists: pl.DataFrame) -> None:
        if len(self._store) >= self.maxsize:
            self._store.pop(next(iter(self._store)))
        self._store[key] = lists


def rerun_bm25(
    lists: pl.DataFrame,
    index: Any,
    config: PipelineConfig,
    *,
    collections: Sequence[str] | None = None,
    cache: Bm25RerunCache | None = None,
) -> pl.DataFrame:
    """``lists`` with every ``fts`` list re-run by BM25 under ``config``'s lexical knobs.

    Parameters
    ----------
    lists : polars.DataFrame
        A recorded ``lists`` table (one or many queries).
    index : qmdlab.store.Index
        The index the trace was recorded on.
    config : PipelineConfig
        Lexical knobs, ``list_limit`` and the list weights of the new lists.
    collections : sequence of str, optional
        Restrict the searches (as the recorded run did).
    cache : Bm25RerunCache, optional
        Reuse the lists of a knob setting seen before.

    Returns
    -------
    polars.DataFrame
        Same schema; vector rows unchanged, BM25 rows replaced (a list that now matches
        nothing simply has no rows).
    """
    from qmdlab.search import bm25_search

    key = lexical_key(config)
    if cache is not None and (hit := cache.get(key)) is not None:
        return hit
    keep = lists.filter(pl.col("source") != "fts")
    routes = (
        lists.filter(pl.col("source") == "fts")
        .select("qid", "list_id", "query_type", "subquery")
        .unique(maintain_order=True)
    )
    frames = [keep]
    knobs = config.lexical()
    memo: dict[str, list] = {}
    for qid, list_id, qt, sub in routes.iter_rows():
        if sub not in memo:
            memo[sub] = bm25_search(index, sub, limit=config.list_limit, collections=collections, **knobs)
        r = Route("fts", qt, sub)
        frames.append(hits_frame(qid, list_id, r, memo[sub], config.list_weight("fts", qt)))
    out = pl.concat([f.select(list(SCHEMAS["lists"])) for f in frames], how="vertical")
    order = lists.select("qid").unique(maintain_order=True).with_row_index("_q")
    out = out.join(order, on="qid", how="left").sort(["_q", "list_id", "rank"]).drop("_q")
    if cache is not None:
        cache.put(key, out)
    return out


def rerun_bm25_trace(trace: Trace, index: Any, config: PipelineConfig, **kwargs: Any) -> Trace:
    """``trace`` with :func:`rerun_bm25` lists (fused/final are stale until :func:`qmdlab.retune`)."""
    return dataclasses.replace(trace, lists=rerun_bm25(trace.lists, index, config, **kwargs))


__all__ = ["rerun_bm25", "rerun_bm25_trace", "Bm25RerunCache", "LEXICAL_FIELDS", "lexical_key"]

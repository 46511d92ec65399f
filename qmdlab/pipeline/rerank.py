"""Rerank: (query, selected chunk) → P(yes), cached, fail-open (docs/design.md, pipeline step 6).

The reranker is used through ``score_cached`` when it has one (the
:class:`qmdlab.models.CachedReranker`), which reports per pair whether the score
came from the cache. Any exception from the model, or an answer of the wrong
length or outside [0, 1], leaves the ``rerank`` table empty and adds a note: the
blend then keeps fusion order. The query never fails because of the reranker.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import polars as pl

from qmdlab.models.cached import text_hash as chunk_hash  # sha256 of the chunk text, as the cache keys it
from qmdlab.pipeline.trace import Columns, empty


class Reranked(NamedTuple):
    """The ``rerank`` rows of one query plus notes ``(stage, message)``."""

    table: pl.DataFrame
    notes: list[tuple[str, str]]


class RerankedColumns(NamedTuple):
    """:class:`Reranked` with the table as :class:`~qmdlab.pipeline.trace.Columns`."""

    table: Columns
    notes: list[tuple[str, str]]


def rerank(reranker: Any, query: str, selected: pl.DataFrame, *, qid: str, budget_s: float | None = None) -> Reranked:
    """Score every selected chunk (:func:`rerank_columns`, the table as a frame)."""
    sel = {c: selected.get_column(c).to_list() for c in ("docno", "chunk_id", "text")}
    got = rerank_columns(reranker, query, sel, qid=qid, budget_s=budget_s)
    table = got.table.frame("rerank") if got.table["qid"] else empty("rerank")
    return Reranked(table, got.notes)


def rerank_columns(
    reranker: Any, query: str, selected: dict[str, list], *, qid: str, budget_s: float | None = None
) -> RerankedColumns:
    """Score every selected chunk; the ``rerank`` rows as plain columns.

    Parameters
    ----------
    reranker : Reranker or None
    query : str
    selected : dict of lists
        ``docno, chunk_id, text`` columns (:func:`qmdlab.pipeline.select.select_chunk_columns`).
    qid : str
    budget_s : float, optional
        Seconds the model call may take (``PipelineConfig.stage_budget_s``; 0/None = unbounded);
        past it the call is stopped and fusion order kept (:mod:`qmdlab.pipeline.budget`).
    """
    from qmdlab.pipeline.budget import StageBusy, StageTimeout, call_with_budget

    none = Columns.empty("rerank")
    if reranker is None:
        return RerankedColumns(none, [("rerank", "no reranker: fusion order kept")])
    texts = selected["text"]
    if not texts:
        return RerankedColumns(none, [])
    try:
        if hasattr(reranker, "score_cached"):
            pairs = call_with_budget(
                reranker.score_cached,
                query,
                texts,
                budget_s=budget_s,
                model=reranker,
                peek=getattr(reranker, "peek_cached", None),
            )
            scores = [float(s) for s, _ in pairs]
            cached = [bool(c) for _, c in pairs]
        else:
            scores = [
                float(s) for s in call_with_budget(reranker.score, query, texts, budget_s=budget_s, model=reranker)
            ]
            cached = [False] * len(scores)
        if len(scores) != len(texts):
            raise ValueError(f"reranker returned {len(scores)} scores for {len(texts)} texts")
        bad = [s for s in scores if not (0.0 <= s <= 1.0) or math.isnan(s)]
        if bad:
            raise ValueError(f"reranker scores outside [0, 1]: {bad[:3]}")
    except StageTimeout:
        return RerankedColumns(
            none,
            [
                (
                    "rerank",
                    f"reranker over its {budget_s:g} s budget (stage_budget_s; the "
                    "call was stopped): rerank cut, fusion order kept",
                )
            ],
        )
    except StageBusy as err:
        return RerankedColumns(none, [("rerank", f"reranker skipped ({err}): fusion order kept")])
    except Exception as err:  # fail-open: degrade to fusion order and say so
        return RerankedColumns(none, [("rerank", f"reranker failed ({type(err).__name__}: {err}): fusion order kept")])
    table = Columns(
        {
            "qid": [qid] * len(texts),
            "docno": list(selected["docno"]),
            "chunk_id": list(selected["chunk_id"]),
            "chunk_hash": [chunk_hash(t) for t in texts],
            "rerank_score": scores,
            "cached": cached,
        }
    )
    n_cached = sum(cached)
    notes = [("rerank", f"{len(texts)} chunks scored ({n_cached} from cache)")]
    return RerankedColumns(table, notes)


__all__ = ["rerank", "rerank_columns", "Reranked", "RerankedColumns", "chunk_hash"]

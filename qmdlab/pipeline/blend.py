"""Blend: fused candidates + rerank scores → the ranked ``final`` table.

Every method is ``final_score = w · position_score + (1 − w) · rerank_score``
(:func:`blend_formula`); a method is one function in :data:`METHODS` that chooses
``position_score`` and the weight ``w``:

============== ===================================== ==============================
method          position_score                         w (``blend_weight``)
============== ===================================== ==============================
``position``    ``1 / fused_rank`` (qmd)               band weight of the fused rank
``score``       ``fused_score / max fused_score``      band weight of the fused rank
``rerank_only`` ``1 / fused_rank``                     0
``none``        ``1 / fused_rank``                     1
============== ===================================== ==============================

A candidate without a rerank score (reranker off or failed, or promoted by a
retune with no cached score) gets ``w = 1``: it keeps its position score, so with
no reranker at all the final order is the fusion order. Ties in ``final_score``
go to the better fused rank, then to the docno.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, overload

import numpy as np
import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.coded import (
    Final,
    Fused,
    block_sizes,
    code_run,
    empty_final,
    final_table,
    rank_within,
    segments,
    sort_order,
)
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.trace import empty


class Candidates(NamedTuple):
    """What a blend method reads: the candidates' fused ranks and scores, rows grouped by query
    (``starts``: each query's first row)."""

    fused_rank: np.ndarray
    fused_score: np.ndarray
    starts: np.ndarray


def band_weight(fused_rank: np.ndarray, bands: tuple[int, int], weights: tuple[float, float, float]) -> np.ndarray:
    """qmd's position weight: ``weights[0]`` for ranks ``1..bands[0]``, ``weights[1]`` up to
    ``bands[1]``, ``weights[2]`` after.

    >>> band_weight(np.array([1, 3, 4, 10, 11]), (3, 10), (0.75, 0.6, 0.4)).tolist()
    [0.75, 0.75, 0.6, 0.6, 0.4]
    """
    w1, w2, w3 = (float(x) for x in weights)
    return np.where(fused_rank <= bands[0], w1, np.where(fused_rank <= bands[1], w2, w3))


def reciprocal_rank(fused_rank: np.ndarray) -> np.ndarray:
    """``1 / fused_rank``.

    >>> reciprocal_rank(np.array([1, 4])).tolist()
    [1.0, 0.25]
    """
    return 1.0 / fused_rank.astype(np.float64)


def normalised_score(c: Candidates) -> np.ndarray:
    """``fused_score / max fused_score`` of the query (0 when the best is not positive).

    >>> normalised_score(Candidates(np.array([1, 2]), np.array([0.5, 0.25]), np.array([0]))).tolist()
    [1.0, 0.5]
    """
    n = len(c.fused_score)
    top = np.repeat(np.maximum.reduceat(c.fused_score, c.starts), block_sizes(c.starts, n))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(top > 0, c.fused_score / top, 0.0)


def blend_formula(position_score: np.ndarray, weight: np.ndarray, rerank_score: np.ndarray) -> np.ndarray:
    """``w · position_score + (1 − w) · rerank_score``.

    >>> blend_formula(np.array([1.0]), np.array([0.75]), np.array([0.2])).tolist() == [0.75 + 0.25 * 0.2]
    True
    """
    return weight * position_score + (1.0 - weight) * rerank_score


# -- the methods (name → function: METHODS): (position_score, w) ----------------------------
def position(c: Candidates, config: PipelineConfig) -> tuple[np.ndarray, np.ndarray]:
    """qmd's blend: the reciprocal fused rank, weighted by the rank's band."""
    return reciprocal_rank(c.fused_rank), band_weight(c.fused_rank, config.blend_bands, config.blend_weights)


def score(c: Candidates, config: PipelineConfig) -> tuple[np.ndarray, np.ndarray]:
    """The fused score over the query's best, weighted by the rank's band."""
    return normalised_score(c), band_weight(c.fused_rank, config.blend_bands, config.blend_weights)


def rerank_only(c: Candidates, config: PipelineConfig) -> tuple[np.ndarray, np.ndarray]:
    """The rerank score alone (the position score only where there is none)."""
    return reciprocal_rank(c.fused_rank), np.zeros(len(c.fused_rank))


def none(c: Candidates, config: PipelineConfig) -> tuple[np.ndarray, np.ndarray]:
    """The fusion order: the rerank score is ignored."""
    return reciprocal_rank(c.fused_rank), np.ones(len(c.fused_rank))


METHODS: dict[str, Callable[[Candidates, PipelineConfig], tuple[np.ndarray, np.ndarray]]] = {
    "position": position,
    "score": score,
    "rerank_only": rerank_only,
    "none": none,
}
"""Every blend method, by name (``PipelineConfig.blend``)."""


def method(name: str) -> Callable[[Candidates, PipelineConfig], tuple[np.ndarray, np.ndarray]]:
    """The function of blend method ``name``; an unknown name is a :class:`ConfigError`."""
    try:
        return METHODS[name]
    except KeyError:
        raise ConfigError(f"unknown blend method {name!r}; choose one of: {', '.join(METHODS)}") from None


@overload
def blend(candidates: Fused, rerank: tuple[np.ndarray, np.ndarray] | None, config: PipelineConfig) -> Final: ...


@overload
def blend(candidates: pl.DataFrame, rerank: pl.DataFrame | None, config: PipelineConfig) -> pl.DataFrame: ...


def blend(candidates, rerank, config):
    """Blend candidates with rerank scores under ``config.blend``; the stage's one function.

    Parameters
    ----------
    candidates : Fused or polars.DataFrame
        :class:`~qmdlab.pipeline.coded.Fused` arrays (usually :func:`~qmdlab.pipeline.fuse.candidates`
        of them), or a frame with ``qid, docno, fused_rank, fused_score``.
    rerank : (scores, has) or polars.DataFrame or None
        With arrays: each candidate's rerank score and whether it has one. With a frame:
        ``qid, docno, rerank_score`` rows (missing rows mean "no rerank score"). None: rerank off.
    config : PipelineConfig

    Returns
    -------
    Final or polars.DataFrame
        :class:`~qmdlab.pipeline.coded.Final` arrays, or the ``final`` frame: all candidates, ranked
        by ``final_score`` within each query.
    """
    fn = method(config.blend)
    if isinstance(candidates, pl.DataFrame):
        return _blend_frame(candidates, rerank, config, fn)
    n = len(candidates.query)
    if rerank is None:
        rr, has = np.zeros(n), np.zeros(n, dtype=bool)
    else:
        rr, has = rerank
    return _blend(
        candidates.query,
        candidates.doc,
        candidates.pair,
        candidates.fused_rank,
        candidates.fused_score,
        rr,
        has,
        config,
        fn,
    )


def _blend(query, doc, pair, fused_rank, fused_score, rr, has, config, fn) -> Final:
    """The blend of candidate rows grouped by query."""
    n = len(query)
    if n == 0:
        return empty_final()
    starts = segments(query)
    pos, w = fn(Candidates(fused_rank, fused_score, starts), config)
    w = np.where(has, w, 1.0)
    final = np.where(has, blend_formula(pos, w, rr), pos)
    # final_score desc, then fused_rank, then docno, within each query
    group = np.repeat(np.arange(len(starts)), block_sizes(starts, n))
    n_doc = int(doc.max()) + 1
    order = sort_order(group, final, fused_rank * n_doc + doc, (int(fused_rank.max()) + 1) * n_doc)
    q = query[order]
    return Final(
        q,
        doc[order],
        pair[order],
        fused_rank[order],
        pos[order],
        w[order],
        np.where(has, rr, 0.0)[order],
        has[order],
        final[order],
        rank_within(segments(q), n),
    )


def _blend_frame(cands: pl.DataFrame, rerank: pl.DataFrame | None, config: PipelineConfig, fn) -> pl.DataFrame:
    if cands.height == 0:
        return empty("final")
    df = cands.select("qid", "docno", "fused_rank", "fused_score")
    if rerank is not None and rerank.height:
        scores = rerank.select("qid", "docno", pl.col("rerank_score").cast(pl.Float64))
        df = df.join(scores, on=["qid", "docno"], how="left", maintain_order="left")
    else:
        df = df.with_columns(rerank_score=pl.lit(None, dtype=pl.Float64))
    order, q, d, qids, docnos = code_run(df["qid"], df["docno"])
    rr = df["rerank_score"]
    has = rr.is_not_null().to_numpy()[order]
    f = _blend(
        q[order],
        d[order],
        np.full(len(order), -1, dtype=np.int64),
        df["fused_rank"].to_numpy().astype(np.int64)[order],
        df["fused_score"].to_numpy().astype(np.float64)[order],
        rr.fill_null(0.0).to_numpy()[order],
        has,
        config,
        fn,
    )
    return final_table(f, qids, docnos, frame=True)


__all__ = [
    "blend",
    "METHODS",
    "method",
    "Candidates",
    "position",
    "score",
    "rerank_only",
    "none",
    "band_weight",
    "reciprocal_rank",
    "normalised_score",
    "blend_formula",
]

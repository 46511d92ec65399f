"""Blend: fused candidates + rerank scores → the ranked ``final`` table.

Every method is ``final_score = w · position_score + (1 − w) · rerank_score``
(:func:`blend_formula`); the methods differ only in how ``position_score`` and
the weight ``w`` are chosen:

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
go to the better fused rank.
"""
from __future__ import annotations

import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.config import BLEND_METHODS, PipelineConfig
from qmdlab.pipeline.trace import SCHEMAS, empty, sort_within_qid


def band_weight(fused_rank: pl.Expr, bands: tuple[int, int], weights: tuple[float, float, float]) -> pl.Expr:
    """qmd's position weight: ``weights[0]`` for ranks ``1..bands[0]``, ``weights[1]`` up to
    ``bands[1]``, ``weights[2]`` after.

    >>> df = pl.DataFrame({"r": [1, 3, 4, 10, 11]})
    >>> df.select(band_weight(pl.col("r"), (3, 10), (0.75, 0.6, 0.4)).alias("w"))["w"].to_list()
    [0.75, 0.75, 0.6, 0.6, 0.4]
    """
    return (pl.when(fused_rank <= bands[0]).then(pl.lit(float(weights[0])))
            .when(fused_rank <= bands[1]).then(pl.lit(float(weights[1])))
            .otherwise(pl.lit(float(weights[2]))))


def reciprocal_rank(fused_rank: pl.Expr) -> pl.Expr:
    """``1 / fused_rank``.

    >>> pl.DataFrame({"r": [1, 4]}).select(reciprocal_rank(pl.col("r")).alias("p"))["p"].to_list()
    [1.0, 0.25]
    """
    return 1.0 / fused_rank.cast(pl.Float64)


def normalised_score(fused_score: pl.Expr) -> pl.Expr:
    """``fused_score / max fused_score`` of the query (0 when the best is not positive).

    >>> df = pl.DataFrame({"qid": ["q", "q"], "s": [0.5, 0.25]})
    >>> df.select(normalised_score(pl.col("s")).alias("p"))["p"].to_list()
    [1.0, 0.5]
    """
    top = fused_score.max().over("qid")
    return pl.when(top > 0).then(fused_score / top).otherwise(pl.lit(0.0))


def blend_formula(position_score: pl.Expr, weight: pl.Expr, rerank_score: pl.Expr) -> pl.Expr:
    """``w · position_score + (1 − w) · rerank_score``.

    >>> df = pl.DataFrame({"p": [1.0], "w": [0.75], "r": [0.2]})
    >>> df.select(blend_formula(pl.col("p"), pl.col("w"), pl.col("r")).alias("f"))["f"].to_list() == [0.75 + 0.25 * 0.2]
    True
    """
    return weight * position_score + (1.0 - weight) * rerank_score


def blend(candidates: pl.DataFrame, rerank: pl.DataFrame | None, config: PipelineConfig) -> pl.DataFrame:
    """Blend candidates (``fused`` rows) with rerank scores under ``config.blend``.

    Parameters
    ----------
    candidates : polars.DataFrame
        ``qid, docno, fused_rank, fused_score`` (usually the top ``candidate_limit`` of ``fused``).
    rerank : polars.DataFrame or None
        ``qid, docno, rerank_score``, at most one row per (qid, docno); missing rows
        mean "no rerank score".
    config : PipelineConfig

    Returns
    -------
    polars.DataFrame
        The ``final`` schema, all candidates, ranked by ``final_score``.
    """
    if config.blend not in BLEND_METHODS:
        raise ConfigError(f"unknown blend method {config.blend!r}; choose one of: {', '.join(BLEND_METHODS)}")
    if candidates.height == 0:
        return empty("final")
    df = candidates.select("qid", "docno", "fused_rank", "fused_score")
    if rerank is not None and rerank.height:
        scores = rerank.select("qid", "docno", pl.col("rerank_score").cast(pl.Float64))
        df = df.join(scores, on=["qid", "docno"], how="left")
    else:
        df = df.with_columns(rerank_score=pl.lit(None, dtype=pl.Float64))
    rank = pl.col("fused_rank")
    if config.blend == "score":
        pos = normalised_score(pl.col("fused_score"))
    else:
        pos = reciprocal_rank(rank)
    if config.blend in ("position", "score"):
        w = band_weight(rank, config.blend_bands, config.blend_weights)
    elif config.blend == "rerank_only":
        w = pl.lit(0.0)
    else:
        w = pl.lit(1.0)
    w = pl.when(pl.col("rerank_score").is_null()).then(pl.lit(1.0)).otherwise(w)
    df = df.with_columns(position_score=pos, blend_weight=w)
    df = df.with_columns(final_score=pl.when(pl.col("rerank_score").is_null())
                         .then(pl.col("position_score"))
                         .otherwise(blend_formula(pl.col("position_score"), pl.col("blend_weight"),
                                                  pl.col("rerank_score"))))
    return rank_final(df)


def rank_final(df: pl.DataFrame) -> pl.DataFrame:
    """Sort by final_score desc, fused_rank within each qid (queries in first-seen order)
    and number ``final_rank`` from 1."""
    out = sort_within_qid(df, ["final_score", "fused_rank", "docno"], [True, False, False])
    out = out.with_columns(final_rank=(pl.int_range(pl.len()).over("qid") + 1).cast(pl.Int64))
    return out.select([pl.col(c).cast(t) for c, t in SCHEMAS["final"].items()])


__all__ = ["blend", "band_weight", "reciprocal_rank", "normalised_score", "blend_formula", "rank_final"]

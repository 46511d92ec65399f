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
from qmdlab.pipeline.ranking import SMALL_ROWS, ranks_within_qid
from qmdlab.pipeline.trace import SCHEMAS, Columns, as_frame, empty, height, sort_within_qid


def band_weight(fused_rank: pl.Expr, bands: tuple[int, int], weights: tuple[float, float, float]) -> pl.Expr:
    """qmd's position weight: ``weights[0]`` for ranks ``1..bands[0]``, ``weights[1]`` up to
    ``bands[1]``, ``weights[2]`` after.

    >>> df = pl.DataFrame({"r": [1, 3, 4, 10, 11]})
    >>> df.select(band_weight(pl.col("r"), (3, 10), (0.75, 0.6, 0.4)).alias("w"))["w"].to_list()
    [0.75, 0.75, 0.6, 0.6, 0.4]
    """
    return (
        pl.when(fused_rank <= bands[0])
        .then(pl.lit(float(weights[0])))
        .when(fused_rank <= bands[1])
        .then(pl.lit(float(weights[1])))
        .otherwise(pl.lit(float(weights[2])))
    )


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
    if candidates.height <= SMALL_ROWS:
        small = _blend_small(candidates, rerank, config)
        if small is not None:
            return small
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
    df = df.with_columns(
        final_score=pl.when(pl.col("rerank_score").is_null())
        .then(pl.col("position_score"))
        .otherwise(blend_formula(pl.col("position_score"), pl.col("blend_weight"), pl.col("rerank_score")))
    )
    return rank_final(df)


def _blend_small(candidates: pl.DataFrame, rerank: pl.DataFrame | None, config: PipelineConfig) -> pl.DataFrame | None:
    """:func:`blend` in plain Python (:func:`_blend_rows`; a few candidates of one query: polars'
    per-call cost would dominate)."""
    qids, docs, ranks, fscores = (
        candidates.get_column(c).to_list() for c in ("qid", "docno", "fused_rank", "fused_score")
    )
    rr = None
    if rerank is not None and rerank.height:
        rr = [rerank.get_column(c).to_list() for c in ("qid", "docno", "rerank_score")]
    out = _blend_rows(qids, docs, ranks, fscores, rr, config)
    return None if out is None else out.frame("final")


def blend_columns(candidates: Columns, rerank: Columns | None, config: PipelineConfig) -> Columns | None:
    """:func:`blend` of plain columns (``fused`` rows and ``rerank`` rows of one query): the same
    rows and floats, as :class:`~qmdlab.pipeline.trace.Columns` of ``final``. ``None`` where
    :func:`blend` must run (more than :data:`SMALL_ROWS` candidates, a null rank or score, a
    pair scored twice)."""
    if config.blend not in BLEND_METHODS:
        raise ConfigError(f"unknown blend method {config.blend!r}; choose one of: {', '.join(BLEND_METHODS)}")
    n = height(candidates)
    if n == 0:
        return Columns.empty("final")
    if n > SMALL_ROWS:
        return None
    rr = None
    if rerank is not None and height(rerank):
        rr = [rerank["qid"], rerank["docno"], rerank["rerank_score"]]
    return _blend_rows(
        candidates["qid"], candidates["docno"], candidates["fused_rank"], candidates["fused_score"], rr, config
    )


def _blend_rows(
    qids: list, docs: list, ranks: list, fscores: list, rerank: list[list] | None, config: PipelineConfig
) -> Columns | None:
    """The blend of candidates given as columns, with ``rerank`` as ``[qids, docnos, scores]``; the
    same formulas, floats and order as the polars path. ``None`` (use polars) when ``rerank`` scores
    a (qid, docno) pair twice (the join would duplicate the candidate) or a rank or score is null."""
    scores: dict[tuple[str, str], float | None] = {}
    if rerank is not None:
        for q, d, v in zip(*rerank):
            if (q, d) in scores:
                return None
            scores[(q, d)] = None if v is None else float(v)
    order: dict[str, int] = {}
    top: dict[str, float] = {}
    for q, f in zip(qids, fscores):
        order.setdefault(q, len(order))
        if f is not None and (q not in top or f > top[q]):
            top[q] = f
    if any(r is None or f is None for r, f in zip(ranks, fscores)):
        return None
    b1, b2 = config.blend_bands
    w1, w2, w3 = (float(x) for x in config.blend_weights)
    rows = []
    for q, d, r, f in zip(qids, docs, ranks, fscores):
        rr = scores.get((q, d))
        if config.blend == "score":
            t = top[q]
            pos = f / t if t > 0 else 0.0
        else:
            pos = 1.0 / float(r)
        if rr is None:
            w = 1.0
        elif config.blend in ("position", "score"):
            w = w1 if r <= b1 else (w2 if r <= b2 else w3)
        else:
            w = 0.0 if config.blend == "rerank_only" else 1.0
        final = pos if rr is None else w * pos + (1.0 - w) * rr
        rows.append((q, d, r, pos, w, rr, final))
    rows.sort(key=lambda x: (order[x[0]], -x[6], x[2], x[1]))
    out_rank = ranks_within_qid(x[0] for x in rows)
    cols = [list(c) for c in zip(*rows)]
    return Columns(
        {
            "qid": cols[0],
            "docno": cols[1],
            "fused_rank": cols[2],
            "position_score": cols[3],
            "blend_weight": cols[4],
            "rerank_score": cols[5],
            "final_score": cols[6],
            "final_rank": out_rank,
        }
    )


def rank_final(df: pl.DataFrame) -> pl.DataFrame:
    """Sort by final_score desc, fused_rank within each qid (queries in first-seen order)
    and number ``final_rank`` from 1."""
    out = sort_within_qid(df, ["final_score", "fused_rank", "docno"], [True, False, False])
    out = out.with_columns(final_rank=(pl.int_range(pl.len()).over("qid") + 1).cast(pl.Int64))
    return out.select([pl.col(c).cast(t) for c, t in SCHEMAS["final"].items()])


def run_blend(
    cands: Columns | pl.DataFrame, rerank: Columns | pl.DataFrame | None, config: PipelineConfig
) -> Columns | pl.DataFrame:
    """Blend as a query runs it: :func:`blend_columns` while the candidates and rerank rows are plain
    columns and it applies, else :func:`blend` on polars frames. ``rerank`` None = rerank off."""
    blended: Columns | pl.DataFrame | None = None
    if isinstance(cands, Columns) and (rerank is None or isinstance(rerank, Columns)):
        blended = blend_columns(cands, rerank, config)
    if blended is None:
        blended = blend(as_frame("fused", cands), None if rerank is None else as_frame("rerank", rerank), config)
    return blended


__all__ = [
    "run_blend",
    "blend",
    "blend_columns",
    "band_weight",
    "reciprocal_rank",
    "normalised_score",
    "blend_formula",
    "rank_final",
]

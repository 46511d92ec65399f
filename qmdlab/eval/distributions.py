"""Score distributions per stage for relevant vs non-relevant documents.

For the notebook's plots and for choosing a ``min_score``: qmd's blended score cannot be
thresholded (the fused #1 always scores ≥ 0.75), a rerank probability or a normalised
fusion score may be. :func:`score_distributions` gathers every score a trace recorded, one
row per (stage, query, document); :func:`summary` condenses it.
"""

from __future__ import annotations

import polars as pl

_STAGES = (
    ("lists", "score"),  # normalised backend score, one stage per source/query_type
    ("fused", "fused_score"),
    ("rerank", "rerank_score"),
    ("final", "final_score"),
)


def score_distributions(trace, qrels: pl.DataFrame) -> pl.DataFrame:
    """Every recorded score with the document's judgment.

    Parameters
    ----------
    trace : qmdlab.pipeline.trace.Trace
    qrels : pl.DataFrame
        ``qid, docno, grade``; only judged queries are kept, unjudged documents count as
        non-relevant (grade 0).

    Returns
    -------
    pl.DataFrame
        ``stage, qid, docno, score, grade, relevant``; ``stage`` is ``fts/original``,
        ``vec/hyde``, … for the retrieval lists, else ``fused``, ``rerank``, ``final``.

    Examples
    --------
    >>> from qmdlab.pipeline.trace import Trace
    >>> final = pl.DataFrame({"qid": ["1", "1"], "docno": ["a", "b"], "fused_rank": [1, 2],
    ...     "position_score": [1.0, 0.5], "blend_weight": [0.75] * 2, "rerank_score": [0.1, 0.9],
    ...     "final_score": [0.8, 0.6], "final_rank": [1, 2]})
    >>> d = score_distributions(Trace(final=final), pl.DataFrame({"qid": ["1"], "docno": ["b"], "grade": [2]}))
    >>> d.select("stage", "docno", "score", "relevant").rows()
    [('final', 'a', 0.8, False), ('final', 'b', 0.6, True)]
    """
    judged = qrels.select(pl.col("qid").cast(pl.Utf8), pl.col("docno").cast(pl.Utf8), pl.col("grade").cast(pl.Int64))
    qids = judged.select("qid").unique()
    parts = []
    for table, col in _STAGES:
        df = getattr(trace, table)
        if not df.height:
            continue
        stage = (pl.col("source") + "/" + pl.col("query_type")) if table == "lists" else pl.lit(table)
        parts.append(df.select(stage.alias("stage"), "qid", "docno", pl.col(col).cast(pl.Float64).alias("score")))
    if not parts:
        return pl.DataFrame(
            schema={
                "stage": pl.Utf8,
                "qid": pl.Utf8,
                "docno": pl.Utf8,
                "score": pl.Float64,
                "grade": pl.Int64,
                "relevant": pl.Boolean,
            }
        )
    out = pl.concat(parts).drop_nulls("score").join(qids, on="qid", how="semi")
    out = out.join(judged, on=["qid", "docno"], how="left").with_columns(pl.col("grade").fill_null(0))
    return out.with_columns((pl.col("grade") >= 1).alias("relevant"))


def summary(dist: pl.DataFrame) -> pl.DataFrame:
    """Per stage and relevance: ``n, mean, p10, median, p90`` of the scores, and the AUC of the
    stage's score at separating relevant from non-relevant documents (ties count ½).

    >>> d = pl.DataFrame({"stage": ["s"] * 4, "score": [0.9, 0.8, 0.3, 0.8], "relevant": [True, True, False, False]})
    >>> summary(d).filter(pl.col("relevant"))["auc"].to_list()  # pairs: (0.9>0.3, 0.9>0.8, 0.8>0.3, 0.8=0.8) / 4
    [0.875]
    """
    stats = dist.group_by("stage", "relevant").agg(
        pl.len().alias("n"),
        pl.col("score").mean().alias("mean"),
        pl.col("score").quantile(0.1).alias("p10"),
        pl.col("score").median().alias("median"),
        pl.col("score").quantile(0.9).alias("p90"),
    )
    ranked = dist.with_columns(pl.col("score").rank("average").over("stage").alias("_r"))
    auc = ranked.group_by("stage").agg(
        pl.col("_r").filter(pl.col("relevant")).sum().alias("_rs"),
        pl.col("relevant").sum().alias("_np"),
        (~pl.col("relevant")).sum().alias("_nn"),
    )
    auc = auc.with_columns(
        pl.when((pl.col("_np") > 0) & (pl.col("_nn") > 0))
        .then((pl.col("_rs") - pl.col("_np") * (pl.col("_np") + 1) / 2) / (pl.col("_np") * pl.col("_nn")))
        .otherwise(None)
        .alias("auc")
    ).select("stage", "auc")
    return stats.join(auc, on="stage", how="left").sort(["stage", "relevant"], descending=[False, True])

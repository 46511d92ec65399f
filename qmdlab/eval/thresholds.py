"""A min-score threshold helper: precision and recall of keeping results scoring ≥ t.

Counts are pooled over all judged queries (micro-averaged): ``precision(t)`` is the share of
kept results that are relevant, ``recall(t)`` the share of all judged-relevant documents that
are kept. Use it on a score that means the same across queries (a rerank probability, a
normalised fusion score), then set ``min_score`` in the pipeline config.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import polars as pl


def threshold_curve(
    run: pl.DataFrame, qrels: pl.DataFrame, *, score_col: str = "final_score", thresholds: Sequence[float] | None = None
) -> pl.DataFrame:
    """Precision/recall/F1 of the rule "keep results with ``score_col`` ≥ t".

    Parameters
    ----------
    run : pl.DataFrame
        ``qid, docno, <score_col>`` (e.g. a trace's ``final`` or ``rerank`` table).
    qrels : pl.DataFrame
        ``qid, docno, grade``; only its queries count.
    thresholds : sequence of float, optional
        Defaults to every distinct score in the run (each a point where the curve moves).

    Returns
    -------
    pl.DataFrame
        ``threshold, kept, relevant_kept, precision, recall, f1`` sorted by threshold.

    Examples
    --------
    >>> run = pl.DataFrame({"qid": ["1"] * 3, "docno": ["a", "b", "c"], "final_score": [0.9, 0.5, 0.2]})
    >>> qrels = pl.DataFrame({"qid": ["1", "1"], "docno": ["a", "z"], "grade": [1, 1]})
    >>> threshold_curve(run, qrels, thresholds=[0.5]).row(0)
    (0.5, 2, 1, 0.5, 0.5, 0.5)
    """
    judged = qrels.select(pl.col("qid").cast(pl.Utf8), pl.col("docno").cast(pl.Utf8), pl.col("grade"))
    total_rel = judged.filter(pl.col("grade") >= 1).height
    scored = (
        run.select(pl.col("qid").cast(pl.Utf8), pl.col("docno").cast(pl.Utf8), pl.col(score_col).alias("s"))
        .drop_nulls("s")
        .join(judged.select("qid").unique(), on="qid", how="semi")
        .join(judged, on=["qid", "docno"], how="left")
    )
    s = scored["s"].to_numpy()
    rel = scored["grade"].fill_null(0).to_numpy() >= 1
    ts = np.unique(s) if thresholds is None else np.asarray(sorted(thresholds), dtype=float)
    kept = np.array([(s >= t).sum() for t in ts], dtype=np.int64)
    hit = np.array([(rel & (s >= t)).sum() for t in ts], dtype=np.int64)
    precision = np.divide(hit, kept, out=np.zeros(len(ts)), where=kept > 0)
    recall = hit / total_rel if total_rel else np.zeros(len(ts))
    denom = precision + recall
    f1 = np.divide(2 * precision * recall, denom, out=np.zeros(len(ts)), where=denom > 0)
    return pl.DataFrame(
        {
            "threshold": ts.astype(float),
            "kept": kept,
            "relevant_kept": hit,
            "precision": precision,
            "recall": recall,
            "f1": f1,
        }
    )


def best_threshold(curve: pl.DataFrame, by: str = "f1", min_recall: float = 0.0) -> float:
    """The threshold maximising ``by`` among those keeping recall ≥ ``min_recall`` (lowest on ties).

    >>> c = pl.DataFrame({"threshold": [0.1, 0.5, 0.9], "f1": [0.4, 0.6, 0.6], "recall": [1.0, 0.8, 0.5]})
    >>> best_threshold(c), best_threshold(c, min_recall=0.9)
    (0.5, 0.1)
    """
    ok = curve.filter(pl.col("recall") >= min_recall)
    if not ok.height:
        raise ValueError(f"no threshold keeps recall >= {min_recall}")
    best = ok[by].max()
    return float(cast(float, ok.filter(pl.col(by) == best)["threshold"].min()))

"""Ranking of a ``fused`` frame the learned fuser builds (:mod:`qmdlab.pipeline.learned`).

The formula fusion methods rank inside their numpy stage function (:func:`qmdlab.pipeline.fuse.fuse`);
the learned fuser scores documents with a model over polars features and ranks them here, with the
same tie-breaks.
"""

from __future__ import annotations

import polars as pl

from qmdlab.pipeline.trace import SCHEMAS


def rank_fused(fused: pl.DataFrame) -> pl.DataFrame:
    """Sort by fused_score desc, best_rank, docno within each qid and number ``fused_rank``
    from 1. Queries keep the order of ``_qo`` when present (first seen in ``lists``),
    else of first appearance in ``fused``."""
    if "_qo" not in fused.columns:
        fused = fused.with_row_index("_row").with_columns(_qo=pl.col("_row").min().over("qid"))
    out = fused.sort(["_qo", "fused_score", "best_rank", "docno"], descending=[False, True, False, False])
    out = out.with_columns(fused_rank=(pl.int_range(pl.len()).over("_qo") + 1).cast(pl.Int64))
    return out.select([pl.col(c).cast(t) for c, t in SCHEMAS["fused"].items()])

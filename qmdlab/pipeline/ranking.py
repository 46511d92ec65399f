"""Ranking shared by the stages: number rows within their query, order a ``fused`` table.

Below every stage module that ranks (fuse, the learned fuser, blend, finish), so none of them
imports another for these.
"""

from __future__ import annotations

import polars as pl

from qmdlab.pipeline.trace import SCHEMAS

SMALL_ROWS = 2000
"""Below this many rows the grouping and ranking run in plain Python (one query of
:meth:`qmdlab.Lab.query`): each polars call costs ~0.1 ms however small its frame, and the
plain path gives the same table (``tests/pipeline/test_small_paths.py``)."""


def ranks_within_qid(qids) -> list[int]:
    """1-based rank of each row within its query, for rows already sorted by query then rank
    (the small paths' rank column).

    >>> ranks_within_qid(["a", "a", "b", "a"])
    [1, 2, 1, 1]
    """
    ranks, n, last = [], 0, object()
    for q in qids:
        n = n + 1 if q == last else 1
        last = q
        ranks.append(n)
    return ranks


def rank_fused(fused: pl.DataFrame) -> pl.DataFrame:
    """Sort by fused_score desc, best_rank, docno within each qid and number ``fused_rank``
    from 1. Queries keep the order of ``_qo`` when present (first seen in ``lists``),
    else of first appearance in ``fused``."""
    if "_qo" not in fused.columns:
        fused = fused.with_row_index("_row").with_columns(_qo=pl.col("_row").min().over("qid"))
    out = fused.sort(["_qo", "fused_score", "best_rank", "docno"], descending=[False, True, False, False])
    out = out.with_columns(fused_rank=(pl.int_range(pl.len()).over("_qo") + 1).cast(pl.Int64))
    return out.select([pl.col(c).cast(t) for c, t in SCHEMAS["fused"].items()])

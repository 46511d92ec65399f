"""Finish: dedupe, min-score, tag rank-lift, limit (DESIGN §3 step 8).

:func:`finish` works on the ``final`` table of many queries at once (it is part of
:func:`qmdlab.retune`). Snippets with line numbers come from :mod:`qmdlab.pipeline.results`
(the same helper ``search`` uses) when :class:`~qmdlab.pipeline.lab.Lab` builds the
``results`` table.
"""
from __future__ import annotations

from typing import Sequence

import polars as pl

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.trace import SCHEMAS, sort_within_qid


def tag_lift(final: pl.DataFrame, doc_tags: pl.DataFrame | None, tags: Sequence[str], places: int) -> pl.DataFrame:
    """Move documents whose tags overlap ``tags`` up by at most ``places`` positions.

    A lifted document at rank *r* is placed just before the document at rank
    ``max(1, r - places)``; everything else keeps its relative order. ``final_rank``
    is renumbered; scores are unchanged.

    >>> f = pl.DataFrame({"qid": ["q"] * 4, "docno": list("abcd"), "final_rank": [1, 2, 3, 4]})
    >>> t = pl.DataFrame({"docno": ["d"], "tags": [["git"]]})
    >>> tag_lift(f, t, ["git"], 2)["docno"].to_list()
    ['a', 'd', 'b', 'c']
    """
    if not tags or places <= 0 or doc_tags is None or final.height == 0:
        return final
    want = [t.lower() for t in tags]
    lifted = doc_tags.select("docno", _lift=pl.col("tags").list.eval(pl.element().str.to_lowercase().is_in(want))
                             .list.any()).unique("docno", keep="first")
    out = final.join(lifted, on="docno", how="left").with_columns(pl.col("_lift").fill_null(False))
    key = pl.when(pl.col("_lift")).then(pl.max_horizontal(pl.col("final_rank") - places, pl.lit(1))) \
        .otherwise(pl.col("final_rank"))
    out = sort_within_qid(out.with_columns(_key=key), ["_key", "_lift", "final_rank"], [False, True, False])
    out = out.with_columns(final_rank=(pl.int_range(pl.len()).over("qid") + 1).cast(pl.Int64))
    return out.drop("_lift", "_key")


def finish(final: pl.DataFrame, config: PipelineConfig, doc_tags: pl.DataFrame | None = None) -> pl.DataFrame:
    """Dedupe by (qid, docno), drop ``final_score < min_score``, apply the tag lift, keep ``limit``.

    >>> f = pl.DataFrame({"qid": ["q"] * 3, "docno": ["a", "b", "a"], "final_score": [0.9, 0.5, 0.4],
    ...                   "final_rank": [1, 2, 3]})
    >>> finish(f, PipelineConfig(min_score=0.45, limit=5))["docno"].to_list()
    ['a', 'b']
    """
    out = sort_within_qid(final, ["final_rank"]).unique(["qid", "docno"], keep="first", maintain_order=True)
    out = out.filter(pl.col("final_score") >= config.min_score)
    out = out.with_columns(final_rank=(pl.int_range(pl.len()).over("qid") + 1).cast(pl.Int64))
    out = tag_lift(out, doc_tags, config.tags, config.tag_lift)
    out = out.filter(pl.col("final_rank") <= config.limit)
    cols = [c for c in SCHEMAS["final"] if c in out.columns]
    return out.select(cols)


__all__ = ["finish", "tag_lift"]

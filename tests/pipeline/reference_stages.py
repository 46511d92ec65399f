"""The cheap stages written in polars, as the reference the numpy stage functions are tested against.

Fusion, the candidate cut, blend and finish once ran as these polars functions over the ``lists``,
``fused`` and ``final`` tables of many queries; the library now runs one numpy function per stage
over coded lists (:mod:`qmdlab.pipeline.coded`). These keep the polars formulation — group-by
sums, window maxima, sorts on string keys — so the differential tests can hold the two equal, frame
for frame (``tests/pipeline/test_stage_kernels.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.ranking import rank_fused
from qmdlab.pipeline.trace import SCHEMAS, empty, sort_within_qid

LIST_KEY = ["qid", "list_id"]
DOC_KEY = ["qid", "docno"]


# -- the ablation switches and list weights ------------------------------------------------
def reweight(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """Set ``weight`` from each row's (source, query_type) under ``config``."""
    w: Any = None
    for source, query_type in lists.select("source", "query_type").unique().sort(["source", "query_type"]).rows():
        try:
            weight = config.list_weight(source, query_type)
        except ConfigError:
            weight = 0.0
        cond = (pl.col("source") == source) & (pl.col("query_type") == query_type)
        w = (pl.when(cond) if w is None else w.when(cond)).then(pl.lit(weight))
    w = pl.lit(0.0) if w is None else w.otherwise(pl.lit(0.0))
    return lists.with_columns(weight=w.cast(pl.Float64))


def ablate(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """Drop vector lists (``vector``), HyDE lists (``hyde``), expansion lists (``expand``), ranks
    beyond ``list_limit``."""
    keep = pl.col("rank") <= config.list_limit
    if not config.vector:
        keep &= pl.col("source") != "vec"
    if not config.hyde:
        keep &= pl.col("query_type") != "hyde"
    if not config.expand:
        keep &= pl.col("query_type") == "original"
    return lists.filter(keep)


# -- fusion ------------------------------------------------------------------------------------
def rrf_term(k: float, weight: pl.Expr | float = pl.col("weight"), rank: pl.Expr = pl.col("rank")) -> pl.Expr:
    return weight / (k + rank.cast(pl.Float64))


def rank_bonus(best_rank: pl.Expr, bonus_rank1: float, bonus_rank23: float) -> pl.Expr:
    return (
        pl.when(best_rank == 1)
        .then(pl.lit(float(bonus_rank1)))
        .when(best_rank <= 3)
        .then(pl.lit(float(bonus_rank23)))
        .otherwise(pl.lit(0.0))
    )


def max_norm(score: pl.Expr = pl.col("score")) -> pl.Expr:
    top = score.max().over(LIST_KEY)
    return pl.when(top > 0).then(score / top).otherwise(pl.lit(0.0))


def min_max(score: pl.Expr = pl.col("score")) -> pl.Expr:
    lo = score.min().over(LIST_KEY)
    hi = score.max().over(LIST_KEY)
    return (score - lo) / pl.max_horizontal(hi - lo, pl.lit(1e-9))


def channel_norm(score: pl.Expr = pl.col("score")) -> pl.Expr:
    return pl.when(pl.col("source") == "vec").then(pl.max_horizontal(score, pl.lit(0.0))).otherwise(max_norm(score))


def channel_weight(config: PipelineConfig) -> pl.Expr:
    return (
        pl.when(pl.col("source") == "vec")
        .then(pl.lit(float(config.norm_weight_vec)))
        .otherwise(pl.lit(float(config.norm_weight_fts)))
    )


def gate(lists: pl.DataFrame, margin: float, max_take: int) -> pl.DataFrame:
    top = pl.col("score").max().over(LIST_KEY)
    admitted = (pl.col("score") >= top - margin) & (
        pl.col("score").rank("ordinal", descending=True).over(LIST_KEY) <= max_take
    )
    return lists.filter((pl.col("source") != "vec") | admitted)


def _aggregate(
    lists: pl.DataFrame,
    base: pl.Expr,
    *,
    bonus: Callable[[pl.Expr], pl.Expr] | None = None,
    multiply_by_n: bool = False,
) -> pl.DataFrame:
    """Group per (qid, docno): ``rrf_base = Σ base`` (entries summed in list_id order); add the
    bonus; rank within qid (queries in first-seen order)."""
    if lists.height == 0:
        return empty("fused")
    ordered = lists.with_row_index("_row").sort("list_id")
    g = (
        ordered.with_columns(_c=base)
        .group_by(DOC_KEY)
        .agg(
            rrf_base=pl.col("_c").sum(),
            best_rank=pl.col("rank").min().cast(pl.Int64),
            n_lists=pl.col("list_id").n_unique().cast(pl.Int64),
            _first=pl.col("_row").min(),
        )
    )
    if multiply_by_n:
        g = g.with_columns(rrf_base=pl.col("rrf_base") * pl.col("n_lists").cast(pl.Float64))
    b = bonus(pl.col("best_rank")) if bonus is not None else pl.lit(0.0)
    g = g.with_columns(bonus=b).with_columns(fused_score=pl.col("rrf_base") + pl.col("bonus"))
    return rank_fused(g.with_columns(_qo=pl.col("_first").min().over("qid")))


def qmd_rrf(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    return _aggregate(
        lists, rrf_term(config.rrf_k), bonus=lambda b: rank_bonus(b, config.bonus_rank1, config.bonus_rank23)
    )


def rrf(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    return _aggregate(lists, rrf_term(config.rrf_k, weight=pl.lit(1.0)))


def norm_sum(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    return _aggregate(lists, channel_weight(config) * channel_norm())


def gated_rrf(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    return rrf(gate(lists, config.gate_margin, config.gate_max_take), config)


def wsum_minmax(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    return _aggregate(lists, pl.col("weight") * min_max())


def combmnz(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    return _aggregate(lists, min_max(), multiply_by_n=True)


METHODS: dict[str, Callable[[pl.DataFrame, PipelineConfig], pl.DataFrame]] = {
    "qmd_rrf": qmd_rrf,
    "rrf": rrf,
    "norm_sum": norm_sum,
    "gated_rrf": gated_rrf,
    "wsum_minmax": wsum_minmax,
    "combmnz": combmnz,
}


def fuse(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    return METHODS[config.fusion](lists, config)


def contributions(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    if lists.height == 0:
        return lists.with_columns(contribution=pl.lit(0.0))
    method = config.fusion
    if method == "qmd_rrf":
        c = rrf_term(config.rrf_k)
    elif method == "rrf":
        c = rrf_term(config.rrf_k, weight=pl.lit(1.0))
    elif method == "norm_sum":
        c = channel_weight(config) * channel_norm()
    elif method == "gated_rrf":
        kept = (
            gate(lists, config.gate_margin, config.gate_max_take)
            .select("qid", "list_id", "rank")
            .with_columns(_kept=pl.lit(True))
        )
        out = lists.join(kept, on=["qid", "list_id", "rank"], how="left", maintain_order="left")
        return out.with_columns(
            contribution=pl.when(pl.col("_kept"))
            .then(rrf_term(config.rrf_k, weight=pl.lit(1.0)))
            .otherwise(pl.lit(0.0))
        ).drop("_kept")
    elif method == "wsum_minmax":
        c = pl.col("weight") * min_max()
    else:
        c = min_max() * pl.col("list_id").n_unique().over(DOC_KEY).cast(pl.Float64)
    return lists.with_columns(contribution=c)


def candidates(fused: pl.DataFrame, limit: int) -> pl.DataFrame:
    return fused.filter(pl.col("fused_rank") <= limit)


# -- blend ---------------------------------------------------------------------------------------
def band_weight(fused_rank: pl.Expr, bands: tuple[int, int], weights: tuple[float, float, float]) -> pl.Expr:
    return (
        pl.when(fused_rank <= bands[0])
        .then(pl.lit(float(weights[0])))
        .when(fused_rank <= bands[1])
        .then(pl.lit(float(weights[1])))
        .otherwise(pl.lit(float(weights[2])))
    )


def rank_final(df: pl.DataFrame) -> pl.DataFrame:
    out = sort_within_qid(df, ["final_score", "fused_rank", "docno"], [True, False, False])
    out = out.with_columns(final_rank=(pl.int_range(pl.len()).over("qid") + 1).cast(pl.Int64))
    return out.select([pl.col(c).cast(t) for c, t in SCHEMAS["final"].items()])


def blend(candidates: pl.DataFrame, rerank: pl.DataFrame | None, config: PipelineConfig) -> pl.DataFrame:
    if candidates.height == 0:
        return empty("final")
    df = candidates.select("qid", "docno", "fused_rank", "fused_score")
    if rerank is not None and rerank.height:
        scores = rerank.select("qid", "docno", pl.col("rerank_score").cast(pl.Float64))
        df = df.join(scores, on=["qid", "docno"], how="left", maintain_order="left")
    else:
        df = df.with_columns(rerank_score=pl.lit(None, dtype=pl.Float64))
    rank = pl.col("fused_rank")
    if config.blend == "score":
        top = pl.col("fused_score").max().over("qid")
        pos = pl.when(top > 0).then(pl.col("fused_score") / top).otherwise(pl.lit(0.0))
    else:
        pos = 1.0 / rank.cast(pl.Float64)
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
        .otherwise(
            pl.col("blend_weight") * pl.col("position_score") + (1.0 - pl.col("blend_weight")) * pl.col("rerank_score")
        )
    )
    return rank_final(df)


# -- finish --------------------------------------------------------------------------------------
def tag_lift(final: pl.DataFrame, doc_tags: pl.DataFrame | None, tags: Sequence[str], places: int) -> pl.DataFrame:
    if not tags or places <= 0 or doc_tags is None or final.height == 0:
        return final
    want = [t.lower() for t in tags]
    lifted = doc_tags.select(
        "docno", _lift=pl.col("tags").list.eval(pl.element().str.to_lowercase().is_in(want)).list.any()
    ).unique("docno", keep="first", maintain_order=True)
    out = final.join(lifted, on="docno", how="left", maintain_order="left").with_columns(
        pl.col("_lift").fill_null(False)
    )
    key = (
        pl.when(pl.col("_lift"))
        .then(pl.max_horizontal(pl.col("final_rank") - places, pl.lit(1)))
        .otherwise(pl.col("final_rank"))
    )
    out = sort_within_qid(out.with_columns(_key=key), ["_key", "_lift", "final_rank"], [False, True, False])
    out = out.with_columns(final_rank=(pl.int_range(pl.len()).over("qid") + 1).cast(pl.Int64))
    return out.drop("_lift", "_key")


def content_duplicates(final: pl.DataFrame, doc_tags: pl.DataFrame | None) -> pl.DataFrame:
    schema = pl.Schema({"qid": pl.String, "docno": pl.String, "kept": pl.String})
    if doc_tags is None or "hash" not in doc_tags.columns or final.height == 0:
        return pl.DataFrame(schema=schema)
    ranked = sort_within_qid(final.select("qid", "docno", "final_rank"), ["final_rank"])
    hashes = doc_tags.select("docno", "hash").unique("docno", keep="first", maintain_order=True)
    ranked = ranked.join(hashes, on="docno", how="left", maintain_order="left")
    ranked = ranked.with_columns(kept=pl.col("docno").first().over(["qid", "hash"]))
    return (
        ranked.filter(pl.col("hash").is_not_null() & (pl.col("kept") != pl.col("docno")))
        .select("qid", "docno", "kept")
        .cast(schema)
    )


def min_score_filter(final: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    passed = final.filter(pl.col("final_score") >= config.min_score)
    if config.min_score_fallback <= 0 or config.fallback_max <= 0 or final.height == 0:
        return passed
    empty_q = final.select("qid").unique().join(passed.select("qid").unique(), on="qid", how="anti")
    if empty_q.height == 0:
        return passed
    floor = config.min_score - config.min_score_fallback
    probe = final.join(empty_q, on="qid", how="semi", maintain_order="left").filter(pl.col("final_score") >= floor)
    probe = probe.filter(pl.int_range(pl.len()).over("qid") < int(config.fallback_max))
    order = final.select("qid").unique(maintain_order=True).with_row_index("_q")
    out = pl.concat([passed, probe], how="vertical").join(order, on="qid", how="left")
    return out.sort(["_q", "final_rank"], maintain_order=True).drop("_q")


def finish(final: pl.DataFrame, config: PipelineConfig, doc_tags: pl.DataFrame | None = None) -> pl.DataFrame:
    out = sort_within_qid(final, ["final_rank"]).unique(["qid", "docno"], keep="first", maintain_order=True)
    if config.dedupe_content:
        dups = content_duplicates(out, doc_tags)
        if dups.height:
            out = out.join(dups.select("qid", "docno"), on=["qid", "docno"], how="anti", maintain_order="left")
    out = min_score_filter(out, config)
    out = out.with_columns(final_rank=(pl.int_range(pl.len()).over("qid") + 1).cast(pl.Int64))
    out = tag_lift(out, doc_tags, config.tags, config.tag_lift)
    out = out.filter(pl.col("final_rank") <= config.limit)
    cols = [c for c in SCHEMAS["final"] if c in out.columns]
    return out.select(cols)


# -- the cheap stages in a row -------------------------------------------------------------------
def fuse_candidates(lists: pl.DataFrame, config: PipelineConfig) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    lists = ablate(reweight(lists, config), config)
    fused = fuse(lists, config)
    return lists, fused, candidates(fused, config.candidate_limit)


def blend_finish(
    cands: pl.DataFrame, scores: pl.DataFrame | None, config: PipelineConfig, *, doc_tags: pl.DataFrame | None = None
) -> pl.DataFrame:
    return finish(blend(cands, scores, config), config, doc_tags=doc_tags)

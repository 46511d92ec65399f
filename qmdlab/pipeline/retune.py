"""Re-run the cheap stages of recorded traces under a new config (docs/design.md, trace).

:func:`retune` recomputes ``fused``, the candidates, the blend and ``final`` from
``trace.lists`` and the rerank scores already in ``trace.rerank`` — for every
query at once, vectorised in polars, without calling a model or touching the
index. It is the engine behind the tuning notebook's sliders.

What it can change: list weights, ``rrf_k``, the bonuses, the fusion method and
its options, ``candidate_limit``, ``list_limit`` (only downwards), the blend
method/bands/weights, ``min_score``, ``limit``, the tag lift, and the ablation
switches ``expand``/``hyde``/``vector``/``rerank`` (lists are dropped, never
added). What it cannot: anything before retrieval (expansion, probe, the BM25
mode) and chunk selection — those need :meth:`qmdlab.Lab.query`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import polars as pl

from qmdlab.pipeline.blend import blend
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.finish import finish
from qmdlab.pipeline.fuse import candidates, fuse
from qmdlab.pipeline.retrieve import ablate, reweight
from qmdlab.pipeline.trace import SCHEMAS, Trace

RerankFn = Callable[[pl.DataFrame], pl.DataFrame]
"""``rerank_fn(missing)``: ``missing`` has ``qid, docno``; return ``qid, docno, rerank_score``
(optionally ``chunk_id, chunk_hash, cached``) for the pairs it could score."""

_CHEAP_STAGES = ("fuse", "blend", "finish", "retune")


def rerank_scores_of(trace: Trace, extra: pl.DataFrame | None = None) -> pl.DataFrame:
    """``qid, docno, rerank_score`` known to ``trace``; rows of ``extra`` win over the trace's."""
    scores = trace.rerank.select("qid", "docno", "rerank_score").drop_nulls("rerank_score")
    if extra is None or extra.height == 0:
        return scores  # the pipeline writes one row per (qid, docno)
    extra = extra.select("qid", "docno", pl.col("rerank_score").cast(pl.Float64)).drop_nulls("rerank_score")
    return pl.concat([extra, scores], how="vertical").unique(["qid", "docno"], keep="first", maintain_order=True)


def fuse_candidates(
    lists: pl.DataFrame, config: PipelineConfig, docs: pl.DataFrame | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The first cheap stages on recorded lists: reweight and ablate them, fuse, take the
    top ``candidate_limit``. Returns ``(lists, fused, candidates)``. ``docs``: per-document
    features, for ``fusion=learned`` only (:func:`qmdlab.pipeline.learned.doc_features`)."""
    lists = ablate(reweight(lists, config), config)
    fused = fuse(lists, config, docs)
    return lists, fused, candidates(fused, config.candidate_limit)


def blend_finish(
    cands: pl.DataFrame, scores: pl.DataFrame | None, config: PipelineConfig, *, doc_tags: pl.DataFrame | None = None
) -> pl.DataFrame:
    """The last cheap stages: blend the candidates with rerank ``scores`` (``None``: rerank off)
    and finish (min score, tag lift, limit) into the ``final`` table."""
    return finish(blend(cands, scores, config), config, doc_tags=doc_tags)


def retune(
    trace: Trace,
    config: PipelineConfig,
    rerank_scores: pl.DataFrame | None = None,
    *,
    rerank_fn: RerankFn | None = None,
    doc_tags: pl.DataFrame | None = None,
    docs: pl.DataFrame | None = None,
) -> Trace:
    """Re-fuse, re-select candidates, re-blend and re-finish ``trace`` under ``config``.

    Parameters
    ----------
    trace : Trace
        One or many queries (see :meth:`Trace.concat`).
    config : PipelineConfig
        The new settings.
    rerank_scores : polars.DataFrame, optional
        Extra ``qid, docno, rerank_score`` rows (e.g. another reranker's), used in
        preference to ``trace.rerank``.
    rerank_fn : callable, optional
        Called once with the ``qid, docno`` of candidates that have no score
        (newly promoted into the top ``candidate_limit``); what it returns is used
        and added to the ``rerank`` table. Without it those candidates keep
        ``rerank_score`` null (blend falls back to their position score) and a
        note says how many.
    doc_tags : polars.DataFrame, optional
        ``docno, tags`` for the tag lift (``Index.documents()`` has them).
    docs : polars.DataFrame, optional
        ``fusion=learned`` only: :func:`qmdlab.pipeline.learned.doc_features` of the index.

    Returns
    -------
    Trace
        Same ``expansions``, ``lists``; new ``fused``, ``final``; ``results`` joined
        to the new ranking (snippets only for documents that had one); notes of the
        cheap stages replaced by the retune's.
    """
    t0 = time.perf_counter()
    lists, fused, cands = fuse_candidates(trace.lists, config, docs)
    rerank_table = trace.rerank
    notes: list[pl.DataFrame] = [trace.notes.filter(~pl.col("stage").is_in(_CHEAP_STAGES))]
    scores = None
    if config.rerank:
        scores = rerank_scores_of(trace, rerank_scores)
        reranked_qids = scores.select("qid").unique()
        missing = (
            cands.join(reranked_qids, on="qid", how="semi")
            .join(scores, on=["qid", "docno"], how="anti")
            .select("qid", "docno")
        )
        if missing.height and rerank_fn is not None:
            got = rerank_fn(missing)
            if got is not None and got.height:
                got = _as_rerank_rows(got)
                rerank_table = pl.concat([rerank_table, got], how="vertical")
                scores = pl.concat([scores, got.select("qid", "docno", "rerank_score")], how="vertical")
                missing = missing.join(got, on=["qid", "docno"], how="anti")
        if missing.height:
            counts = missing.group_by("qid", maintain_order=True).len()
            notes.append(
                counts.select(
                    "qid",
                    stage=pl.lit("retune"),
                    message=pl.format(
                        "{} candidates newly promoted without a cached rerank score "
                        "(rerank_score null: position score kept)",
                        pl.col("len"),
                    ),
                )
            )
    final = blend_finish(cands, scores, config, doc_tags=doc_tags)
    results = (
        final.select("qid", "docno", "final_rank", "final_score")
        .join(
            trace.results.select("qid", "docno", "docid", "title", "line", "context", "snippet"),
            on=["qid", "docno"],
            how="left",
        )
        .select(list(SCHEMAS["results"]))
    )
    ms = (time.perf_counter() - t0) * 1000.0
    timings = pl.concat(
        [
            trace.timings.filter(~pl.col("stage").is_in(_CHEAP_STAGES)),
            pl.DataFrame({"qid": ["*"], "stage": ["retune"], "ms": [ms]}, schema=SCHEMAS["timings"]),
        ]
    )
    return Trace(
        queries=trace.queries,
        expansions=trace.expansions,
        lists=lists,
        fused=fused,
        rerank=rerank_table,
        final=final,
        results=results,
        timings=timings,
        notes=pl.concat(notes, how="vertical"),
        config=config.to_dict(),
    )


def _as_rerank_rows(got: pl.DataFrame) -> pl.DataFrame:
    """Fill the optional columns of ``rerank_fn`` output to the ``rerank`` schema."""
    defaults = {
        "chunk_id": pl.lit(None, dtype=pl.Int64),
        "chunk_hash": pl.lit(None, dtype=pl.String),
        "cached": pl.lit(False),
    }
    got = got.with_columns([v.alias(k) for k, v in defaults.items() if k not in got.columns])
    return got.select([pl.col(c).cast(t) for c, t in SCHEMAS["rerank"].items()]).drop_nulls("rerank_score")


__all__ = ["retune", "rerank_scores_of", "fuse_candidates", "blend_finish", "RerankFn"]

"""Re-run the cheap stages of recorded traces under a new config (docs/design.md, trace).

:func:`retune` recomputes ``fused``, the candidates, the blend and ``final`` from
``trace.lists`` and the rerank scores already in ``trace.rerank`` — for every
query at once, with the numpy stage functions over the coded lists
(:mod:`qmdlab.pipeline.coded`, the same functions :meth:`qmdlab.Lab.query` runs), without calling
a model or touching the index. A tuning :class:`~qmdlab.eval.study.Study` runs the same functions
on lists it codes once.

What it can change: list weights, ``rrf_k``, the bonuses, the fusion method and
its options, the expansion types fused and the expansion gate (the lists they leave out stay in
the trace), ``candidate_limit``, ``list_limit`` (only downwards), the blend method/bands/weights,
``min_score``, ``limit``, the tag lift, and the ablation switches
``expand``/``hyde``/``vector``/``rerank`` (lists are dropped, never added). What it cannot: anything before retrieval (expansion, probe, the BM25
mode) and chunk selection — those need :meth:`qmdlab.Lab.query`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import polars as pl

from qmdlab.pipeline.blend import blend
from qmdlab.pipeline.coded import CodedLists, Fused, Names, code_run, final_table, fused_table, scores_for
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.finish import doc_flags, finish
from qmdlab.pipeline.fuse import candidates, fuse, select_lists, selection_notes
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


def code_fused(fused: pl.DataFrame) -> tuple[Fused, Names, Names]:
    """A ``fused`` frame (the learned fuser's) as :class:`~qmdlab.pipeline.coded.Fused` arrays with
    its query and document names."""
    order, q, d, qids, docnos = code_run(fused["qid"], fused["docno"])

    def col(name: str, dtype: type) -> np.ndarray:
        return fused[name].to_numpy().astype(dtype)[order]

    f = Fused(
        q[order],
        d[order],
        np.full(len(order), -1, dtype=np.int64),
        col("rrf_base", np.float64),
        col("best_rank", np.int64),
        col("bonus", np.float64),
        col("fused_score", np.float64),
        col("fused_rank", np.int64),
        col("n_lists", np.int64),
    )
    return f, qids, docnos


def recoded(
    lists: pl.DataFrame,
    config: PipelineConfig,
    docs: pl.DataFrame | None = None,
    coded: CodedLists | None = None,
    notes: list[tuple[str, str]] | None = None,
) -> tuple[pl.DataFrame, Fused, Names, Names]:
    """Recorded lists under ``config``: ``(lists, fused, qids, docnos)`` — the lists reweighted and
    cut by the ablation switches (:meth:`~qmdlab.pipeline.coded.CodedLists.active`,
    :meth:`~qmdlab.pipeline.coded.CodedLists.weights`), and their fusion as arrays with the names of
    their codes. The lists ``expand_types`` or the expansion gate leave out of fusion stay in the
    returned lists (a later config may fuse them), and ``notes`` (when given) receives
    ``(qid, message)`` of each such decision (:func:`~qmdlab.pipeline.fuse.selection_notes`).
    ``docs``: per-document features, for ``fusion=learned`` only
    (:func:`qmdlab.pipeline.learned.doc_features`); ``coded``: the lists already coded."""
    if config.fusion == "learned":  # the model reads frames: the lists are not coded
        out = ablate(reweight(lists, config), config)
        f, qids, docnos = code_fused(fuse(out, config, docs))
        return out, f, qids, docnos
    coded = coded if coded is not None else CodedLists(lists)
    active = coded.active(config)
    weight = coded.weights(config)
    out = lists.with_columns(weight=pl.Series(coded.in_input_order(weight), dtype=pl.Float64))
    if not active.all():
        out = out.filter(pl.Series(coded.in_input_order(active)))
    selection = select_lists(coded, config, active, weight)
    if notes is not None:
        notes += selection_notes(selection, coded.qids.list, config)
    return out, fuse(coded, config, weight=weight, selection=selection), coded.qids, coded.docnos


def fuse_candidates(
    lists: pl.DataFrame, config: PipelineConfig, docs: pl.DataFrame | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The first cheap stages on recorded lists as frames: reweight and ablate them, fuse, take the
    top ``candidate_limit``. Returns ``(lists, fused, candidates)``. ``docs``: per-document
    features, for ``fusion=learned`` only (:func:`qmdlab.pipeline.learned.doc_features`)."""
    out, f, qids, docnos = recoded(lists, config, docs)
    fused = fused_table(f, qids, docnos, frame=True)
    return out, fused, candidates(fused, config.candidate_limit)


def blend_finish(
    cands: pl.DataFrame, scores: pl.DataFrame | None, config: PipelineConfig, *, doc_tags: pl.DataFrame | None = None
) -> pl.DataFrame:
    """The last cheap stages on frames: blend the candidates with rerank ``scores`` (``None``:
    rerank off) and finish (min score, tag lift, limit) into the ``final`` table."""
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
    fuse_notes: list[tuple[str, str]] = []
    lists, f, qids, docnos = recoded(trace.lists, config, docs, notes=fuse_notes)
    cands = candidates(f, config.candidate_limit)
    rerank_table = trace.rerank
    notes: list[pl.DataFrame] = [trace.notes.filter(~pl.col("stage").is_in(_CHEAP_STAGES))]
    if fuse_notes:
        notes.append(
            pl.DataFrame(
                {
                    "qid": [q for q, _ in fuse_notes],
                    "stage": ["fuse"] * len(fuse_notes),
                    "message": [m for _, m in fuse_notes],
                },
                schema=SCHEMAS["notes"],
            )
        )
    rr = None
    if config.rerank:
        scores = rerank_scores_of(trace, rerank_scores)
        cq, cd = qids.gather(cands.query), docnos.gather(cands.doc)
        vals, has = scores_for(cq, cd, scores)
        reranked = set(scores.get_column("qid").unique().to_list())
        wanted = np.array([q in reranked for q in qids.list], dtype=bool)
        miss = ~has & wanted[cands.query] if len(wanted) else ~has
        missing = pl.DataFrame({"qid": cq.filter(pl.Series(miss)), "docno": cd.filter(pl.Series(miss))})
        if missing.height and rerank_fn is not None:
            got = rerank_fn(missing)
            if got is not None and got.height:
                got = _as_rerank_rows(got)
                rerank_table = pl.concat([rerank_table, got], how="vertical")
                more, more_has = scores_for(cq, cd, got)
                take = ~has & more_has
                vals, has = np.where(take, more, vals), has | more_has
                missing = missing.join(got, on=["qid", "docno"], how="anti", maintain_order="left")
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
        rr = (vals, has)
    done = finish(blend(cands, rr, config), config, doc_flags(doc_tags, docnos, config))
    fused = fused_table(f, qids, docnos, frame=True)
    final = final_table(done, qids, docnos, frame=True)
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


__all__ = ["retune", "rerank_scores_of", "recoded", "code_fused", "fuse_candidates", "blend_finish", "RerankFn"]

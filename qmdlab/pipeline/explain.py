"""Explain a trace: what each retrieval list contributed to each final result.

:func:`explain` joins ``lists`` (with each entry's contribution under the trace's
fusion method, :func:`qmdlab.pipeline.fuse.contributions`) to ``fused`` and
``final``; :func:`format_explain` renders it for ``qmdlab query --explain``.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.fuse import contributions
from qmdlab.pipeline.trace import Trace, sort_within_qid

COLUMNS = [
    "qid",
    "final_rank",
    "docno",
    "list_id",
    "source",
    "query_type",
    "subquery",
    "rank",
    "weight",
    "contribution",
    "bonus",
    "fused_score",
    "fused_rank",
    "position_score",
    "rerank_score",
    "blend_weight",
    "final_score",
]


def explain(trace: Trace, config: PipelineConfig | None = None) -> pl.DataFrame:
    """One row per (final result, list entry of that document): :data:`COLUMNS`.

    ``config`` defaults to the one recorded in the trace.
    """
    cfg = config or (PipelineConfig.from_dict(trace.config) if trace.config else PipelineConfig())
    contrib = contributions(trace.lists, cfg).select(
        "qid", "docno", "list_id", "source", "query_type", "subquery", "rank", "weight", "contribution"
    )
    base = trace.final.select(
        "qid", "docno", "final_rank", "position_score", "rerank_score", "blend_weight", "final_score"
    ).join(trace.fused.select("qid", "docno", "bonus", "fused_score", "fused_rank"), on=["qid", "docno"], how="left")
    out = base.join(contrib, on=["qid", "docno"], how="left")
    return sort_within_qid(out, ["final_rank", "list_id"]).select(COLUMNS)


def _f(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def format_explain(trace: Trace, config: PipelineConfig | None = None) -> str:
    """Human-readable explanation: per result, its list contributions, fusion and blend, then notes."""
    table = explain(trace, config)
    cfg = config or (PipelineConfig.from_dict(trace.config) if trace.config else PipelineConfig())
    fused_how = (
        "learned model score (per-feature contributions: qmdlab.pipeline.learned.contributions, "
        "or `qmdlab tune SUITE --learn --explain QID`)"
        if cfg.fusion == "learned"
        else None
    )
    out: list[str] = []
    for (qid, rank, docno), part in table.group_by(["qid", "final_rank", "docno"], maintain_order=True):
        first = part.row(0, named=True)
        w, pos, rr = first["blend_weight"], first["position_score"], first["rerank_score"]
        if rr is None or w is None:
            how = f"position {_f(pos)} (no rerank score)"
        else:
            how = f"{w:.2f} × position {_f(pos)} + {1 - w:.2f} × rerank {_f(rr)}"
        out.append(f"#{rank} {docno}  final {_f(first['final_score'])} = {how}")
        out.append(
            f"    fused rank {first['fused_rank']}: score {_f(first['fused_score'], 5)}"
            + (f" = {fused_how}" if fused_how else f" = Σ contributions + bonus {_f(first['bonus'], 2)}")
        )
        for r in part.iter_rows(named=True):
            if r["list_id"] is None:
                continue
            out.append(
                f"    list {r['list_id']} {r['source']}/{r['query_type']:<8} rank {r['rank']:>2}"
                f"  weight {r['weight']:.2f}  +{_f(r['contribution'], 5)}  {r['subquery']!r}"
            )
    out += _lexical_lines(trace, config)
    notes = trace.notes.select("stage", "message").rows()
    if notes:
        out.append("notes:")
        out += [f"    [{s}] {m}" for s, m in notes]
    return "\n".join(out)


def _lexical_lines(trace: Trace, config: PipelineConfig | None) -> list[str]:
    """The BM25 knobs of the trace's config and the FTS5 expression each BM25 sub-query became."""
    from qmdlab.search.lexical import build_fts_query

    cfg = config or (PipelineConfig.from_dict(trace.config) if trace.config else PipelineConfig())
    subs = trace.lists.filter(pl.col("source") == "fts")["subquery"].unique(maintain_order=True).to_list()
    if not subs:
        return []
    lex = cfg.lexical()
    w = lex["weights"]
    on = lambda flag: "on" if flag else "off"  # noqa: E731
    lines = [
        f"bm25: mode {lex['mode']}, weights filepath {w[0]:g} / title {w[1]:g} / body {w[2]:g}"
        + (f" / expansions {w[3]:g}" if len(w) > 3 else "")
        + ", "
        f"prefix {on(lex['prefix'])}, stopwords dropped {on(lex['stopwords'])}, "
        f"query tf {on(lex['query_tf'])}" + (f", min match {lex['min_match']:g}" if lex["mode"] == "msm" else "")
    ]
    for sub in subs:
        expr = build_fts_query(
            sub, lex["mode"], prefix=lex["prefix"], stopwords=lex["stopwords"], query_tf=lex["query_tf"]
        )
        lines.append(f"    {sub!r} -> {expr}")
    return lines


def result_explain(trace: Trace, config: PipelineConfig | None = None) -> dict[tuple[str, str], dict]:
    """The ``explain`` block of every final result, by ``(qid, docno)``: the result's list entries
    with their contributions, the fusion (``bonus``, ``fused_score``, ``fused_rank``, ``rrf_base``,
    ``best_rank``, ``n_lists``), the rerank (``rerank_score``, ``rerank_chunk_id``,
    ``rerank_cached``) and the blend (``position_score``, ``blend_weight``, ``final_score``).

    One block for every front end: ``qmdlab query --trace-json`` (:func:`to_json`, key ``explain``),
    ``qmdlab query --json --explain`` (each result's ``explain``) and
    the MCP ``query`` tool with ``explain: true`` (key ``stages``)."""
    table = explain(trace, config)
    fused = {(r["qid"], r["docno"]): r for r in trace.fused.iter_rows(named=True)}
    rerank: dict[tuple[str, str], dict] = {}
    for r in trace.rerank.iter_rows(named=True):
        rerank.setdefault((r["qid"], r["docno"]), r)
    out = {}
    for key, part in table.group_by(["qid", "docno"], maintain_order=True):
        first = part.row(0, named=True)
        f, rr = fused.get(key, {}), rerank.get(key, {})
        out[key] = {
            "lists": [
                {k: x[k] for k in ("list_id", "source", "query_type", "subquery", "rank", "weight", "contribution")}
                for x in part.iter_rows(named=True)
                if x["list_id"] is not None
            ],
            "bonus": first["bonus"],
            "fused_score": first["fused_score"],
            "fused_rank": first["fused_rank"],
            "rerank_score": first["rerank_score"],
            "position_score": first["position_score"],
            "blend_weight": first["blend_weight"],
            "final_score": first["final_score"],
            "rrf_base": f.get("rrf_base"),
            "best_rank": f.get("best_rank"),
            "n_lists": f.get("n_lists"),
            "rerank_chunk_id": rr.get("chunk_id"),
            "rerank_cached": rr.get("cached"),
        }
    return out


_NO_EXPLAIN: dict[str, Any] = {
    "lists": [],
    **dict.fromkeys(
        (
            "bonus",
            "fused_score",
            "fused_rank",
            "rerank_score",
            "position_score",
            "blend_weight",
            "final_score",
            "rrf_base",
            "best_rank",
            "n_lists",
            "rerank_chunk_id",
            "rerank_cached",
        )
    ),
}


def trace_json(trace: Trace) -> dict:
    """A one-query trace's expansions, notes and timings as plain JSON-ready values (the parts of
    :func:`to_json` besides the results; the MCP ``query`` tool returns the same)."""
    return {
        "expansions": trace.expansions.drop("qid").to_dicts(),
        "notes": trace.notes.select("stage", "message").to_dicts(),
        "timings": trace.timings.select("stage", "ms").to_dicts(),
    }


def to_json(trace: Trace, config: PipelineConfig | None = None) -> dict:
    """Results (qmd's JSON fields plus ``rank`` and an ``explain`` block, :func:`result_explain`),
    expansions, notes and timings of a one-query trace, as plain JSON-ready values."""
    blocks = result_explain(trace, config)
    results = []
    for r in trace.results.iter_rows(named=True):
        results.append(
            {
                "docid": f"#{r['docid']}",
                "score": r["final_score"],
                "file": r["docno"],
                "line": r["line"],
                "title": r["title"],
                "context": r["context"],
                "snippet": r["snippet"],
                "rank": r["final_rank"],
                "explain": blocks.get((r["qid"], r["docno"]), _NO_EXPLAIN),
            }
        )
    return {
        "query": trace.queries.to_dicts()[0] if trace.queries.height else None,
        "results": results,
        **trace_json(trace),
    }


__all__ = ["explain", "format_explain", "result_explain", "trace_json", "to_json", "COLUMNS"]

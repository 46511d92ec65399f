"""Explain a trace: what each retrieval list contributed to each final result.

:func:`explain` joins ``lists`` (with each entry's contribution under the trace's
fusion method, :func:`qmdlab.pipeline.fuse.contributions`) to ``fused`` and
``final``; :func:`format_explain` renders it for ``qmdlab query --explain``.
"""
from __future__ import annotations

import polars as pl

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.fuse import contributions
from qmdlab.pipeline.trace import Trace, sort_within_qid

COLUMNS = ["qid", "final_rank", "docno", "list_id", "source", "query_type", "subquery", "rank", "weight",
           "contribution", "bonus", "fused_score", "fused_rank", "position_score", "rerank_score", "blend_weight",
           "final_score"]


def explain(trace: Trace, config: PipelineConfig | None = None) -> pl.DataFrame:
    """One row per (final result, list entry of that document): :data:`COLUMNS`.

    ``config`` defaults to the one recorded in the trace.
    """
    cfg = config or (PipelineConfig.from_dict(trace.config) if trace.config else PipelineConfig())
    contrib = contributions(trace.lists, cfg).select(
        "qid", "docno", "list_id", "source", "query_type", "subquery", "rank", "weight", "contribution")
    base = trace.final.select("qid", "docno", "final_rank", "position_score", "rerank_score", "blend_weight",
                              "final_score") \
        .join(trace.fused.select("qid", "docno", "bonus", "fused_score", "fused_rank"), on=["qid", "docno"],
              how="left")
    out = base.join(contrib, on=["qid", "docno"], how="left")
    return sort_within_qid(out, ["final_rank", "list_id"]).select(COLUMNS)


def _f(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def format_explain(trace: Trace, config: PipelineConfig | None = None) -> str:
    """Human-readable explanation: per result, its list contributions, fusion and blend, then notes."""
    table = explain(trace, config)
    cfg = config or (PipelineConfig.from_dict(trace.config) if trace.config else PipelineConfig())
    fused_how = ("learned model score (per-feature contributions: qmdlab.pipeline.learned.contributions, "
                 "or `qmdlab tune SUITE --learn --explain QID`)" if cfg.fusion == "learned" else None)
    out: list[str] = []
    for (qid, rank, docno), part in table.group_by(["qid", "final_rank", "docno"], maintain_order=True):
        first = part.row(0, named=True)
        w, pos, rr = first["blend_weight"], first["position_score"], first["rerank_score"]
        if rr is None or w is None:
            how = f"position {_f(pos)} (no rerank score)"
        else:
            how = f"{w:.2f} × position {_f(pos)} + {1 - w:.2f} × rerank {_f(rr)}"
        out.append(f"#{rank} {docno}  final {_f(first['final_score'])} = {how}")
        out.append(f"    fused rank {first['fused_rank']}: score {_f(first['fused_score'], 5)}"
                   + (f" = {fused_how}" if fused_how else f" = Σ contributions + bonus {_f(first['bonus'], 2)}"))
        for r in part.iter_rows(named=True):
            if r["list_id"] is None:
                continue
            out.append(f"    list {r['list_id']} {r['source']}/{r['query_type']:<8} rank {r['rank']:>2}"
                       f"  weight {r['weight']:.2f}  +{_f(r['contribution'], 5)}  {r['subquery']!r}")
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
    lines = [f"bm25: mode {lex['mode']}, weights filepath {w[0]:g} / title {w[1]:g} / body {w[2]:g}, "
             f"prefix {on(lex['prefix'])}, stopwords dropped {on(lex['stopwords'])}, "
             f"query tf {on(lex['query_tf'])}" + (f", min match {lex['min_match']:g}" if lex["mode"] == "msm" else "")]
    for sub in subs:
        expr = build_fts_query(sub, lex["mode"], prefix=lex["prefix"], stopwords=lex["stopwords"],
                               query_tf=lex["query_tf"])
        lines.append(f"    {sub!r} -> {expr}")
    return lines


def to_json(trace: Trace, config: PipelineConfig | None = None) -> dict:
    """Results (qmd's JSON fields plus ``rank`` and an ``explain`` breakdown), expansions,
    notes and timings of a one-query trace, as plain JSON-ready values."""
    table = explain(trace, config)
    results = []
    for r in trace.results.iter_rows(named=True):
        part = table.filter((pl.col("qid") == r["qid"]) & (pl.col("docno") == r["docno"]))
        first = part.row(0, named=True) if part.height else {}
        lists = [{k: x[k] for k in ("list_id", "source", "query_type", "subquery", "rank", "weight", "contribution")}
                 for x in part.iter_rows(named=True) if x["list_id"] is not None]
        results.append({
            "docid": f"#{r['docid']}", "score": r["final_score"], "file": r["docno"], "line": r["line"],
            "title": r["title"], "context": r["context"], "snippet": r["snippet"], "rank": r["final_rank"],
            "explain": {"lists": lists, "bonus": first.get("bonus"), "fused_score": first.get("fused_score"),
                        "fused_rank": first.get("fused_rank"), "rerank_score": first.get("rerank_score"),
                        "position_score": first.get("position_score"), "blend_weight": first.get("blend_weight"),
                        "final_score": first.get("final_score")},
        })
    return {
        "query": trace.queries.to_dicts()[0] if trace.queries.height else None,
        "results": results,
        "expansions": trace.expansions.drop("qid").to_dicts(),
        "notes": trace.notes.select("stage", "message").to_dicts(),
        "timings": trace.timings.select("stage", "ms").to_dicts(),
    }


__all__ = ["explain", "format_explain", "to_json", "COLUMNS"]

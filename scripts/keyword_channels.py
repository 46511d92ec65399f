"""Measure the extra keyword channels and the two-unit gate (issue 19 items 5, 7, 8).

Every judged query of a suite runs once through the suite's index with every keyword channel on
(no expansion, no rerank; ``--keyword-only``: no embedder either), plus one BM25 list in ``msm`` mode
with ``bm25_min_match: 2``. Each variant is then the same recorded lists with the other channels'
lists left out, re-fused by :func:`qmdlab.pipeline.retune.retune` (no model, no index) — the first
queries are checked against a direct run of the baseline, so a retune that differs from the
pipeline stops the script. nDCG@10 per query is compared with the baseline (paired t-test, Fisher
randomisation, wins/ties/losses). Channel weights are fixed a priori at 1.0 (an expansion list's
weight); nothing is tuned on these queries, so every number is a held-out one.

Variants: ``phrase`` (verbatim whole query), ``like`` (substring leg), ``trigram`` (CJK), ``msm2`` (AI
Helper's "at least two units": the BM25 list in ``msm`` mode with ``bm25_min_match: 2``), and
KBFold's three-way plain RRF (``rrf3`` = plain RRF over BM25 + vectors + like, against ``rrf2`` =
plain RRF over BM25 + vectors).

Usage: ``PYTHONPATH=. nice -n 19 .venv/bin/python scripts/keyword_channels.py [--keyword-only] default cisi``
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time

import polars as pl

from qmdlab.eval.metrics import per_query
from qmdlab.eval.record import judged_queries, open_lab, suite_config
from qmdlab.eval.significance import compare_to_baseline
from qmdlab.eval.suites import get_suite
from qmdlab.models import load_models
from qmdlab.models.base import ModelSet
from qmdlab.pipeline.retrieve import Route, hits_frame
from qmdlab.pipeline.retune import retune
from qmdlab.pipeline.trace import Trace
from qmdlab.search import bm25_search

ALL_ON = {"weight_original_phrase": 1.0, "weight_original_like": 1.0, "weight_original_trigram": 1.0}
# variant -> (sources kept, config overrides, use the msm BM25 list)
VARIANTS = {
    "base": ({"fts", "vec"}, {}, False),
    "phrase": ({"fts", "vec", "phrase"}, {"weight_original_phrase": 1.0}, False),
    "like": ({"fts", "vec", "like"}, {"weight_original_like": 1.0}, False),
    "trigram": ({"fts", "vec", "trigram"}, {"weight_original_trigram": 1.0}, False),
    "msm2": ({"fts", "vec"}, {"bm25_mode": "msm", "bm25_min_match": 2.0}, True),
    "rrf2": ({"fts", "vec"}, {"fusion": "rrf"}, False),
    "rrf3": ({"fts", "vec", "like"}, {"fusion": "rrf", "weight_original_like": 1.0}, False),
}
COMPARE = {"phrase": "base", "like": "base", "trigram": "base", "msm2": "base", "rrf3": "rrf2"}
CHECK = 3  # queries checked against a direct baseline run


def _scores(final: pl.DataFrame, qrels: pl.DataFrame, qids: pl.DataFrame) -> pl.DataFrame:
    pq = per_query(final.select("qid", "docno", pl.col("final_rank").alias("rank")), qrels, ["ndcg@10"])
    return qids.join(pq.select("qid", "ndcg@10"), on="qid", how="left").fill_null(0.0)


def run_suite(name: str, vectors: bool = True) -> dict:
    suite = get_suite(name)
    models = load_models(None, expand="none", rerank="none") if vectors else ModelSet(None, None, None)
    cfg = suite_config(suite).replace(expand=False, rerank=False, limit=10, vector=vectors)
    lab = open_lab(suite, models, cfg, progress=False, log=lambda m: None)
    queries = judged_queries(suite)
    qrels = suite.qrels_docnos().join(queries.select("qid"), on="qid", how="semi")
    traces, msm_lists, direct = [], [], []
    t0 = time.perf_counter()
    for i, r in enumerate(queries.iter_rows(named=True), 1):
        qid = str(r["qid"])
        t = lab.query(r["query"], intent=r.get("intent") or None, qid=qid, **ALL_ON)
        traces.append(t)
        hits = bm25_search(lab.index, r["query"], limit=cfg.list_limit,
                           **{**cfg.lexical(), "mode": "msm", "min_match": 2.0})
        msm_lists.append(hits_frame(qid, 0, Route("fts", "original", r["query"]), hits, cfg.weight_original_fts))
        if i <= CHECK:
            direct.append(lab.query(r["query"], intent=r.get("intent") or None, qid=qid).final)
        if i % 10 == 0:
            print(f"{name}: {i}/{queries.height} queries, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    trace = Trace.concat(traces)
    qids = queries.select(pl.col("qid").cast(pl.Utf8))
    msm = pl.concat([m for m in msm_lists if m.height], how="vertical")
    scores = {}
    for v, (sources, over, use_msm) in VARIANTS.items():
        lists = trace.lists.filter(pl.col("source").is_in(sorted(sources)))
        if use_msm:
            lists = pl.concat([lists.filter(~((pl.col("source") == "fts") & (pl.col("query_type") == "original"))),
                               msm.select(lists.columns)], how="vertical")
        final = retune(dataclasses.replace(trace, lists=lists), cfg.replace(**over)).final
        if v == "base":  # the retune must reproduce the pipeline's own baseline run
            for d in direct:
                q = d["qid"][0]
                got = final.filter(pl.col("qid") == q).sort("final_rank")["docno"].to_list()
                assert got == d.sort("final_rank")["docno"].to_list(), (q, got)
        scores[v] = _scores(final, qrels, qids)
    lists_per_query = trace.lists.group_by("source").agg(pl.col("qid").n_unique().alias("queries")).sort("source")
    out = {"suite": name, "vectors": vectors, "queries": queries.height, "seconds": round(time.perf_counter() - t0, 1),
           "queries_with_list": dict(lists_per_query.rows()), "rows": []}

    def add(label, base, sub):
        row = compare_to_baseline({base: sub[base], label: sub[label]}, base).row(1, named=True)
        return {"variant": row["run"], "baseline": base, "base_mean": round(float(sub[base]["ndcg@10"].mean()), 4),
                **{k: (round(x, 4) if isinstance(x, float) else x) for k, x in row.items() if k != "run"}}

    for v, base in COMPARE.items():
        out["rows"].append(add(v, base, scores))
    cats = suite.data().judged_queries()
    if "category" in cats.columns and cats.filter(pl.col("category") == "cjk").height:
        cjk = cats.filter(pl.col("category") == "cjk")["qid"].cast(pl.Utf8).to_list()
        sub = {k: s.filter(pl.col("qid").is_in(cjk)) for k, s in scores.items()}
        for v in ("trigram", "like", "phrase"):
            row = add(v, "base", sub)
            row["variant"] = f"{v} (cjk, {len(cjk)} queries)"
            out["rows"].append(row)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    keyword_only = "--keyword-only" in args
    for suite_name in [a for a in args if not a.startswith("--")] or ["default"]:
        print(json.dumps(run_suite(suite_name, vectors=not keyword_only), indent=1), flush=True)

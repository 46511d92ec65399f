"""Measure the extra keyword channels and the two-unit gate (issue 19 items 5, 7, 8).

For each suite, every judged query runs once per variant through the suite's index with the default
preset's embedder, no expansion and no rerank (the retrieval tier), and nDCG@10 is compared per
query with the baseline (paired t-test, Fisher randomisation, wins/ties/losses). The channel weights
are fixed a priori at 1.0 (an expansion list's weight); nothing is tuned on these queries, so every
number is a held-out one.

Variants: ``phrase`` (verbatim whole query), ``like`` (substring leg), ``trigram`` (CJK, default
suite only), ``msm2`` (AI Helper's "at least two units": ``bm25_mode: msm, bm25_min_match: 2``), and
KBFold's three-way plain RRF (``rrf3`` = plain RRF over BM25 + vectors + like, against ``rrf2`` =
plain RRF over BM25 + vectors).

Usage: ``PYTHONPATH=. nice -n 19 .venv/bin/python scripts/keyword_channels.py [--keyword-only] default cisi``
(``--keyword-only``: no embedder and no vector lists — the keyword tier alone).
"""
from __future__ import annotations

import json
import sys
import time

import polars as pl

from eval.metrics import per_query
from eval.record import judged_queries, open_lab, suite_config
from eval.significance import compare_to_baseline
from eval.suites import get_suite
from qmdlab.models import load_models
from qmdlab.models.base import ModelSet

VARIANTS = {
    "base": {},
    "phrase": {"weight_original_phrase": 1.0},
    "like": {"weight_original_like": 1.0},
    "trigram": {"weight_original_trigram": 1.0},
    "msm2": {"bm25_mode": "msm", "bm25_min_match": 2.0},
    "rrf2": {"fusion": "rrf"},
    "rrf3": {"fusion": "rrf", "weight_original_like": 1.0},
}
COMPARE = {"phrase": "base", "like": "base", "trigram": "base", "msm2": "base", "rrf3": "rrf2"}


class MemoEmbedder:
    """The embedder with query vectors remembered, so each query is embedded once for all variants."""

    def __init__(self, inner):
        self.inner, self.memo = inner, {}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed_query(self, text):
        if text not in self.memo:
            self.memo[text] = self.inner.embed_query(text)
        return self.memo[text]


def run_suite(name: str, vectors: bool = True) -> dict:
    suite = get_suite(name)
    if vectors:
        loaded = load_models(None, expand="none", rerank="none")
        models = ModelSet(MemoEmbedder(loaded.embedder), None, None)
    else:  # the keyword-only tier: no model at all
        models = ModelSet(None, None, None)
    cfg = suite_config(suite).replace(expand=False, rerank=False, limit=100, vector=vectors)
    lab = open_lab(suite, models, cfg, progress=False, log=lambda m: None)
    queries = judged_queries(suite)
    qrels = suite.qrels_docnos().join(queries.select("qid"), on="qid", how="semi")
    variants = dict(VARIANTS)
    if name != "default":
        variants.pop("trigram")  # no CJK query
    runs: dict[str, list[pl.DataFrame]] = {v: [] for v in variants}
    t0 = time.perf_counter()
    for i, r in enumerate(queries.iter_rows(named=True), 1):
        for v, over in variants.items():
            t = lab.query(r["query"], intent=r.get("intent") or None, qid=str(r["qid"]), **over)
            runs[v].append(t.final.select("qid", "docno", pl.col("final_rank").alias("rank"),
                                          pl.col("final_score").alias("score")))
        if i % 10 == 0:
            print(f"{name}: {i}/{queries.height} queries, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    qids = queries.select(pl.col("qid").cast(pl.Utf8))
    scores = {}
    for v, frames in runs.items():
        pq = per_query(pl.concat(frames), qrels, ["ndcg@10"])
        scores[v] = qids.join(pq.select("qid", "ndcg@10"), on="qid", how="left").fill_null(0.0)
    out = {"suite": name, "vectors": vectors, "queries": queries.height, "seconds": round(time.perf_counter() - t0, 1), "rows": []}
    for v, base in COMPARE.items():
        if v not in scores:
            continue
        row = compare_to_baseline({base: scores[base], v: scores[v]}, base).row(1, named=True)
        out["rows"].append({"variant": v, "baseline": base, "base_mean": round(float(scores[base]["ndcg@10"].mean()), 4),
                            **{k: (round(x, 4) if isinstance(x, float) else x) for k, x in row.items()}})
    if name == "default":  # the CJK queries alone (the trigram channel acts only there)
        cjk = suite.data().judged_queries().filter(pl.col("category") == "cjk")["qid"].cast(pl.Utf8).to_list()
        sub = {k: s.filter(pl.col("qid").is_in(cjk)) for k, s in scores.items()}
        for v in ("trigram", "like"):
            row = compare_to_baseline({"base": sub["base"], v: sub[v]}, "base").row(1, named=True)
            out["rows"].append({"variant": f"{v} (cjk {len(cjk)})", "baseline": "base",
                                "base_mean": round(float(sub["base"]["ndcg@10"].mean()), 4),
                                **{k: (round(x, 4) if isinstance(x, float) else x) for k, x in row.items()}})
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    keyword_only = "--keyword-only" in args
    for suite_name in [a for a in args if not a.startswith("--")] or ["default"]:
        print(json.dumps(run_suite(suite_name, vectors=not keyword_only), indent=1), flush=True)

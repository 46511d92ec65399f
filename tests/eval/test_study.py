"""qmdlab.eval.study: the fast slider path equals qmdlab.retune; no model is called; rerank_fn fills gaps."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.eval.study import Study
from qmdlab.pipeline.config import BLEND_METHODS, FUSION_METHODS, PipelineConfig
from qmdlab.pipeline.retune import retune


def _study(make_trace, rerank_fn=None):
    e, rr = [], {}
    for q in range(6):
        qid = f"q{q}"
        for r in range(1, 9):
            e.append((qid, "fts", "original", f"c/d{(q + r) % 11}", r, 1 - r / 10))
            e.append((qid, "vec", "original", f"c/d{(q * 3 + r) % 11}", r, 0.9 - r / 20))
            if r <= 4:
                e.append((qid, "fts", "lex", f"c/d{(q + 2 * r) % 11}", r, 0.8 - r / 10))
                e.append((qid, "vec", "hyde", f"c/d{(q + 5 * r) % 11}", r, 0.7 - r / 20))
        for d in range(0, 11, 2):
            rr[(qid, f"c/d{d}")] = (d * 7 % 10) / 10
    qrels = pl.DataFrame(
        [(f"q{q}", f"c/d{(q * 5) % 11}", 1 + q % 2) for q in range(6)], schema=["qid", "docno", "grade"], orient="row"
    )
    return Study(make_trace(e, rr), qrels, config=PipelineConfig(), rerank_fn=rerank_fn)


CONFIGS = (
    [PipelineConfig()]
    + [PipelineConfig(fusion=m) for m in FUSION_METHODS]
    + [PipelineConfig(blend=m) for m in BLEND_METHODS]
    + [
        PipelineConfig(rerank=False, rrf_k=3, weight_lex=0.0),
        PipelineConfig(candidate_limit=3, limit=2),
        PipelineConfig(expand=False, blend_bands=(1, 2), blend_weights=(0.9, 0.2, 0.1)),
    ]
)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.diff().replace("\n", ";") or "defaults")
def test_fast_final_equals_retune(trace_factory, config):
    study = _study(trace_factory)
    assert study.final(config).equals(retune(study.trace, config).final)
    vec_only = pl.col("source") == "vec"
    filtered = study.trace.__class__(lists=study.trace.lists.filter(vec_only), rerank=study.trace.rerank)
    assert study.final(config, lists=vec_only).equals(retune(filtered, config).final)


def test_evaluate_metrics_match_per_query_of_the_final(trace_factory):
    from qmdlab.eval.metrics import per_query

    study = _study(trace_factory)
    ev = study.evaluate(PipelineConfig(fusion="rrf"))
    expected = per_query(ev.final.rename({"final_rank": "rank"}), study.qrels, study.metrics)
    assert ev.per_query.equals(expected)
    assert ev.metrics["ndcg@10"] == pytest.approx(expected["ndcg@10"].mean())
    assert study.subset(["q1", "q2"]).evaluate().per_query["qid"].to_list() == ["q1", "q2"]


def test_unscored_counts_and_rerank_fn_fills_them_once(trace_factory):
    calls = []

    def rerank_fn(missing):
        calls.append(missing.height)
        return missing.with_columns(pl.lit(0.5).alias("rerank_score"))

    plain = _study(trace_factory)
    ev = plain.evaluate(PipelineConfig())
    odd = ev.final.filter(pl.col("docno").str.extract(r"d(\d+)").cast(pl.Int64) % 2 == 1)
    assert ev.unscored == odd.height > 0  # only even documents were reranked
    study = _study(trace_factory, rerank_fn=rerank_fn)
    assert study.evaluate(PipelineConfig()).unscored == 0 and calls
    n = len(calls)
    assert study.evaluate(PipelineConfig()).unscored == 0 and len(calls) == n  # cached in the trace now

"""qmdlab.eval.ablation, qmdlab.eval.distributions, qmdlab.eval.thresholds on synthetic traces (no models)."""

from __future__ import annotations

import math

import polars as pl
import pytest

from qmdlab.eval.ablation import ablate, format_ablation, variants
from qmdlab.eval.distributions import score_distributions, summary
from qmdlab.eval.study import Study
from qmdlab.eval.thresholds import best_threshold, threshold_curve
from qmdlab.pipeline.config import BLEND_METHODS, FUSION_METHODS, PipelineConfig


def _suite(make_trace):
    """Two queries. q1: relevant r1 is BM25 #2, vector #1, lex #1; q2: relevant r2 is BM25 #1,
    vector #3, hyde #1. The reranker loves the relevant documents."""
    e = []
    e += [
        ("q1", "fts", "original", "c/x", 1, 0.9),
        ("q1", "fts", "original", "c/r1", 2, 0.8),
        ("q1", "vec", "original", "c/r1", 1, 0.7),
        ("q1", "vec", "original", "c/x", 2, 0.6),
        ("q1", "fts", "lex", "c/r1", 1, 0.8),
        ("q1", "vec", "hyde", "c/y", 1, 0.5),
    ]
    e += [
        ("q2", "fts", "original", "c/r2", 1, 0.9),
        ("q2", "vec", "original", "c/z", 1, 0.8),
        ("q2", "vec", "original", "c/w", 2, 0.7),
        ("q2", "vec", "original", "c/r2", 3, 0.6),
        ("q2", "vec", "vec", "c/z", 1, 0.5),
        ("q2", "vec", "hyde", "c/r2", 1, 0.5),
    ]
    rerank = {
        ("q1", "c/x"): 0.1,
        ("q1", "c/r1"): 0.95,
        ("q1", "c/y"): 0.2,
        ("q2", "c/r2"): 0.9,
        ("q2", "c/z"): 0.3,
        ("q2", "c/w"): 0.2,
    }
    qrels = pl.DataFrame({"qid": ["q1", "q2"], "docno": ["c/r1", "c/r2"], "grade": [1, 1]})
    return Study(make_trace(e, rerank), qrels, metrics=["mrr@10", "ndcg@10"], config=PipelineConfig())


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_ablation_rows_are_the_documented_cuts(trace_factory):
    study = _suite(trace_factory)
    table = ablate(study, baseline="bm25", metric="mrr@10")
    names = table["config"].to_list()
    assert names[:7] == ["bm25", "vector", "bm25+vector", "+lex", "+lex+vec", "+lex+vec+hyde", "+rerank"]
    assert names[7:] == [f"fusion={m}" for m in FUSION_METHODS] + [f"blend={m}" for m in BLEND_METHODS]
    row = {r["config"]: r for r in table.iter_rows(named=True)}
    assert row["bm25"]["mrr@10"] == pytest.approx((1 / 2 + 1) / 2)  # r1 at BM25 #2, r2 at #1
    assert row["vector"]["mrr@10"] == pytest.approx((1 + 1 / 3) / 2)  # r1 vec #1, r2 vec #3
    # the reranker puts both relevant documents first under the rerank-only blend
    assert row["blend=rerank_only"]["mrr@10"] == 1.0
    assert row["+rerank"]["mrr@10"] == study.evaluate(PipelineConfig()).metrics["mrr@10"]
    assert row["bm25"]["delta"] == 0.0 and row["bm25"]["p_ttest"] == 1.0
    assert row["vector"]["delta"] == pytest.approx(row["vector"]["mrr@10"] - row["bm25"]["mrr@10"])
    assert set(table["baseline"]) == {"bm25"} and table["unscored"].min() == 0
    assert "bm25" in format_ablation(table, "mrr@10")


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_best_leg_baseline_and_missing_stages_drop_rows(trace_factory):
    study = _suite(trace_factory)
    assert ablate(study, metric="mrr@10")["baseline"][0] == "bm25"  # 0.75 > 0.667
    names = [v.name for v in variants(PipelineConfig(), has_vector=False, has_expansion=False, has_rerank=False)]
    assert names == ["bm25"] + [f"fusion={m}" for m in FUSION_METHODS]


def test_score_distributions_and_summary(trace_factory):
    study = _suite(trace_factory)
    dist = score_distributions(study.trace, study.qrels)
    stages = set(dist["stage"])
    assert {"fts/original", "vec/original", "fts/lex", "vec/hyde", "vec/vec", "rerank"} <= stages
    rr = dist.filter(pl.col("stage") == "rerank")
    assert sorted(rr.filter(pl.col("relevant"))["score"].to_list()) == [0.9, 0.95]
    s = summary(dist).filter((pl.col("stage") == "rerank") & pl.col("relevant"))
    assert s["n"][0] == 2 and s["auc"][0] == 1.0  # every relevant document outscores every other one


def test_threshold_curve_closed_form():
    run = pl.DataFrame(
        {
            "qid": ["1", "1", "2", "2", "3"],
            "docno": ["a", "b", "c", "d", "e"],
            "rerank_score": [0.9, 0.4, 0.8, 0.1, 0.99],
        }
    )
    qrels = pl.DataFrame({"qid": ["1", "2", "2"], "docno": ["a", "d", "f"], "grade": [1, 2, 1]})
    curve = threshold_curve(run, qrels, score_col="rerank_score")  # query 3 is unjudged: ignored
    assert curve["threshold"].to_list() == [0.1, 0.4, 0.8, 0.9]
    assert curve["kept"].to_list() == [4, 3, 2, 1]
    assert curve["relevant_kept"].to_list() == [2, 1, 1, 1]
    assert curve["precision"].to_list() == [0.5, 1 / 3, 0.5, 1.0]
    assert curve["recall"].to_list() == [2 / 3, 1 / 3, 1 / 3, 1 / 3]
    assert best_threshold(curve) == 0.1  # f1 4/7 beats 0.5
    assert math.isclose(curve["f1"][0], 4 / 7)

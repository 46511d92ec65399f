"""qmdlab.eval.metrics: closed-form values and differential tests against ranx.evaluate."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from qmdlab.eval.metrics import mean_scores, parse_metric, per_query, ranx_qrels, ranx_run

METRICS = ["ndcg@10", "ndcg@3", "ndcg", "ndcg_burges@10", "mrr@10", "mrr@3", "recall@10", "recall@100", "p@5", "p@1"]
RANX_NAMES = {"p@5": "precision@5", "p@1": "precision@1"}


def random_case(seed: int):
    rng = np.random.default_rng(seed)
    n_q, n_docs = int(rng.integers(1, 12)), int(rng.integers(3, 40))
    docs = [f"d{i}" for i in range(n_docs)]
    run_rows, qrel_rows = [], []
    for q in range(n_q):
        qid = f"q{q}"
        k = int(rng.integers(0, n_docs + 1)) if q else int(rng.integers(1, n_docs + 1))
        chosen = rng.choice(n_docs, size=k, replace=False)
        scores = rng.random(k)
        order = np.argsort(-scores)
        for rank, j in enumerate(order, start=1):
            run_rows.append((qid, docs[chosen[j]], rank))
        n_j = int(rng.integers(1, min(n_docs, 15) + 1))
        for j in rng.choice(n_docs, size=n_j, replace=False):
            qrel_rows.append((qid, docs[j], int(rng.integers(-1, 4))))  # -1: judged not relevant
    run = pl.DataFrame(run_rows, schema={"qid": pl.Utf8, "docno": pl.Utf8, "rank": pl.Int64}, orient="row")
    qrels = pl.DataFrame(qrel_rows, schema={"qid": pl.Utf8, "docno": pl.Utf8, "grade": pl.Int64}, orient="row")
    return run, qrels


@pytest.mark.extra("eval")  # ranx
@pytest.mark.parametrize("seed", range(40))
def test_per_query_equals_ranx_on_random_runs(seed):
    """Grades -1..3: like ranx, every grade below 1 is judged but not relevant."""
    run, qrels = random_case(seed)
    ours = per_query(run, qrels, METRICS)
    rq, rr = ranx_qrels(qrels), ranx_run(run, "r")
    # queries absent from the run (a query may retrieve nothing) score 0, as with make_comparable
    from ranx import evaluate

    theirs = evaluate(rq, rr, [RANX_NAMES.get(m, m) for m in METRICS], return_mean=False, make_comparable=True)
    qids = sorted(rq.keys())
    assert ours["qid"].to_list() == qids
    for m in METRICS:
        expected = np.asarray(theirs[RANX_NAMES.get(m, m)], dtype=float)
        got = ours[m].to_numpy()
        # ranx orders scores by its own (sorted) query ids
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12, err_msg=m)


def test_closed_form_graded_ndcg_mrr_recall_precision():
    run = pl.DataFrame({"qid": ["a"] * 4, "docno": ["x", "y", "z", "w"], "rank": [1, 2, 3, 4]})
    qrels = pl.DataFrame({"qid": ["a"] * 3, "docno": ["y", "w", "v"], "grade": [2, 1, 3]})
    row = per_query(run, qrels, ["ndcg@4", "ndcg_burges@4", "mrr@4", "mrr@1", "recall@4", "p@4", "p@10"]).row(
        0, named=True
    )
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    assert row["ndcg@4"] == pytest.approx(dcg / idcg, abs=1e-15)
    bdcg = 3 / math.log2(3) + 1 / math.log2(5)
    bidcg = 7 + 3 / math.log2(3) + 1 / math.log2(4)
    assert row["ndcg_burges@4"] == pytest.approx(bdcg / bidcg, abs=1e-15)
    assert row["mrr@4"] == 0.5 and row["mrr@1"] == 0.0
    assert row["recall@4"] == pytest.approx(2 / 3) and row["p@4"] == 0.5 and row["p@10"] == 0.2


def test_queries_missing_from_run_score_zero_and_extra_run_queries_ignored():
    run = pl.DataFrame({"qid": ["1", "9"], "docno": ["a", "a"], "rank": [1, 1]})
    qrels = pl.DataFrame({"qid": ["1", "2"], "docno": ["a", "a"], "grade": [1, 1]})
    table = per_query(run, qrels, ["ndcg@10", "p@1"])
    assert table.rows() == [("1", 1.0, 1.0), ("2", 0.0, 0.0)]
    assert mean_scores(table) == {"ndcg@10": 0.5, "p@1": 0.5}


def test_rank_ties_keep_row_order_and_gaps_are_positions():
    run = pl.DataFrame({"qid": ["1", "1", "1"], "docno": ["n", "r", "m"], "rank": [5, 5, 9]})
    qrels = pl.DataFrame({"qid": ["1"], "docno": ["r"], "grade": [1]})
    assert per_query(run, qrels, ["mrr@10"])["mrr@10"].to_list() == [0.5]


def test_unknown_metric_is_rejected():
    with pytest.raises(ValueError, match="unknown metric"):
        parse_metric("map@10")
    with pytest.raises(ValueError, match="k must be"):
        parse_metric("ndcg@0")

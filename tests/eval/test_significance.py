"""qmdlab.eval.significance: our baseline table carries exactly ranx.compare's p-values."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from qmdlab.eval.metrics import per_query, ranx_qrels, ranx_run
from qmdlab.eval.significance import compare_to_baseline, fisher_randomization, paired_pvalues


def _runs(seed=3, n_q=30, n_docs=25):
    rng = np.random.default_rng(seed)
    qrels = [
        (f"q{q:02d}", f"d{d}", int(rng.integers(1, 3)))
        for q in range(n_q)
        for d in rng.choice(n_docs, 4, replace=False)
    ]
    runs = {}
    for name in ("base", "better", "noise"):
        rows = []
        for q in range(n_q):
            order = rng.permutation(n_docs)
            if name == "better":  # move the judged docs up
                rel = [int(d[1:]) for qq, d, _ in qrels if qq == f"q{q:02d}"]
                order = np.array(rel[:2] + [d for d in order if d not in rel[:2]])
            rows += [(f"q{q:02d}", f"d{d}", r) for r, d in enumerate(order, start=1)]
        runs[name] = pl.DataFrame(rows, schema=["qid", "docno", "rank"], orient="row")
    return pl.DataFrame(qrels, schema=["qid", "docno", "grade"], orient="row"), runs


@pytest.mark.extra("eval")  # the paired t-test is ranx's
def test_ttest_pvalues_and_means_equal_ranx_compare():
    stat_test, column = "student", "p_ttest"
    qrels, runs = _runs()
    # ranx keeps, per pair, the test run last with (control=later run, treatment=earlier run);
    # listing the baseline last makes that (baseline, run), the order compare_to_baseline uses.
    order = ["better", "noise", "base"]
    from ranx import compare

    report = compare(
        ranx_qrels(qrels), [ranx_run(runs[n], n) for n in order], ["ndcg@10"], stat_test=stat_test, make_comparable=True
    )
    table = compare_to_baseline({n: per_query(r, qrels, ["ndcg@10"]) for n, r in runs.items()}, "base")
    for name in ("better", "noise"):
        expected = report.comparisons[frozenset(["base", name])]["ndcg@10"]["p_value"]
        got = table.filter(pl.col("run") == name)[column][0]
        assert got == pytest.approx(float(expected), abs=1e-12)
        assert table.filter(pl.col("run") == name)["mean"][0] == pytest.approx(report.results[name]["ndcg@10"])
    assert table.filter(pl.col("run") == "better")["p_ttest"][0] < 0.01


@pytest.mark.extra("eval")  # the paired t-test is ranx's
def test_baseline_row_and_wins_ties_losses():
    a = pl.DataFrame({"qid": ["1", "2", "3"], "m": [0.5, 0.5, 0.5]})
    b = pl.DataFrame({"qid": ["3", "1", "2"], "m": [0.5, 1.0, 0.0]})
    table = compare_to_baseline({"a": a, "b": b}, "a", "m")
    assert table.row(0) == ("a", 0.5, 0.0, 1.0, 1.0, 0, 3, 0)
    assert table.row(1)[5:] == (1, 1, 1) and table.row(1)[2] == 0.0


@pytest.mark.extra("eval")  # the paired t-test is ranx's
def test_mismatched_queries_and_unknown_baseline_fail():
    a = pl.DataFrame({"qid": ["1"], "m": [0.5]})
    with pytest.raises(ValueError, match="different queries"):
        compare_to_baseline({"a": a, "b": pl.DataFrame({"qid": ["2"], "m": [0.5]})}, "a", "m")
    with pytest.raises(KeyError):
        compare_to_baseline({"a": a}, "zz", "m")
    with pytest.raises(ValueError, match="equal lengths"):
        paired_pvalues(np.zeros(2), np.zeros(3))


@pytest.mark.extra("eval")  # the paired t-test is ranx's
def test_fisher_agrees_with_ranx_within_monte_carlo_error():
    # ranx's Fisher test is not reproducible (seeded inside a numba parallel loop), so the
    # agreement is statistical: 1000 permutations give a standard error ≤ 0.016.
    from ranx.statistical_tests import fisher_randomization_test

    qrels, runs = _runs()
    a = per_query(runs["base"], qrels, ["ndcg@10"])["ndcg@10"].to_numpy()
    b = per_query(runs["noise"], qrels, ["ndcg@10"])["ndcg@10"].to_numpy()
    ours = compare_to_baseline(
        {"base": per_query(runs["base"], qrels, ["ndcg@10"]), "noise": per_query(runs["noise"], qrels, ["ndcg@10"])},
        "base",
    )["p_fisher"][1]
    theirs, _ = fisher_randomization_test(a, b, 1000, 0.01, 42)
    assert 0.2 < ours < 1.0  # a pair of random runs: clearly not significant
    assert abs(ours - theirs) < 0.06


def test_fisher_exact_enumeration_closed_form():
    # differences (2, -1): patterns give |mean| 0.5, 1.5, 1.5, 0.5 -> observed 0.5 -> p = 1
    assert fisher_randomization(np.array([0.0, 1.0]), np.array([2.0, 0.0])) == 1.0
    # differences (3, 1, 1, 1): |mean| >= 1.5 only for (+,+,+,+), (-,-,-,-) -> 2/16
    assert fisher_randomization(np.zeros(4), np.array([3.0, 1.0, 1.0, 1.0])) == 0.125
    # sampled mode is deterministic for a given seed
    x, y = np.random.default_rng(0).random((2, 40))
    assert fisher_randomization(x, y, seed=7) == fisher_randomization(x, y, seed=7)


def test_sampled_fisher_pvalue_is_b_plus_one_over_n_plus_one():
    # 40 equal differences: only 2 of 2**40 sign patterns reach the observed |mean|, so no
    # random draw does (b = 0): p = 1/(N+1), never 0
    assert fisher_randomization(np.zeros(40), np.ones(40), n_permutations=1000) == 1 / 1001
    # closed form for any b: count the draws of the same generator by hand
    x, y = np.random.default_rng(1).random((2, 25))
    d = y - x
    draws = np.random.default_rng(5).integers(0, 2, size=(500, 25)) * 2 - 1
    b = int(np.count_nonzero(np.abs((draws * d).mean(axis=1)) >= abs(d.mean()) - 1e-12))
    assert 0 < b < 500
    assert fisher_randomization(x, y, n_permutations=500, seed=5) == (b + 1) / 501

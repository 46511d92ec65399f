"""Paired significance of several runs against one baseline.

Two tests, the pair ``ranx.compare`` offers:

- the two-sided paired Student's t-test — ranx's own function (scipy ``ttest_rel``), so the
  p-values equal ``ranx.compare(..., stat_test="student")``'s exactly;
- Fisher's randomisation test (Smucker et al., CIKM'07) — the same statistic as ranx's
  (|mean difference| under random swaps of each query's pair), but computed here with a
  seeded numpy generator: ranx's version seeds numpy *inside* a numba parallel loop, so its
  p-value changes from call to call (0.708/0.710/0.712 for one pair in our tests). With
  ``2**n ≤ n_permutations`` queries every swap pattern is enumerated and the p-value is exact.

Only the bookkeeping differs from ranx: one row per run against a chosen baseline, instead
of ranx's all-pairs report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from qmdlab.errors import import_extra

SCHEMA = {
    "run": pl.Utf8,
    "mean": pl.Float64,
    "delta": pl.Float64,
    "p_ttest": pl.Float64,
    "p_fisher": pl.Float64,
    "wins": pl.Int64,
    "ties": pl.Int64,
    "losses": pl.Int64,
}


def fisher_randomization(
    baseline: np.ndarray, treatment: np.ndarray, *, n_permutations: int = 1000, seed: int = 42
) -> float:
    """Two-sided paired randomisation test p-value: the share of swap patterns whose
    |mean difference| is at least the observed one.

    Swapping a query's two scores flips the sign of its difference, so a pattern is a sign
    vector. With ``2**n ≤ n_permutations`` all patterns are enumerated (exact p-value: the
    observed pattern is among them, so it is never 0); otherwise ``N = n_permutations`` random
    patterns are drawn with ``numpy.random.default_rng(seed)`` and, with ``b`` of them at least
    as extreme as the observed one, ``p = (b + 1) / (N + 1)`` — the observed pattern counts as
    one draw, so a sampled p-value is never 0 (Phipson & Smyth 2010).

    Examples
    --------
    Differences (1, 1, 1): only the all-same-sign patterns reach |mean| = 1, 2 of 8.

    >>> fisher_randomization(np.zeros(3), np.ones(3))
    0.25

    Sampled: 30 equal differences; only the all-same-sign patterns (2 in 2**30) reach the
    observed |mean|, so no draw does (b = 0) and ``p = 1/(N+1)``:

    >>> fisher_randomization(np.zeros(30), np.ones(30), n_permutations=999)
    0.001
    """
    d = np.asarray(treatment, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    n = d.size
    if n == 0:
        return 1.0
    observed = abs(d.mean())
    exact = n <= 20 and 2**n <= n_permutations
    if exact:
        patterns = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
    else:
        patterns = np.random.default_rng(seed).integers(0, 2, size=(n_permutations, n)) * 2 - 1
    means = np.abs((patterns * d).mean(axis=1))
    # a relative tolerance so float noise in the means cannot flip an exact tie
    extreme = int(np.count_nonzero(means >= observed - 1e-12 * max(1.0, observed)))
    if exact:
        return extreme / len(patterns)
    return (extreme + 1) / (len(patterns) + 1)


def paired_pvalues(
    baseline: np.ndarray, treatment: np.ndarray, *, n_permutations: int = 1000, seed: int = 42
) -> tuple[float, float]:
    """Two-sided paired t-test (ranx's) and Fisher randomisation (:func:`fisher_randomization`) p-values.

    Identical score vectors give ``(1.0, 1.0)`` (scipy's t-test would return NaN).

    >>> paired_pvalues(np.array([0.1, 0.2]), np.array([0.1, 0.2]))
    (1.0, 1.0)
    """
    paired_student_t_test = import_extra("ranx.statistical_tests", "eval").paired_student_t_test

    a, b = np.asarray(baseline, dtype=np.float64), np.asarray(treatment, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired tests need equal lengths, got {a.shape} and {b.shape}")
    if a.size == 0 or np.array_equal(a, b):
        return 1.0, 1.0
    p_t, _ = paired_student_t_test(a, b)
    p_f = fisher_randomization(a, b, n_permutations=n_permutations, seed=seed)
    p_t = float(p_t)
    return (1.0 if np.isnan(p_t) else p_t), float(p_f)


def held_out_pvalues(held: Sequence[pl.DataFrame], column: str) -> tuple[pl.DataFrame, float, float]:
    """The folds' held-out rows (``qid``, ``fold``, ``base``, ``column``) by qid, with the paired t-test and
    Fisher p-values of ``column`` against ``base`` (:func:`paired_pvalues`).

    >>> rows, p_t, p_f = held_out_pvalues([pl.DataFrame({"qid": ["b", "a"], "base": [0.5, 0.1], "tuned": [0.5, 0.1],
    ...     "fold": [0, 0]})], "tuned")
    >>> rows.columns, rows["qid"].to_list(), (p_t, p_f)
    (['qid', 'fold', 'base', 'tuned'], ['a', 'b'], (1.0, 1.0))
    """
    rows = pl.concat(held).select("qid", "fold", "base", column).sort("qid")
    p_t, p_f = paired_pvalues(rows["base"].to_numpy(), rows[column].to_numpy())
    return rows, p_t, p_f


def paired_comparison(baseline: Mapping[str, float], treatment: Mapping[str, float], *, tol: float = 1e-12) -> dict:
    """Per-query scores (qid → value) of two runs, paired on their common queries: ``queries``,
    ``delta`` (treatment − baseline, mean), ``p_ttest``, ``p_fisher``, ``wins``, ``ties``, ``losses``
    (a difference within ``tol`` is a tie).

    >>> c = paired_comparison({"1": 0.5, "2": 1.0, "3": 0.0}, {"1": 1.0, "2": 1.0, "4": 0.3})
    >>> c["queries"], c["delta"], (c["wins"], c["ties"], c["losses"])
    (2, 0.25, (1, 1, 0))
    """
    qids = sorted(set(baseline) & set(treatment))
    a = np.array([baseline[q] for q in qids], dtype=np.float64)
    b = np.array([treatment[q] for q in qids], dtype=np.float64)
    p_t, p_f = paired_pvalues(a, b)
    d = b - a
    return {
        "queries": len(qids),
        "delta": float(d.mean()) if d.size else 0.0,
        "p_ttest": p_t,
        "p_fisher": p_f,
        "wins": int((d > tol).sum()),
        "ties": int((np.abs(d) <= tol).sum()),
        "losses": int((d < -tol).sum()),
    }


def compare_to_baseline(
    scores: Mapping[str, pl.DataFrame],
    baseline: str,
    metric: str = "ndcg@10",
    *,
    n_permutations: int = 1000,
    seed: int = 42,
) -> pl.DataFrame:
    """One row per run: mean ``metric``, difference to ``baseline``, p-values, wins/ties/losses.

    Parameters
    ----------
    scores : mapping of run name → per-query table
        Tables from :func:`qmdlab.eval.metrics.per_query` (``qid`` + metric columns), all over the
        same queries.
    baseline : str
        The key of the control run; its own row has ``delta`` 0 and p-values 1.

    Returns
    -------
    pl.DataFrame
        ``run, mean, delta, p_ttest, p_fisher, wins, ties, losses`` in the order of ``scores``
        (wins = queries where the run beats the baseline).
    """
    if baseline not in scores:
        raise KeyError(f"baseline {baseline!r} is not one of the runs: {', '.join(scores)}")
    base = scores[baseline].sort("qid")
    rows = []
    for name, table in scores.items():
        table = table.sort("qid")
        if table["qid"].to_list() != base["qid"].to_list():
            raise ValueError(f"run {name!r} is scored on different queries than the baseline")
        a, b = base[metric].to_numpy(), table[metric].to_numpy()
        p_t, p_f = paired_pvalues(a, b, n_permutations=n_permutations, seed=seed)
        rows.append(
            (
                name,
                float(b.mean()) if b.size else 0.0,
                float(b.mean() - a.mean()) if b.size else 0.0,
                p_t,
                p_f,
                int((b > a).sum()),
                int((b == a).sum()),
                int((b < a).sum()),
            )
        )
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")

"""Differential tests of the fusion methods against ranx on random runs.

Marked slow: ranx's numba kernels take tens of seconds to load/compile on a busy
2-core machine the first time in a process; the comparisons themselves are fast.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.fuse import fuse
from qmdlab.pipeline.trace import SCHEMAS

pytestmark = pytest.mark.slow


def lists_table(rows) -> pl.DataFrame:
    cols = ["qid", "list_id", "source", "query_type", "docno", "rank", "score", "weight"]
    types = [pl.String, pl.Int64, pl.String, pl.String, pl.String, pl.Int64, pl.Float64, pl.Float64]
    df = pl.DataFrame([dict(zip(cols, r)) for r in rows], schema=dict(zip(cols, types)))
    return df.with_columns(
        subquery=pl.lit("s"), chunk_id=pl.lit(None, dtype=pl.Int64), backend_score=pl.col("score")
    ).select([pl.col(c).cast(t) for c, t in SCHEMAS["lists"].items()])


def random_runs(seed: int, n_runs: int = 3, n_queries: int = 6, n_docs: int = 40):
    """Random runs with distinct scores: ``[{qid: {docno: score}}]``."""
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(n_runs):
        run = {}
        for q in range(n_queries):
            k = int(rng.integers(1, 21))
            docs = rng.choice(n_docs, size=k, replace=False)
            scores = rng.random(k) + 0.01
            run[f"q{q}"] = {f"d{d}": float(s) for d, s in zip(docs, scores)}
        runs.append(run)
    return runs


def runs_to_lists(runs, weights=None) -> pl.DataFrame:
    rows = []
    for i, run in enumerate(runs):
        for q, docs in run.items():
            ordered = sorted(docs.items(), key=lambda kv: -kv[1])
            for rank, (d, s) in enumerate(ordered, 1):
                rows.append((q, i, "fts", "original", d, rank, s, 1.0 if weights is None else weights[i]))
    return lists_table(rows)


def ranx_run(run):
    from ranx import Run

    return Run(run)


@pytest.mark.parametrize("seed", range(5))
def test_rrf_equals_ranx_fusion_rrf(seed):
    from ranx.fusion import rrf as ranx_rrf

    runs = random_runs(seed)
    expected = ranx_rrf([ranx_run(r) for r in runs], k=60).to_dict()
    fused = fuse(runs_to_lists(runs), PipelineConfig(fusion="rrf"))
    for q, docs in expected.items():
        ours = fused.filter(pl.col("qid") == q)
        got = dict(zip(ours["docno"].to_list(), ours["fused_score"].to_list()))
        assert got.keys() == docs.keys()
        for d, s in docs.items():
            assert got[d] == pytest.approx(s, rel=1e-12, abs=0)
        scores = ours.sort("fused_rank")["fused_score"].to_list()
        assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("seed", range(3))
def test_wsum_minmax_and_combmnz_equal_ranx_fuse(seed):
    from ranx import fuse as ranx_fuse

    runs = random_runs(seed)
    weights = [2.0, 1.0, 0.5]
    wsum = ranx_fuse([ranx_run(r) for r in runs], norm="min-max", method="wsum", params={"weights": weights}).to_dict()
    mnz = ranx_fuse([ranx_run(r) for r in runs], norm="min-max", method="mnz").to_dict()
    lists = runs_to_lists(runs, weights)
    for method, expected in (("wsum_minmax", wsum), ("combmnz", mnz)):
        fused = fuse(lists, PipelineConfig(fusion=method))
        for q, docs in expected.items():
            ours = fused.filter(pl.col("qid") == q)
            got = dict(zip(ours["docno"].to_list(), ours["fused_score"].to_list()))
            for d, s in docs.items():
                assert got[d] == pytest.approx(s, rel=1e-9, abs=1e-12), (method, q, d)


def test_trace_to_ranx_run():
    from qmdlab.pipeline.trace import Trace

    t = Trace(
        final=pl.DataFrame(
            {
                "qid": ["q", "q"],
                "docno": ["d", "e"],
                "fused_rank": [1, 2],
                "position_score": [1.0, 0.5],
                "blend_weight": [1.0, 1.0],
                "rerank_score": [None, None],
                "final_score": [1.0, 0.5],
                "final_rank": [1, 2],
            }
        )
    )
    assert t.to_ranx_run().to_dict() == {"q": {"d": 1.0, "e": 0.5}}

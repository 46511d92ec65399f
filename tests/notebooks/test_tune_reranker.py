"""The tune notebook's blend controls act on a trained reranker's held-out scores.

A finished ``qmdlab train reranker`` run directory is built here from real recorded traces of the
default corpus (fake models) plus a held-out score table of a fixed, strong-but-imperfect scorer
(so that moving a blend weight must move nDCG@10); training itself is tested in
tests/training/test_reranker.py.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from ..conftest import require

require.extra("notebooks")  # marimo (and matplotlib): without the extra this module skips, under CI it fails

import marimo as mo  # noqa: E402

from .conftest import NB_ARGS, NOTEBOOKS, run_notebook  # noqa: E402

HELDOUT_QUERIES = 30


@pytest.fixture
def reranker_run(nb_env, tmp_path):
    """A finished reranker run of the default suite whose held-out scores cover 30 queries."""
    from qmdlab.eval.runner import run_suite
    from qmdlab.eval.suites import get_suite
    from qmdlab.models import load_models
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.store import Index
    from qmdlab.training import rundir
    from qmdlab.training.reranker_data import candidate_table

    out = tmp_path / "runs" / "rr"
    suite = get_suite("default")
    cfg = PipelineConfig(rerank=False, expand=False)
    res = run_suite(
        suite,
        load_models("fake", expand="none", rerank="none"),
        cfg,
        out=out / "recorded",
        name="fused",
        progress=False,
        check_ranx=False,
        log=lambda _m: None,
    )
    queries = suite.data().judged_queries().select(pl.col("qid").cast(pl.Utf8), "query")
    table = candidate_table(
        res.trace, res.qrels, queries, Index.open(suite.workdir() / "index"), cfg.replace(candidate_limit=20)
    )
    cands = table.filter(pl.col("candidate"))
    held = sorted(cands["qid"].unique().to_list())[:HELDOUT_QUERIES]
    cands = cands.filter(pl.col("qid").is_in(held))
    noise = np.random.default_rng(0).uniform(0.0, 0.6, cands.height)
    score = np.where(cands["grade"].to_numpy() >= 1, 0.5, 0.0) + noise  # relevant ranks higher, not always
    cands.select("qid", "docno", "chunk_id").with_columns(
        logit=pl.Series(score), rerank_score=pl.Series(score)
    ).write_parquet(out / "heldout_scores.parquet")
    (out / "config.yaml").write_text("suite: default\ncandidates: 20\n", encoding="utf-8")
    rundir.mark_done(out, {"suite": "default", "queries": len(held), "model": None})
    return out, held


def _weight_1(value: float):
    return mo.ui.slider(0.0, 1.0, step=0.05, value=value, label="position weight, band 1")


@pytest.mark.slow
def test_blend_sliders_move_heldout_ndcg(reranker_run, monkeypatch):
    from qmdlab.training.reranker_study import load_heldout_study

    out, held = reranker_run
    args = (*NB_ARGS, "--reranker", str(out))
    _, at_start = run_notebook(NOTEBOOKS / "tune.py", *args, monkeypatch=monkeypatch)
    assert at_start["rerank_source"].value == str(out)
    # held-out queries only: exactly the queries of the score table, scored from that table
    assert at_start["study"].qids == held
    assert at_start["study"].trace.rerank["qid"].unique().sort().to_list() == held
    assert at_start["config"] == at_start["defaults"] and at_start["config"].rerank
    ref = load_heldout_study(out)
    assert at_start["evaluation"].metrics == ref.study.evaluate(at_start["config"]).metrics
    assert at_start["baseline"].metrics == ref.study.evaluate(ref.fused).metrics  # deltas vs the fused order

    ndcg = {}
    for w in (0.0, 1.0):
        _, d = run_notebook(
            NOTEBOOKS / "tune.py",
            *args,
            monkeypatch=monkeypatch,
            defs={"knobs": mo.ui.dictionary({"blend_weight_1": _weight_1(w)})},
        )
        cfg = d["config"]
        assert cfg.blend_weights[0] == w and cfg.blend_weights[1:] == at_start["config"].blend_weights[1:]
        assert d["evaluation"].metrics == ref.study.evaluate(cfg).metrics
        ndcg[w] = d["evaluation"].metrics["ndcg@10"]
    # the slider acts on the reranker's scores: the metric moves with it
    assert ndcg[0.0] != pytest.approx(ndcg[1.0], abs=1e-9), ndcg


def test_a_run_under_runs_is_offered_but_not_picked_without_the_flag(reranker_run, monkeypatch):
    from qmdlab.training.reranker_study import finished_runs

    out, _ = reranker_run
    assert finished_runs("default", roots=[out.parent]) == [out]
    assert finished_runs("cisi", roots=[out.parent]) == []  # another suite's traces are not offered
    monkeypatch.chdir(out.parent.parent)  # runs/ = this test's, whatever the checkout's runs/ hold
    _, defs = run_notebook(NOTEBOOKS / "tune.py", *NB_ARGS, monkeypatch=monkeypatch)
    source = defs["rerank_source"]
    assert source.value == "" and defs.get("heldout") is None
    assert sorted(source.options.values()) == ["", "runs/rr"]

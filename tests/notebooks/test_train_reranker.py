"""The train notebook's reranker section shows what `qmdlab train reranker` stored (no logic of its own)."""

from __future__ import annotations

import polars as pl
import pytest

from .conftest import NB_ARGS, NOTEBOOKS, run_notebook

pytestmark = pytest.mark.extra("notebooks")  # the notebooks run in marimo


def test_train_notebook_shows_the_heldout_reranker_table(nb_env, monkeypatch, tmp_path):
    from qmdlab.training import rundir

    run = tmp_path / "rr"
    run.mkdir()
    table = pl.DataFrame(
        {
            "run": ["fused", "rerank-tuned"],
            "mean": [0.5, 0.55],
            "delta": [0.0, 0.05],
            "p_ttest": [1.0, 0.03],
            "p_fisher": [1.0, 0.04],
            "wins": [0, 9],
            "ties": [10, 3],
            "losses": [0, 2],
        }
    )
    table.write_csv(run / "heldout.csv")
    rundir.mark_done(
        run,
        {
            "suite": "default",
            "queries": 12,
            "auc": {"rerank_pooled": 0.8, "fused_pooled": 0.7},
            "folds": [],
            "model": "cross-encoder:/somewhere/model",
        },
    )
    _, defs = run_notebook(NOTEBOOKS / "train.py", *NB_ARGS, "--reranker", str(run), monkeypatch=monkeypatch)
    report = defs["reranker_report"]
    assert report.heldout.equals(table)
    assert report.auc["rerank_pooled"] == 0.8 and report.model == "cross-encoder:/somewhere/model"


def test_train_notebook_without_a_reranker_run_says_how(nb_env, monkeypatch, tmp_path):
    _, defs = run_notebook(
        NOTEBOOKS / "train.py", *NB_ARGS, "--reranker", str(tmp_path / "none"), monkeypatch=monkeypatch
    )
    assert defs.get("reranker_report") is None

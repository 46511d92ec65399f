"""The train notebook's CPU-recipe section shows what `make train-demo` stored (no logic of its own)."""

from __future__ import annotations

import json
import types

import pytest

from .conftest import NB_ARGS, NOTEBOOKS, run_notebook

pytestmark = pytest.mark.extra("notebooks")  # the notebooks run in marimo

PNG = b"\x89PNG\r\n\x1a\n"

RESULTS = {
    "none": {"ndcg@10": 0.70, "n_queries": 3},
    "sft+grpo": {
        "ndcg@10": 0.75,
        "delta_vs_none": 0.05,
        "wins": 2,
        "losses": 0,
        "p_t": 0.04,
        "p_fisher": 0.05,
        "s_per_query": 0.9,
        "n_queries": 3,
    },
}


def _recipe_run(root, *, summary_evaluate: bool):
    """A finished recipe run directory as qmdlab.training.cpu_run writes it (no plots yet)."""
    from qmdlab.training import rundir

    run = root / "cpu-small"
    for step in range(1, 4):
        rundir.append_metrics(
            run / "grpo",
            {
                "stage": "grpo",
                "step": step,
                "reward": 0.1 * step,
                "rewards/rule/mean": 0.2,
                "rewards/retrieval/mean": 0.01 * step,
            },
        )
    rundir.append_metrics(run / "evaluate" / "cisi", {"stage": "evaluate", "variant": "none", **RESULTS["none"]})
    rundir.append_metrics(
        run / "evaluate" / "cisi", {"stage": "evaluate", "variant": "sft+grpo", **RESULTS["sft+grpo"]}
    )
    summary = {
        "base": "smollm2",
        "splits": {"cisi": {"train": 3, "heldout": 3}},
        "evaluate": {"cisi": RESULTS} if summary_evaluate else {},
    }
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def _shown(defs):
    return defs["recipe_run"]


def test_train_notebook_shows_the_recipes_heldout_tables_and_plots(nb_env, monkeypatch, tmp_path):
    from qmdlab.training.evaluate import format_results

    run = _recipe_run(tmp_path, summary_evaluate=True)
    # --recipe points elsewhere; the text field (replaced here, as if typed) picks the run shown
    _, defs = run_notebook(
        NOTEBOOKS / "train.py",
        *NB_ARGS,
        "--recipe",
        str(tmp_path / "elsewhere"),
        monkeypatch=monkeypatch,
        defs={"recipe_dir": types.SimpleNamespace(value=str(run))},
    )
    shown = _shown(defs)
    assert shown.run_dir == run
    assert shown.results == {"cisi": RESULTS} and shown.heldout == {"cisi": 3}
    # the table is the recipe README's (qmdlab.training.evaluate.format_results), the plots are drawn once
    assert "| sft+grpo | 0.7500 | +0.0500 | 0.040 / 0.050 | 2/0 | 0.90 |" in format_results(shown.results["cisi"])
    for png in (run / "rewards.png", run / "heldout.png"):
        assert png.read_bytes()[:8] == PNG


def test_the_recipe_tables_come_from_the_evaluation_metrics_when_the_summary_lacks_them(nb_env, monkeypatch, tmp_path):
    from qmdlab.training.cpu_run import load_run

    run = _recipe_run(tmp_path, summary_evaluate=False)
    (run / "rewards.png").write_bytes(PNG + b"already drawn")  # an existing plot is shown as it is
    loaded = load_run(run)
    assert loaded.results == {"cisi": RESULTS}
    assert (run / "rewards.png").read_bytes() == PNG + b"already drawn"
    assert loaded.heldout_png.read_bytes()[:8] == PNG


def test_train_notebook_without_a_recipe_run_says_which_command_makes_one(nb_env, monkeypatch, tmp_path):
    from qmdlab.training.cpu_run import load_run

    assert load_run(tmp_path / "none") is None
    _, defs = run_notebook(
        NOTEBOOKS / "train.py", *NB_ARGS, "--recipe", str(tmp_path / "none"), monkeypatch=monkeypatch
    )
    assert defs.get("recipe_run") is None

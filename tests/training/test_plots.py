"""Plots of an expander run from what the run directory holds: reward curves and the held-out table."""

from __future__ import annotations

import json
import math

import pytest

from qmdlab.training.plots import plot_heldout, plot_rewards, reward_series

pytestmark = pytest.mark.extra("notebooks", "matplotlib")  # the plots draw with matplotlib

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def grpo_run(tmp_path):
    """A hand-written GRPO metrics.jsonl: step 2's batch had no labelled prompt (retrieval NaN),
    plus lines of other stages and a non-step line that must not be drawn."""
    run = tmp_path / "grpo"
    run.mkdir()
    lines = [
        {"stage": "sft", "step": 1, "reward": 9.0},
        {"stage": "grpo", "step": 1, "reward": 0.5, "rewards/rule/mean": 0.4, "rewards/retrieval/mean": 0.025},
        {"stage": "grpo", "step": 2, "reward": 0.3, "rewards/rule/mean": 0.3, "rewards/retrieval/mean": math.nan},
        {"stage": "grpo", "step": 3, "reward": 0.7, "rewards/rule/mean": 0.5, "rewards/retrieval/mean": -0.01},
        {"stage": "grpo", "train_runtime": 12.0},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))  # NaN as json writes it
    return run


def test_reward_series_reads_grpo_steps_and_skips_nan(grpo_run):
    s = reward_series(grpo_run)
    assert s["rewards/retrieval/mean"] == [(1, 0.025), (3, -0.01)]
    assert s["rewards/rule/mean"] == [(1, 0.4), (2, 0.3), (3, 0.5)]
    assert s["reward"] == [(1, 0.5), (2, 0.3), (3, 0.7)]


def test_reward_series_of_a_directory_without_metrics_is_empty(tmp_path):
    assert all(v == [] for v in reward_series(tmp_path).values())


def test_plot_rewards_writes_a_png(grpo_run, tmp_path):
    png = plot_rewards(grpo_run, tmp_path / "out" / "rewards.png", window=2)
    assert png.read_bytes()[:8] == PNG and png.stat().st_size > 5_000
    empty = plot_rewards(tmp_path / "no-run", tmp_path / "empty.png")  # "not logged" panels, still a figure
    assert empty.read_bytes()[:8] == PNG


def test_a_gain_run_draws_its_delta_harm_kl_and_held_back_reward(tmp_path):
    from qmdlab.training.plots import GAIN_KEYS

    run = tmp_path / "grpo"
    run.mkdir()
    lines = [
        {"stage": "grpo", "step": 1, "reward": -0.2, "gain/delta": -0.1, "gain/harmful": 0.5, "kl": 0.0},
        {"stage": "grpo", "step": 2, "reward": 0.1, "gain/delta": 0.1, "gain/harmful": 0.0, "kl": 0.002},
        {"stage": "grpo", "step": 2, "heldback/reward": 0.03},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    series = reward_series(run, GAIN_KEYS)
    assert series["gain/delta"] == [(1, -0.1), (2, 0.1)] and series["gain/harmful"] == [(1, 0.5), (2, 0.0)]
    assert series["kl"] == [(1, 0.0), (2, 0.002)] and series["heldback/reward"] == [(2, 0.03)]
    rule_run = plot_rewards(tmp_path / "no-run", tmp_path / "rule.png")
    gain_run = plot_rewards(run, tmp_path / "gain.png")
    from PIL import Image

    # five panels for a gain run against three for a rule run: the figure is wider
    assert Image.open(gain_run).size[0] > Image.open(rule_run).size[0] * 1.5


def test_plot_heldout_writes_a_png(tmp_path):
    results = {
        "default": {
            "none": {"ndcg@10": 0.78, "n_queries": 20},
            "sft+grpo": {"ndcg@10": 0.80, "p_t": 0.04, "p_fisher": 0.05, "n_queries": 20},
        },
        "cisi": {"none": {"ndcg@10": 0.30}, "sft": {"ndcg@10": None}, "sft+grpo": {"ndcg@10": 0.31}},
    }
    png = plot_heldout(results, tmp_path / "heldout.png")
    assert png.read_bytes()[:8] == PNG and png.stat().st_size > 5_000

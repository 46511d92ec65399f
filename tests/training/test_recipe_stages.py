"""The recipe's optional stages: ``sft: null`` starts GRPO from the base itself, ``evaluate: null``
leaves held-out scoring to another tool; every other stage runs as configured. The trainers are
stand-ins here (the real SFT → GRPO → export chain runs in ``test_chain.py``)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.extra("train")


@pytest.fixture
def stages(monkeypatch, tmp_path):
    """Record each trainer's config instead of training."""
    import qmdlab.training.evaluate as evaluate
    import qmdlab.training.export as export
    import qmdlab.training.grpo as grpo
    import qmdlab.training.sft as sft

    calls: dict[str, list] = {"sft": [], "grpo": [], "export": [], "evaluate": []}

    def fake_sft(cfg):
        calls["sft"].append(cfg)
        return {"merged": str(tmp_path / "sft-merged")}

    def fake_grpo(cfg):
        calls["grpo"].append(cfg)
        (tmp_path / "grpo-out").mkdir(exist_ok=True)
        return {"merged": str(tmp_path / "grpo-merged")}

    def fake_export(cfg):
        calls["export"].append(cfg)
        return {"quants": {q: f"{cfg.output_dir}/{cfg.name}-{q}.gguf" for q in cfg.quants}}

    def fake_evaluate(cfg):
        calls["evaluate"].append(cfg)
        return {"none": {"ndcg@10": 0.5}}

    monkeypatch.setattr(sft, "run_sft", fake_sft)
    monkeypatch.setattr(grpo, "run_grpo", fake_grpo)
    monkeypatch.setattr(export, "run_export", fake_export)
    monkeypatch.setattr(evaluate, "run_evaluate", fake_evaluate)
    monkeypatch.setattr("qmdlab.training.cpu_run.preload", lambda: 0)
    return calls


def _recipe(tmp_path, **fields):
    from qmdlab.training.cpu_run import RecipeConfig

    return RecipeConfig(
        base=str(tmp_path / "hf-base"), out=str(tmp_path / "run"), suites=["default"], synth=None, **fields
    )


def test_without_sft_grpo_starts_from_the_base_and_no_evaluate_stage_runs(stages, tmp_path, qmdlab_home):
    from qmdlab.training.cpu_run import run_recipe

    summary = run_recipe(_recipe(tmp_path, sft=None, evaluate=None, skip_base=True))
    assert stages["sft"] == [] and stages["evaluate"] == []
    assert [c.base for c in stages["grpo"]] == [str(tmp_path / "hf-base")]
    assert [c.name for c in stages["export"]] == ["expander"]
    assert list(summary["models"]) == ["grpo"] and summary["evaluate"] == {}
    readme = (tmp_path / "run" / "README.md").read_text(encoding="utf-8")
    assert "rewards.png" in readme and "heldout.png" not in readme
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["sft"] == {"merged": str(tmp_path / "hf-base")}


def test_with_sft_and_evaluate_every_stage_runs(stages, tmp_path, qmdlab_home):
    from qmdlab.training.cpu_run import run_recipe

    summary = run_recipe(_recipe(tmp_path, skip_base=True))
    assert [c.base for c in stages["sft"]] == [str(tmp_path / "hf-base")]
    assert [c.base for c in stages["grpo"]] == [str(tmp_path / "sft-merged")]
    assert [c.name for c in stages["export"]] == ["sft", "expander"]
    assert [c.suite for c in stages["evaluate"]] == ["default"]
    assert list(summary["models"]) == ["sft", "sft+grpo"]

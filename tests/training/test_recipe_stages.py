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


def test_vocabulary_sft_examples_are_the_train_split_queries(stages, tmp_path, qmdlab_home):
    from qmdlab.training.cpu_run import run_recipe
    from qmdlab.training.data import load_examples
    from qmdlab.training.splits import load_splits

    run_recipe(_recipe(tmp_path, skip_base=True, evaluate=None, sft_examples="vocabulary", vocabulary_min_df=1))
    out = tmp_path / "run"
    examples = load_examples(out / "data" / "all.jsonl")
    split = load_splits(out / "splits.json")["default"]
    from qmdlab.eval.suites import get_suite

    judged = get_suite("default").data().judged_queries()
    text = dict(zip(judged["qid"].cast(str), judged["query"], strict=True))
    assert examples and {e.query for e in examples} <= {text[q] for q in split.train}
    assert all(kind == "lex" for e in examples for kind, _ in e.output)
    assert [c.train_file for c in stages["sft"]] == [str(out / "data" / "train.jsonl")]


def test_an_unknown_sft_examples_value_names_the_field_and_the_choices(tmp_path):
    from qmdlab.errors import ConfigError

    with pytest.raises(ConfigError, match="sft_examples: 'notes' is not one of seed, vocabulary"):
        _recipe(tmp_path, sft_examples="notes")


def test_vocabulary_sft_leaves_out_the_queries_grpo_holds_back(stages, tmp_path, qmdlab_home):
    from pathlib import Path

    from qmdlab.training.cpu_run import run_recipe
    from qmdlab.training.data import load_examples
    from qmdlab.training.grpo import heldback_rows, labelled_rows

    grpo_yaml = tmp_path / "grpo.yaml"
    cpu_small = Path("qmdlab/training/configs/cpu-small/grpo.yaml").read_text(encoding="utf-8")
    grpo_yaml.write_text(cpu_small + "\nearly_stop_fraction: 0.25\n", encoding="utf-8")
    recipe = _recipe(
        tmp_path, skip_base=True, evaluate=None, sft_examples="vocabulary", vocabulary_min_df=1, grpo=str(grpo_yaml)
    )
    run_recipe(recipe)
    (grpo_cfg,) = stages["grpo"]  # the configuration GRPO received; it draws its held-back slice from it
    labelled = labelled_rows(grpo_cfg)
    held = {r["query"] for r in heldback_rows(grpo_cfg, labelled)}
    trained = {r["query"] for r in labelled} - held
    examples = {e.query for e in load_examples(tmp_path / "run" / "data" / "all.jsonl")}
    assert held and examples
    assert not examples & held
    assert examples == trained

"""Every shipped recipe parses, and so does each stage config it names: a typo in a YAML key fails
here, not an hour into a run."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.extra("train")

RECIPES = sorted(Path("qmdlab/training/configs").glob("*/recipe.yaml"))


def test_recipes_are_found():
    assert len(RECIPES) >= 4 and Path("qmdlab/training/configs/scifact-expander-vocab/recipe.yaml") in RECIPES


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.parent.name)
def test_a_recipe_and_its_stage_configs_parse(path):
    from qmdlab.training.config import load_config
    from qmdlab.training.cpu_run import RecipeConfig
    from qmdlab.training.evaluate import EvaluateConfig
    from qmdlab.training.grpo import GRPORunConfig
    from qmdlab.training.sft import SFTRunConfig
    from qmdlab.training.synth import SynthConfig

    recipe = load_config(RecipeConfig, str(path))
    assert recipe.out.startswith("runs/")
    for cls, stage in (
        (SynthConfig, recipe.synth),
        (SFTRunConfig, recipe.sft),
        (GRPORunConfig, recipe.grpo),
        (EvaluateConfig, recipe.evaluate),
    ):
        if stage is not None:
            assert Path(stage).is_file(), stage
            load_config(cls, stage)

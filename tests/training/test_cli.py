"""`qmdlab train …` verbs: registration, prepare end to end, config errors as one-line messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from qmdlab.training.commands import register

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def cli():
    from qmdlab.cli import cli as main_cli

    if "train" not in main_cli.commands:  # the CLI registers areas on import
        register(main_cli)
    return main_cli


def test_train_group_has_every_verb(cli):
    res = CliRunner().invoke(cli, ["train", "--help"])
    assert res.exit_code == 0
    for verb in ("prepare", "sft", "grpo", "export", "evaluate", "synth"):
        assert verb in res.output


def test_prepare_writes_a_run_directory(cli, tmp_path):
    out = tmp_path / "data"
    res = CliRunner().invoke(
        cli,
        [
            "train",
            "prepare",
            "--data",
            str(FIXTURES / "mini.jsonl"),
            "--output-dir",
            str(out),
            "--eval-fraction",
            "0.2",
        ],
    )
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert info["n_duplicates"] == 1 and (out / "sft_train.jsonl").exists()
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["stage"] == "prepare"


def test_every_verb_that_writes_a_run_directory_takes_output_dir(cli):
    """One name for "where this run writes", as in TRL; ``synth`` writes one JSONL file (``--output``)."""
    verbs = cli.commands["train"].commands
    for name, command in verbs.items():
        names = {opt for param in command.params for opt in getattr(param, "opts", [])}
        if name == "synth":
            assert "--output" in names and "--output-dir" not in names
        else:
            assert "--output-dir" in names, f"qmdlab train {name} has no --output-dir"
    # the older spelling still works where it existed
    assert "--out" in {o for p in verbs["reranker"].params for o in getattr(p, "opts", [])}


def test_bad_data_is_one_line_with_file_and_line(cli, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q", "output": [["sparse", "x"]]}\n')
    res = CliRunner().invoke(cli, ["train", "prepare", "--data", str(bad), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1
    assert res.output.strip().splitlines()[-1].startswith(f"error: {bad}:1: output[0]: type 'sparse'")


@pytest.mark.parametrize(
    "args,needle",
    [
        (["sft", "--set", "lora_rank=8"], "unknown SFTRunConfig option(s): lora_rank"),
        (["grpo", "--set", "beta"], "expected KEY=VALUE"),
        (["export", "--model", "/nonexistent/dir"], "is not a model directory"),
        (["evaluate"], "nothing to evaluate"),
        (["synth"], "synth needs --collection"),
    ],
)
def test_config_errors_are_user_errors(cli, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(
        cli, ["train", *args, *(["--output-dir", str(tmp_path / "r")] if args[0] in ("export", "evaluate") else [])]
    )
    assert res.exit_code == 1, res.output
    assert needle in res.output


def test_set_values_are_yaml_typed_and_coerced(tmp_path):
    from qmdlab.training.commands import _sets
    from qmdlab.training.config import load_config
    from qmdlab.training.sft import SFTRunConfig

    sets = _sets(("learning_rate=1e-4", "lora-targets=[q_proj, v_proj]", "merge=false"))
    assert sets["lora_targets"] == ["q_proj", "v_proj"] and sets["merge"] is False
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("learning_rate: 3e-5\nmax_steps: 7\n")  # YAML 1.1 reads 3e-5 as a string
    cfg = load_config(SFTRunConfig, cfg_file, **sets)
    assert cfg.learning_rate == 1e-4 and cfg.max_steps == 7 and cfg.lora_targets == ["q_proj", "v_proj"]
    assert load_config(SFTRunConfig, cfg_file).learning_rate == 3e-5


def test_shipped_configs_load_into_their_dataclasses():
    import yaml

    from qmdlab.training.config import load_config
    from qmdlab.training.evaluate import EvaluateConfig
    from qmdlab.training.export import ExportConfig
    from qmdlab.training.grpo import GRPORunConfig
    from qmdlab.training.sft import SFTRunConfig
    from qmdlab.training.synth import SynthConfig

    cfgs = Path(__file__).resolve().parents[2] / "qmdlab" / "training" / "configs"
    sft = load_config(SFTRunConfig, cfgs / "sft.yaml")
    assert (sft.lora_r, sft.lora_alpha, sft.learning_rate, sft.max_length) == (16, 32, 2e-4, 512)
    assert sft.per_device_train_batch_size * sft.gradient_accumulation_steps == 16
    grpo = load_config(GRPORunConfig, cfgs / "grpo.yaml")
    assert (grpo.beta, grpo.num_generations, grpo.max_completion_length, grpo.learning_rate) == (0.04, 4, 200, 5e-7)
    assert load_config(ExportConfig, cfgs / "export.yaml").quants == ["Q4_K_M", "Q8_0"]
    load_config(EvaluateConfig, cfgs / "evaluate.yaml")
    load_config(SynthConfig, cfgs / "synth.yaml")
    kinds = {p.stem: yaml.safe_load(p.read_text())["distributed_type"] for p in (cfgs / "accelerate").glob("*.yaml")}
    assert kinds == {"ddp": "MULTI_GPU", "zero2": "DEEPSPEED", "cpu2": "MULTI_GPU"}
    assert yaml.safe_load((cfgs / "accelerate" / "zero2.yaml").read_text())["deepspeed_config"]["zero_stage"] == 2

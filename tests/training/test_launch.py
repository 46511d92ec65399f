"""SFT for one step in 2 processes through `accelerate launch` on CPU (gloo): the DDP path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.slow
def test_sft_one_step_two_processes(tmp_path, tiny_qwen3):
    accelerate = Path(sys.executable).with_name("accelerate")
    if not accelerate.exists():
        accelerate = shutil.which("accelerate")
    if not accelerate:
        pytest.skip("the accelerate launcher is not installed")
    from qmdlab.training.data import prepare

    prepare(FIXTURES / "mini.jsonl", tmp_path / "data", eval_fraction=0.2)
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    cmd = [
        str(accelerate),
        "launch",
        "--config_file",
        str(REPO / "qmdlab/training/configs/accelerate/cpu2.yaml"),
        "-m",
        "qmdlab.training.sft",
        "--base",
        str(tiny_qwen3),
        "--train_file",
        str(tmp_path / "data/train.jsonl"),
        "--output_dir",
        str(tmp_path / "run"),
        "--max_steps",
        "1",
        "--per_device_train_batch_size",
        "1",
        "--gradient_accumulation_steps",
        "1",
        "--logging_steps",
        "1",
        "--merge",
        "false",
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads((tmp_path / "run" / "DONE").read_text())
    assert done["world_size"] == 2 and done["steps"] == 1
    # 6 training examples sharded over 2 ranks → 3 batches per rank, so one step is 1/3 epoch
    # (a single process would log 1/6).
    log = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in log if "loss" in m)
    assert step["epoch"] == pytest.approx(1 / 3, abs=1e-6)

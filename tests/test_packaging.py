"""The wheel installs one top-level package, ``qmdlab``: the repository's ``eval/`` and ``training/``
folders land as ``qmdlab.eval`` and ``qmdlab.training`` with their configs, and nothing generically
named reaches a user's site-packages."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0 and "No module named" in r.stderr and "setuptools" in r.stderr:
        pytest.skip(f"setuptools is not installed in this environment: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr[-2000:]
    (path,) = out.glob("qmdlab-*.whl")
    return zipfile.ZipFile(path)


def test_only_qmdlab_at_the_top(wheel):
    tops = {name.split("/", 1)[0] for name in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"qmdlab"}, sorted(tops)


def test_eval_and_training_are_subpackages_with_their_configs(wheel):
    names = set(wheel.namelist())
    for module in (
        "qmdlab/eval/record.py",
        "qmdlab/eval/loaders/smart.py",
        "qmdlab/training/sft.py",
        "qmdlab/eval/configs/content-first-fields.yaml",
        "qmdlab/training/configs/sft.yaml",
        "qmdlab/training/configs/cpu-small/recipe.yaml",
        "qmdlab/py.typed",
    ):
        assert module in names, module
    assert not any(n.startswith(("eval/", "training/", "tests/", "benchmarks/", "experiments/")) for n in names)


def test_the_verbs_above_the_core_point_into_the_namespace(wheel):
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    text = wheel.read(meta).decode()
    assert "eval = qmdlab.eval.commands:register" in text and "train = qmdlab.training.commands:register" in text

"""``qmdlab eval SUITE --ray`` on a local Ray instance (2 CPUs): traces from actors land in the same
trace cache, and the run files and metrics are bit-identical to a local run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli

pytestmark = pytest.mark.slow  # a Ray instance and two actors running the pipeline: ~15-30 s on 2 cores


def _suite_dir(tmp_path) -> Path:
    d = tmp_path / "user-data"
    d.mkdir()
    docs = {
        "1": ("Cats", "cats purr and sleep all day"),
        "2": ("Dogs", "dogs bark at cats"),
        "3": ("Birds", "birds fly south in winter"),
        "10": ("Fish", "fish swim in water"),
        "11": ("Cat food", "what cats eat: fish and meat"),
        "12": ("Winter", "birds and dogs in winter"),
    }
    (d / "T.ALL").write_text("".join(f".I {i}\n.T\n{t}\n.W\n{w}\n" for i, (t, w) in docs.items()))
    (d / "T.QRY").write_text(
        ".I 1\n.W\ncats\n.I 2\n.W\nbirds fly\n.I 3\n.W\nswimming fish\n.I 4\n.W\ncat food\n.I 5\n.W\nwinter dogs\n"
    )
    (d / "T.REL").write_text("1 1 0 0.0\n1 11 0 0.0\n2 3 0 0.0\n3 10 0 0.0\n4 11 0 0.0\n5 12 0 0.0\n5 2 0 0.0\n")
    return d


def _eval(suite: Path, out: Path, *extra: str):
    res = CliRunner().invoke(
        cli,
        [
            "eval",
            str(suite),
            "--format",
            "smart",
            "--preset",
            "fake",
            "--no-progress",
            "--ablate",
            "--out",
            str(out),
            *extra,
        ],
    )
    assert res.exit_code == 0, res.output
    return res.output


def test_ray_eval_is_bit_identical_to_local(ray_local, tmp_path, qmdlab_home):
    suite = _suite_dir(tmp_path)
    out_ray = _eval(suite, tmp_path / "ray", "--ray", "--ray-actors", "2")
    assert "(0 traces from cache)" in out_ray
    cache = Path(json.loads((tmp_path / "ray" / "run.json").read_text())["trace_cache"])
    assert sorted(p.parent.name for p in cache.glob("*/DONE")) == ["1", "2", "3", "4", "5"]
    # the same cache serves a local run ...
    assert "(5 traces from cache)" in _eval(suite, tmp_path / "again")
    # ... and a local run from scratch writes the same run files and metrics, bit for bit
    shutil.rmtree(cache)
    assert "(0 traces from cache)" in _eval(suite, tmp_path / "local")
    for name in ("metrics.json", "qmdlab.trec", "ablation.csv", "qrels.txt"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    runs = sorted(p.name for p in (tmp_path / "local").glob("*.trec"))
    assert len(runs) > 3 and runs == sorted(p.name for p in (tmp_path / "ray").glob("*.trec"))
    for name in runs:
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name

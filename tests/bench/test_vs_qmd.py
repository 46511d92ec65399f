"""``benchmarks/vs_qmd.py``: its measuring parts in closed form, and a real run against qmd where
qmd is installed (it comes from the npm registry, which the test suite does not reach)."""

from __future__ import annotations

import doctest
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "vs_qmd.py"


@pytest.fixture(scope="module")
def vs_qmd():
    spec = importlib.util.spec_from_file_location("vs_qmd", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["vs_qmd"] = module
    spec.loader.exec_module(module)
    return module


def test_doctests(vs_qmd):
    result = doctest.testmod(vs_qmd)
    assert result.attempted >= 8 and result.failed == 0


def test_speedup_is_qmd_time_over_qmdlab_time_and_rate_the_other_way(vs_qmd):
    row = vs_qmd.Row("g", "times", "s", qmd=[2.0, 4.0, 3.0], qmdlab=[1.0, 1.5, 0.5])
    assert row.speedup == pytest.approx(3.0 / 1.0)
    rate = vs_qmd.Row("g", "rate", "chunks/s", qmd=[2.0], qmdlab=[5.0])
    assert rate.speedup == pytest.approx(2.5)
    row.add("qmd", 1.0, 300.0)
    row.add("qmd", 1.0, 200.0)
    assert row.qmd_peak_mb == 300.0 and row.median("qmd") == pytest.approx(2.0)


def test_run_proc_peak_memory_tells_a_big_child_from_a_small_one(vs_qmd):
    import os

    env = dict(os.environ)
    small = vs_qmd.run_proc([sys.executable, "-c", "pass"], env)
    big = vs_qmd.run_proc([sys.executable, "-c", "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096])"], env)
    assert big.peak_mb - small.peak_mb > 150
    # the caller's own size (this test process) is not counted in a child's peak
    assert small.peak_mb < 40, small.peak_mb
    failed = vs_qmd.run_proc([sys.executable, "-c", "import sys; sys.exit(3)"], env)
    assert failed.returncode == 3
    with pytest.raises(RuntimeError, match="exited 3"):
        failed.check()


def test_unknown_group_is_refused_by_name():
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "index,nope"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "unknown group(s) nope" in r.stderr


QMD = Path.home() / ".cache" / "qmdlab" / "bench" / "qmd" / "qmd-2.8.3" / "node_modules" / "@tobilu" / "qmd"


def _cisi_present() -> bool:
    from qmdlab.eval.suites import collection_dir

    return (collection_dir("cisi") / "CISI.ALL").exists()


@pytest.mark.slow
@pytest.mark.skipif(not QMD.exists(), reason="qmd 2.8.3 is not installed (benchmarks/vs_qmd.py installs it from npm)")
@pytest.mark.skipif(not _cisi_present(), reason="CISI is not in ../shared/data/cisi (or $QMDLAB_CISI_DIR)")
def test_real_run_against_qmd_agrees_on_bm25(tmp_path):
    out = tmp_path / "vs"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--only", "search", "--repeats", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    data = json.loads(out.with_suffix(".json").read_text())
    (row,) = data["rows"]
    assert len(row["qmd"]) == len(row["qmdlab"]) == 4
    # with qmd's query semantics both tools return the same BM25 top 10, in the same order
    assert "identical ranking on 4/4" in row["note"], row["note"]

"""``benchmarks/bench.py`` runs end to end at minimal sizes. Never asserts timings.

Marked slow: it starts a fresh interpreter, writes a small corpus and builds indexes (a few
seconds on a busy 2-core machine).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_bench_smoke_runs_and_writes_results(tmp_path):
    out = tmp_path / "bench"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench.py"),
            "--smoke",
            "--only",
            "bm25,vector,update",
            "--repeats",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    data = json.loads((out / "latest.json").read_text())
    assert data["mode"] == "smoke"
    groups = {row["group"] for row in data["rows"]}
    assert groups == {"bm25", "vector", "update"}
    for row in data["rows"]:
        assert row["status"] in {"meets", "misses", "info", "skipped"}, row
        assert row["goal"], row
    assert "| # | group | row |" in (out / "latest.md").read_text()
    assert "result" in r.stdout


def test_bench_rejects_unknown_group(tmp_path):
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--only", "nope", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "unknown group" in r.stderr

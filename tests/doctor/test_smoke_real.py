"""`qmdlab doctor --smoke` (what `make setup` ends with), for real on the offline models."""

from __future__ import annotations

import subprocess
import sys

import pytest

from qmdlab.models.registry import ref_status, resolve_refs


@pytest.mark.slow
def test_smoke_runs_each_offline_model_in_a_child(require):
    _, refs = resolve_refs("offline", config={}, environ={})
    if not all(ref_status(r)["ready"] for r in refs.values()):
        pytest.skip("offline models not assembled; run `qmdlab pull --preset offline`")
    require.extra("llama")
    proc = subprocess.run(
        [sys.executable, "-m", "qmdlab.cli", "doctor", "--smoke", "--preset", "offline"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for name in ("library", "embed", "expand", "rerank"):
        assert any(ln.split()[:2] == [name, "ok"] for ln in lines), proc.stdout
    assert lines[-1] == "smoke check passed"

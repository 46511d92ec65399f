"""The query adapter in the models layer: the identity reproduces the embedder bit for bit, documents
are never mapped, the fingerprint carries the adapter's digest (documents stay under the base's),
the ``BASE+adapter:PATH`` reference, and the refusals (another embedder, another dimension, a
sidecar that does not describe its arrays)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qmdlab.errors import ConfigError, ModelError
from qmdlab.models import load_models
from qmdlab.models.adapter import AdaptedEmbedder, QueryAdapter, adapter_files, load_adapter, save_adapter
from qmdlab.models.fakes import FAKE_VOCABULARY, KeywordEmbedder
from qmdlab.models.registry import build_model, ref_status, scheme_of
from qmdlab.store.vectors import document_fingerprint

QUERIES = ["git commit on a branch", "python test file", "docker network server error", "nothing in the vocabulary"]
DOCS = [("Git", "merge a branch and rebase"), ("", "sqlite database index"), ("Cache", "memory performance")]


@pytest.fixture
def base():
    return KeywordEmbedder(FAKE_VOCABULARY)


def _rotation(dim: int, seed: int = 0) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, dim)))
    return q


def _saved(tmp_path, base, arrays, name="adapter") -> str:
    folder = tmp_path / name
    save_adapter(QueryAdapter(arrays, base_fingerprint=base.fingerprint, base_ref="fake:keyword"), folder / "adapter")
    return str(folder)


@pytest.mark.parametrize("rank", [0, 3])
def test_identity_adapter_reproduces_the_embedder_exactly(tmp_path, base, rank):
    path = _saved(tmp_path, base, QueryAdapter.identity(base.dim, rank).arrays)
    emb = build_model("embed", f"fake:keyword+adapter:{path}")
    assert isinstance(emb, AdaptedEmbedder)
    for q in QUERIES:
        got, want = emb.embed_query(q), base.embed_query(q)
        assert got.dtype == want.dtype == np.float32
        assert got.tobytes() == want.tobytes()
    assert emb.embed_documents(DOCS).tobytes() == base.embed_documents(DOCS).tobytes()


def test_a_map_changes_query_vectors_only_and_renormalises(tmp_path, base):
    r = _rotation(base.dim)
    emb = build_model("embed", f"fake:keyword+adapter:{_saved(tmp_path, base, {'W': r})}")
    for q in QUERIES[:3]:
        v = emb.embed_query(q)
        np.testing.assert_allclose(v, r.astype(np.float32) @ base.embed_query(q), atol=1e-6)
        assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-6
    assert emb.embed_documents(DOCS).tobytes() == base.embed_documents(DOCS).tobytes()
    assert not emb.embed_query(QUERIES[3]).any()  # a zero vector stays zero (it has no direction)


def test_low_rank_map_is_identity_plus_u_v_transpose(base):
    rng = np.random.default_rng(1)
    u, v = rng.normal(size=(base.dim, 2)), rng.normal(size=(base.dim, 2))
    a = QueryAdapter({"U": u, "V": v})
    x = base.embed_documents(DOCS)
    w = np.eye(base.dim) + u.astype(np.float32).astype(np.float64) @ v.astype(np.float32).astype(np.float64).T
    want = x @ w.T
    np.testing.assert_allclose(a.apply(x), want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-5)
    np.testing.assert_allclose(a.matrix(), w, atol=1e-5)
    assert a.rank == 2 and a.dim == base.dim


def test_the_fingerprint_carries_the_adapter_and_documents_stay_the_bases(tmp_path, base):
    ident = build_model("embed", f"fake:keyword+adapter:{_saved(tmp_path, base, {'W': np.eye(base.dim)}, 'i')}")
    rot = build_model("embed", f"fake:keyword+adapter:{_saved(tmp_path, base, {'W': _rotation(base.dim)}, 'r')}")
    again = build_model("embed", f"fake:keyword+adapter:{_saved(tmp_path, base, {'W': _rotation(base.dim)}, 'r2')}")
    prints = {base.fingerprint, ident.fingerprint, rot.fingerprint}
    assert len(prints) == 3
    assert rot.fingerprint == again.fingerprint  # the digest is of the arrays, not of the file or its path
    assert ident.fingerprint == f"{base.fingerprint}+adapter:{ident.adapter.digest}"
    assert {document_fingerprint(f) for f in prints} == {base.fingerprint}
    assert "+adapter:" in rot.model_id and rot.dim == base.dim


def test_stored_vectors_are_shared_with_the_base(tmp_path, base):
    from qmdlab.models.batching import embed_missing
    from qmdlab.store import Index
    from qmdlab.store.cleanup import cleanup

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Git\n\ncommit and branch\n")
    (notes / "b.md").write_text("# Docker\n\nnetwork server\n")
    emb = build_model("embed", f"fake:keyword+adapter:{_saved(tmp_path, base, {'W': _rotation(base.dim)})}")
    with Index.open(str(tmp_path / "idx")) as idx:
        idx.add_collection("n", notes)
        idx.update()
        assert embed_missing(idx, emb).stored == 2  # embedding with the adapter stores the base's vectors
        assert set(idx.vector_fingerprints()) == {base.fingerprint}
        assert idx.chunks_needing_vectors(base.fingerprint).height == 0
        assert (
            idx.vector_matrix(emb.fingerprint).matrix.tobytes() == idx.vector_matrix(base.fingerprint).matrix.tobytes()
        )
        assert cleanup(idx, stale_vectors=True, keep_fingerprint=emb.fingerprint, vacuum=False).vectors == 0
        assert set(idx.vector_fingerprints()) == {base.fingerprint}


def test_another_embedders_adapter_is_refused_naming_the_file_and_the_fix(tmp_path, base):
    other = KeywordEmbedder(["git", "rebase"])
    path = tmp_path / "a"
    save_adapter(QueryAdapter.identity(2, base_fingerprint=other.fingerprint, base_ref="fake:other"), path / "adapter")
    with pytest.raises(ModelError) as err:
        build_model("embed", f"fake:keyword+adapter:{path}")
    msg = str(err.value)
    assert str(path / "adapter.npz") in msg and other.fingerprint in msg and base.fingerprint in msg
    assert "qmdlab train adapter" in msg and f"fake:other+adapter:{path}" in msg


def test_a_mismatched_dimension_is_refused_with_a_clear_message(tmp_path, base):
    path = tmp_path / "a"
    save_adapter(QueryAdapter.identity(3, base_fingerprint=base.fingerprint), path / "adapter")
    with pytest.raises(ModelError) as err:
        build_model("embed", f"fake:keyword+adapter:{path}")
    msg = str(err.value)
    assert str(path / "adapter.npz") in msg and "3-d" in msg and f"{base.dim}-d" in msg
    assert "qmdlab train adapter" in msg
    # an embedder that learns its dimension only from its first answer: refused at the first query
    lazy = AdaptedEmbedder(_Lazy(base), load_adapter(path))
    with pytest.raises(ModelError, match=r"maps 3-d vectors but the embedder gave 40-d ones"):
        lazy.embed_query("git")


class _Lazy:
    """An embedder whose dimension is not known before it is called (a served model)."""

    def __init__(self, inner):
        self.inner, self.model_id, self.fingerprint = inner, inner.model_id, inner.fingerprint

    def embed_query(self, text):
        return self.inner.embed_query(text)


def test_save_and_load_round_trip_and_a_tampered_sidecar(tmp_path, base):
    a = QueryAdapter({"W": _rotation(base.dim)}, base_fingerprint=base.fingerprint, training={"pairs": 3})
    npz = save_adapter(a, tmp_path / "run" / "adapter")
    assert [p.name for p in adapter_files(tmp_path / "run")] == ["adapter.npz", "adapter.json"]
    b = load_adapter(tmp_path / "run")
    assert b.digest == a.digest and b.training == {"pairs": 3} and b.base_fingerprint == base.fingerprint
    meta = json.loads((tmp_path / "run" / "adapter.json").read_text())
    meta["digest"] = "0" * 16
    (tmp_path / "run" / "adapter.json").write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="describes other arrays"):
        load_adapter(npz)
    with pytest.raises(ModelError, match="does not exist"):
        load_adapter(tmp_path / "nowhere")


def test_the_reference_through_the_registry_and_config(tmp_path, base):
    path = _saved(tmp_path, base, {"W": np.eye(base.dim)})
    ref = f"fake:keyword+adapter:{path}"
    assert scheme_of(ref).name == "query adapter"
    assert ref_status(ref) == ref_status("fake:keyword")  # the file is the base's
    m = load_models("fake", config={"embed": ref})
    assert isinstance(m.embedder, AdaptedEmbedder)
    assert isinstance(load_models("fake", embed=ref).embedder, AdaptedEmbedder)
    with pytest.raises(ConfigError, match="can only be the embed model"):
        load_models("fake", rerank=ref)
    with pytest.raises(ModelError, match="names two adapters"):
        build_model("embed", f"{ref}+adapter:{path}")
    with pytest.raises(ModelError, match="names no adapter"):
        build_model("embed", "fake:keyword+adapter:")

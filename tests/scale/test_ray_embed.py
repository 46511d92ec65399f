"""``qmdlab embed --ray`` on a local Ray instance (2 CPUs): the same vectors as the local path,
stored under the same fingerprint, resumable, and refused when an actor's model differs."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.errors import ModelError
from qmdlab.models import load_models
from qmdlab.scale.cluster import RayOptions
from qmdlab.scale.ray_embed import EmbedderSpec, embed_with_ray
from qmdlab.store import Index

pytestmark = pytest.mark.slow  # a Ray instance and its actors: ~10-30 s on 2 cores


@pytest.fixture
def two_indexes(default_corpus, tmp_path, qmdlab_home):
    """Two indexes of the same small collection (the corpus's howto/ folder), not yet embedded."""
    src = tmp_path / "howto"
    shutil.copytree(default_corpus / "howto", src)
    out = []
    for name in ("local", "ray"):
        idx = Index.open(tmp_path / name)
        idx.add_collection("howto", src)
        idx.update()
        out.append(idx)
    yield out
    for idx in out:
        idx.close()


def _vectors(idx, fp):
    vm = idx.vector_matrix(fp)
    order = np.argsort(vm.chunk_ids, kind="stable")
    return vm.chunk_ids[order], vm.matrix[order]


def _embed(idx, *args):
    return CliRunner().invoke(cli, ["--index", str(idx.dir), "embed", "--no-progress", *args])


@pytest.mark.parametrize("preset", ["fake", "offline-mini"])  # MiniLM on llama.cpp, one per actor
def test_same_vectors_as_the_local_path(preset, ray_local, two_indexes, require):
    local, remote = two_indexes
    emb = load_models(preset, expand="none", rerank="none").embedder
    if preset != "fake":
        from qmdlab.models.registry import ref_status

        require(ref_status("pkg:all-minilm-l6-v2")["ready"], "MiniLM is not pulled (qmdlab pull --preset offline-mini)")
    res = _embed(local, "--preset", preset, "--batch-size", "8")
    assert res.exit_code == 0, res.output
    res = _embed(remote, "--preset", preset, "--ray", "--ray-actors", "2", "--batch-size", "8")
    assert res.exit_code == 0, res.output
    assert "on Ray, 2 actors" in res.output
    ids_l, mat_l = _vectors(local, emb.fingerprint)
    ids_r, mat_r = _vectors(remote, emb.fingerprint)
    assert len(ids_l) > 8 and np.array_equal(ids_l, ids_r)  # same chunks, same fingerprint
    np.testing.assert_allclose(mat_r, mat_l, rtol=0, atol=1e-5)
    assert set(remote.vector_fingerprints()) == {emb.fingerprint}
    again = _embed(remote, "--preset", preset, "--ray")
    assert again.exit_code == 0 and "all chunks already embedded" in again.output


def test_an_interrupted_run_resumes_where_it_stopped(ray_local, two_indexes):
    _, idx = two_indexes
    emb = load_models("fake").embedder
    todo = idx.chunks_needing_vectors(emb.fingerprint)
    writes = []

    def crash_after_two(ids, mat, fp):
        if len(writes) == 2:
            raise KeyboardInterrupt("killed")
        idx.store_vectors(ids, mat, fp)
        writes.append(len(ids))

    with pytest.raises(KeyboardInterrupt):
        embed_with_ray(
            idx,
            todo,
            EmbedderSpec("fake:keyword", batch_size=4),
            emb.fingerprint,
            RayOptions(actors=2),
            progress=False,
            store=crash_after_two,
        )
    left = idx.chunks_needing_vectors(emb.fingerprint)
    assert left.height == todo.height - sum(writes) and sum(writes) == 8  # two committed batches kept
    rep = embed_with_ray(
        idx, left, EmbedderSpec("fake:keyword", batch_size=4), emb.fingerprint, RayOptions(actors=2), progress=False
    )
    assert rep.chunks == left.height and idx.chunks_needing_vectors(emb.fingerprint).height == 0
    ids, mat = _vectors(idx, emb.fingerprint)
    assert len(ids) == todo.height
    ref = emb.embed_documents(list(zip(todo["title"].fill_null("").to_list(), todo["text"].to_list())))
    np.testing.assert_allclose(mat, ref[np.argsort(todo["chunk_id"].to_numpy(), kind="stable")], atol=1e-6)


def test_an_actor_with_another_model_is_refused_before_anything_is_stored(ray_local, two_indexes):
    _, idx = two_indexes
    emb = load_models("fake").embedder
    todo = idx.chunks_needing_vectors(emb.fingerprint)
    with pytest.raises(ModelError, match="every node must have the same model"):
        embed_with_ray(
            idx, todo, EmbedderSpec("fake:keyword"), "pkg:other#000000000000", RayOptions(actors=1), progress=False
        )
    assert idx.vector_fingerprints() == {}

"""The opt-in HNSW path of vector_search: recall against exact on a real index, the
saved graph is never used stale, the missing extra names its install, exact stays the default."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from qmdlab.errors import QmdlabError
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.search import vector_search
from qmdlab.store import Index

FP = "test:clustered#0"
DIM = 384


def _clustered(n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    """Centre plus isotropic noise of the same norm (cosine ~0.7 to the centre), unit length."""
    noise = rng.standard_normal((n, DIM)).astype(np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    x = centres[rng.integers(0, len(centres), n)] + noise
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _index(tmp_path, n_docs: int, seed: int) -> tuple[Index, np.ndarray, np.random.Generator]:
    root = tmp_path / "notes"
    for i in range(n_docs):
        d = root / f"f{i // 500:02d}"
        if i % 500 == 0:
            d.mkdir(parents=True)
        (d / f"n{i:05d}.md").write_text(f"# Note {i}\n\nbody of note number {i}\n", encoding="utf-8")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("notes", root)
    idx.update()
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(10, n_docs // 100), DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    todo = idx.chunks_needing_vectors(FP)
    idx.store_vectors(todo["chunk_id"].to_list(), _clustered(todo.height, rng, centres), FP)
    return idx, centres, rng


@pytest.fixture
def faiss(require):
    return require.module("faiss", "the ANN tests need FAISS: pip install 'qmdlab[ann]'")


@pytest.mark.slow
def test_recall_at_10_against_exact_on_5k_clustered_chunks(tmp_path, faiss):
    from qmdlab.search.ann import clear_memory

    clear_memory()
    idx, centres, rng = _index(tmp_path, 5000, seed=1)
    ann = PipelineConfig(vector_index="hnsw").ann()  # the defaults a user gets
    recall, same_scores = [], True
    for q in _clustered(50, rng, centres):
        exact = vector_search(idx, q, fingerprint=FP, limit=10)
        approx = vector_search(idx, q, fingerprint=FP, limit=10, ann=ann)
        assert len(exact) == len(approx) == 10
        recall.append(len({h.docno for h in exact} & {h.docno for h in approx}) / 10)
        by_doc = {h.docno: (h.chunk_id, h.score) for h in exact}
        same_scores &= all(
            by_doc[h.docno][0] == h.chunk_id and abs(by_doc[h.docno][1] - h.score) < 1e-6
            for h in approx
            if h.docno in by_doc
        )
    assert np.mean(recall) >= 0.95, f"recall@10 {np.mean(recall):.3f}"
    assert same_scores  # a document found gets its exact best chunk and cosine (to float32 rounding)
    assert (tmp_path / "idx" / "ann").is_dir()  # the graph was saved next to the SQLite file
    idx.close()


def test_saved_graph_is_reused_and_never_used_stale(tmp_path, faiss):
    from qmdlab.search.ann import AnnConfig, ann_graph, ann_paths, clear_memory

    clear_memory()
    idx, centres, rng = _index(tmp_path, 300, seed=2)
    cfg = AnnConfig()
    graph_path, meta_path = ann_paths(idx.dir, FP)

    def handle():
        return ann_graph(idx.dir, FP, idx.vector_matrix(FP), cfg)

    first = handle()
    assert first.source == "built" and graph_path.exists()
    assert handle().source == "memory"
    clear_memory()  # a new process: the saved graph's key matches the matrix
    assert handle().source == "disk"

    # re-embed one chunk under the same fingerprint (what `qmdlab embed -f` does): the matrix
    # changes, so the key changes, and the saved graph must not be used — neither from this
    # process's memory nor from disk by a fresh process
    chunk = int(idx.vector_matrix(FP).chunk_ids[7])
    new_vec = -idx.vector_matrix(FP).matrix[7]
    idx.store_vectors([chunk], new_vec[None, :], FP)
    clear_memory()
    rebuilt = handle()
    assert rebuilt.source == "built" and rebuilt.key != first.key
    assert json.loads(meta_path.read_text())["key"] == rebuilt.key
    hits = vector_search(idx, new_vec, fingerprint=FP, limit=10, ann=cfg)
    assert hits[0].chunk_id == chunk and hits[0].score == pytest.approx(1.0, abs=1e-5)

    # a document removed: the rows shift, the in-process graph is rebuilt as well
    victim = idx.vector_matrix(FP).docnos[0]
    (tmp_path / "notes" / victim.split("/", 1)[1]).unlink()
    idx.update()
    again = handle()
    assert again.source == "built" and again.key != rebuilt.key
    assert victim not in {h.docno for h in vector_search(idx, new_vec, fingerprint=FP, limit=50, ann=cfg)}

    graph_path.write_bytes(b"not a faiss file")  # corrupt on disk: rebuilt, not an error
    clear_memory()
    assert handle().source == "built"
    idx.close()


def test_missing_faiss_names_the_install(tmp_path, monkeypatch):
    idx, centres, rng = _index(tmp_path, 200, seed=3)
    q = _clustered(1, rng, centres)[0]
    monkeypatch.setitem(sys.modules, "faiss", None)  # `import faiss` raises ImportError
    exact = vector_search(idx, q, fingerprint=FP, limit=5)  # the default needs no extra
    assert len(exact) == 5
    with pytest.raises(QmdlabError, match=r"pip install 'qmdlab\[ann\]'"):
        vector_search(idx, q, fingerprint=FP, limit=5, ann=PipelineConfig(vector_index="hnsw").ann())
    idx.close()


def test_exact_stays_the_default_and_out_of_the_trace_key():
    default = PipelineConfig()
    assert default.vector_index == "exact" and default.ann() is None
    assert not {"vector_index", "ann_ef_search"} & set(default.to_dict())
    on = PipelineConfig(vector_index="hnsw", ann_ef_search=64)
    assert on.to_dict()["vector_index"] == "hnsw" and on.ann().ef_search == 64
    assert PipelineConfig.from_dict(on.to_dict()) == on
    with pytest.raises(QmdlabError, match="vector_index"):
        PipelineConfig(vector_index="ivf")


def test_vsearch_ann_ef_without_ann_is_refused(tmp_path):
    import subprocess

    qmdlab = Path(sys.executable).with_name("qmdlab")
    r = subprocess.run(
        [str(qmdlab), "--index", str(tmp_path / "idx"), "vsearch", "q", "--ann-ef", "64"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "--ann-ef needs --ann" in r.stderr

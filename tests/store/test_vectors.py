"""Vector storage: needing-vectors, store, lazy normalised matrix, cache invalidation, mismatches."""

from __future__ import annotations

import numpy as np
import pytest

from qmdlab.errors import DimensionMismatchError


def test_store_and_load_vectors(index):
    index.update()
    need = index.chunks_needing_vectors("fp1")
    assert need.columns == ["chunk_id", "docno", "title", "text"]
    assert need.height == 4
    git = need.filter(need["docno"] == "notes/git.md").row(0, named=True)
    assert git["title"] == "Git rebase guide" and git["text"].startswith("# Rebasing")
    ids = need["chunk_id"].to_list()
    mat = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], dtype=np.float32)
    index.store_vectors(ids[:2], mat[:2], "fp1")
    assert index.chunks_needing_vectors("fp1")["chunk_id"].to_list() == ids[2:]
    assert index.chunks_needing_vectors("fp1", collections=["notes"]).height == 2
    vm = index.vector_matrix("fp1")
    assert vm.matrix.dtype == np.float32 and vm.matrix.shape == (2, 2)
    row = {int(c): vm.matrix[i] for i, c in enumerate(vm.chunk_ids)}
    np.testing.assert_allclose(row[ids[0]], [0.6, 0.8], rtol=1e-6)  # (3,4)/5
    assert index.vector_matrix("fp1") is vm  # cached
    index.store_vectors(ids[2:], mat[2:], "fp1")
    vm2 = index.vector_matrix("fp1")
    assert vm2 is not vm and vm2.matrix.shape == (4, 2)  # invalidated by the write
    assert index.chunks_needing_vectors("fp1").height == 0
    assert index.chunks_needing_vectors("fp2").height == 4
    assert index.vector_fingerprints() == {"fp1": (2, 4)}


def test_dimension_mismatch_names_the_fix(index):
    index.update()
    ids = index.chunks_needing_vectors("fp")["chunk_id"].to_list()
    index.store_vectors(ids[:1], np.ones((1, 3), dtype=np.float32), "fp")
    with pytest.raises(DimensionMismatchError, match=r"qmdlab embed -f"):
        index.store_vectors(ids[1:2], np.ones((1, 4), dtype=np.float32), "fp")
    with pytest.raises(ValueError):
        index.store_vectors(ids[:2], np.ones((1, 3), dtype=np.float32), "fp")


def test_vectors_follow_moves_and_skip_vanished(index, notes):
    index.update()
    need = index.chunks_needing_vectors("fp")
    index.store_vectors(need["chunk_id"].to_list(), np.eye(4, dtype=np.float32), "fp")
    (notes / "cooking/pasta.md").rename(notes / "moved.md")
    (notes / "cooking/soup.md").unlink()
    index.update()
    assert index.chunks_needing_vectors("fp").height == 0  # moved file keeps its vectors
    assert sorted(index.vector_matrix("fp").docnos) == ["notes/git.md", "notes/jp.md", "notes/moved.md"]


def test_empty_matrix_when_nothing_embedded(index):
    vm = index.vector_matrix("none")
    assert vm.matrix.shape == (0, 0) and vm.docnos == []


def test_vector_matrix_sees_vectors_another_process_committed(tmp_path):
    """The in-memory matrix is dropped when another connection commits (PRAGMA data_version)."""
    import numpy as np

    from qmdlab.store import Index

    root = tmp_path / "n"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha\n")
    (root / "b.md").write_text("# B\n\nbeta\n")
    with Index(tmp_path / "idx") as reader, Index(tmp_path / "idx") as writer:
        writer.add_collection("n", root)
        writer.update()
        todo = writer.chunks_needing_vectors("fp")
        writer.store_vectors(todo["chunk_id"].to_list()[:1], np.ones((1, 3), dtype=np.float32), "fp")
        assert reader.vector_matrix("fp").matrix.shape == (1, 3)
        writer.store_vectors(todo["chunk_id"].to_list()[1:], np.ones((1, 3), dtype=np.float32), "fp")
        assert reader.vector_matrix("fp").matrix.shape == (2, 3)
        assert reader.capacity()[0].value == 2

"""A vector always belongs to the chunk whose text it was computed from.

An ``embed`` reads the chunks to embed, computes for a while and then stores; meanwhile an
``update`` may drop files and ``cleanup`` delete their chunks. The vectors of chunks that are
gone must not be stored, and chunks added later must not inherit them through a reused id.
"""

from __future__ import annotations

import sqlite3

import numpy as np

from qmdlab.store import Index
from qmdlab.store.cleanup import cleanup

from .conftest import write_notes


def _notes(n: int, start: int = 0, topic: str = "submarine") -> dict[str, str]:
    return {
        f"n{i:04d}.md": f"# Note {i}\n\nA {topic} note number {i} about {topic} things.\n"
        for i in range(start, start + n)
    }


def _vectors(n: int) -> np.ndarray:
    return np.arange(1, 2 * n + 1, dtype=np.float32).reshape(n, 2)


def test_vectors_computed_for_deleted_chunks_never_attach_to_new_ones(tmp_path):
    notes = write_notes(tmp_path / "notes", _notes(40))
    idx = Index.open(str(tmp_path / "idx"))
    try:
        idx.add_collection("notes", notes)
        idx.update()
        todo = idx.chunks_needing_vectors("fp")  # an embed starts: it has read what to embed
        by_id = dict(zip(todo["chunk_id"].to_list(), todo["docno"].to_list()))
        doomed = sorted(by_id)[-20:]  # the files owning the highest chunk ids go away meanwhile
        for cid in doomed:
            (notes / by_id[cid].split("/", 1)[1]).unlink()
        idx.update()
        cleanup(idx)
        stored = idx.store_vectors(todo["chunk_id"].to_list(), _vectors(todo.height), "fp")  # the embed stores
        assert stored == todo.height - len(doomed)
        assert (
            idx.conn.execute("SELECT count(*) FROM vectors WHERE chunk_id NOT IN (SELECT id FROM chunks)").fetchone()[0]
            == 0
        )
        write_notes(notes, _notes(20, start=100, topic="postgres backup"))  # new notes arrive
        idx.update()
        fresh = idx.conn.execute(
            "SELECT k.id FROM chunks k JOIN documents d ON d.hash = k.hash WHERE d.path >= 'n0100'"
        ).fetchall()
        assert len(fresh) == 20
        assert not {r[0] for r in fresh} & set(doomed)  # no id handed out twice
        assert idx.chunks_needing_vectors("fp").height == 20  # none of them "already embedded"
        assert all(v["orphaned"] == 0 and v["mismatched"] == 0 for v in idx.vector_check().values())
    finally:
        idx.close()


def test_ids_are_not_reused_after_cleanup_even_without_vectors(tmp_path):
    notes = write_notes(tmp_path / "notes", _notes(5))
    with Index.open(str(tmp_path / "idx")) as idx:
        idx.add_collection("notes", notes)
        idx.update()
        high = idx.conn.execute("SELECT max(id) FROM chunks").fetchone()[0]
        (notes / "n0004.md").unlink()
        idx.update()
        cleanup(idx)
        write_notes(notes, _notes(1, start=9))
        idx.update()
        assert idx.conn.execute("SELECT max(id) FROM chunks").fetchone()[0] == high + 1


def test_a_vector_whose_chunk_changed_is_not_loaded_and_is_reported(index):
    index.update()
    todo = index.chunks_needing_vectors("fp")
    index.store_vectors(todo["chunk_id"].to_list(), _vectors(todo.height), "fp")
    assert index.chunks_needing_vectors("fp").height == 0
    victim = todo["chunk_id"][0]
    with index.transaction() as c:  # a chunk row that no longer is what its vector was computed from
        c.execute("UPDATE chunks SET char_end = char_end - 1 WHERE id = ?", (victim,))
    check = index.vector_check()["fp"]
    assert check == {"vectors": todo.height, "orphaned": 0, "mismatched": 1, "unverified": 0}
    assert index.status()["vectors"]["fp"]["mismatched"] == 1
    assert victim not in set(index.vector_matrix("fp").chunk_ids.tolist())
    assert index.chunks_needing_vectors("fp")["chunk_id"].to_list() == [victim]  # embed re-computes it
    index.store_vectors([victim], _vectors(1), "fp")
    assert index.vector_check()["fp"]["mismatched"] == 0


def test_an_index_from_before_vector_keys_is_read_then_upgraded(tmp_path, notes):
    with Index.open(str(tmp_path / "idx")) as idx:
        idx.add_collection("notes", notes)
        idx.update()
        ids = idx.chunks_needing_vectors("fp")["chunk_id"].to_list()
    conn = sqlite3.connect(tmp_path / "idx" / "index.sqlite")  # the vectors table as older versions made it
    conn.executescript(
        "DROP TABLE vectors; CREATE TABLE vectors (chunk_id INTEGER NOT NULL, fingerprint TEXT NOT NULL, "
        "dim INTEGER NOT NULL, blob BLOB NOT NULL, PRIMARY KEY (chunk_id, fingerprint));"
    )
    conn.executemany(
        "INSERT INTO vectors VALUES (?, 'fp', 2, ?)", [(i, np.ones(2, dtype=np.float32).tobytes()) for i in ids[:2]]
    )
    conn.commit()
    conn.close()
    with Index.open(str(tmp_path / "idx")) as idx:
        assert idx.vector_matrix("fp").matrix.shape == (2, 2)
        assert idx.vector_check()["fp"] == {"vectors": 2, "orphaned": 0, "mismatched": 0, "unverified": 2}
        assert idx.store_vectors(ids[2:], _vectors(len(ids) - 2), "fp") == len(ids) - 2
        assert idx.vector_check()["fp"] == {"vectors": len(ids), "orphaned": 0, "mismatched": 0, "unverified": 2}
        assert idx.chunks_needing_vectors("fp").height == 0

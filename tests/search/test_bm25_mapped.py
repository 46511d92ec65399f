"""bm25_search's repeated-query path (rowid → docno map instead of an SQL join) against the raw
FTS5 query with ``ORDER BY bm25, docno``: same hits on a corpus full of exact score ties, and the
map follows writes (new, changed and removed notes)."""

from __future__ import annotations

import numpy as np

from qmdlab.search import bm25_search, build_fts_query
from qmdlab.search.lexical import BM25_WEIGHTS
from qmdlab.store import Index

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "lambda"]


def write_corpus(root, rng, n=80):
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        # few distinct bodies, so many documents score exactly alike (ties at every cut)
        k = int(rng.integers(0, 6))
        body = " ".join(WORDS[(k + j) % len(WORDS)] for j in range(1 + k % 3))
        (root / f"n{i:03d}-{'é' if i % 7 == 0 else 'x'}.md").write_text(f"# Note\n\n{body}\n", encoding="utf-8")


def reference(idx, text, limit):
    q = build_fts_query(text, "or")
    w = ", ".join(repr(float(x)) for x in BM25_WEIGHTS)
    rows = idx.conn.execute(
        f"SELECT d.collection || '/' || d.path AS docno, bm25(documents_fts, {w}) AS s FROM documents_fts "
        "JOIN documents d ON d.id = documents_fts.rowid WHERE documents_fts MATCH ? AND d.active = 1 "
        "ORDER BY s, docno LIMIT ?",
        (q, limit),
    ).fetchall()
    return [(d, s) for d, s in rows]


def hits(idx, text, limit):
    return [(h.docno, h.backend_score) for h in bm25_search(idx, text, limit=limit, mode="or")]


def test_mapped_path_equals_the_full_query_and_follows_writes(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "kb"
    write_corpus(root, rng)
    idx = Index(tmp_path / "idx")
    idx.add_collection("kb", root)
    idx.update()
    # a second collection added later: higher rowids but docnos sorting first, so FTS5's order of
    # tied rows (rowid) differs from SQL's ORDER BY s, docno
    write_corpus(tmp_path / "aa", np.random.default_rng(1), n=30)
    idx.add_collection("aa", tmp_path / "aa")
    idx.update()
    queries = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 4)))) for _ in range(40)]
    for q in queries:
        for limit in (1, 3, 10, 20):
            want = reference(idx, q, limit)
            assert hits(idx, q, limit) == want  # first search at this state: the SQL join
            assert hits(idx, q, limit) == want  # then the map
    held = idx._bm25_docnos
    assert held[2] is not None and len(held[2]) == 110  # the map was built and used
    # writes: a new note, a removed one, a changed one → the map is rebuilt, results follow
    (root / "new.md").write_text("# New\n\nalpha alpha alpha omega\n", encoding="utf-8")
    (root / "n001-x.md").unlink()
    (root / "n002-x.md").write_text("# Changed\n\nsigma kappa\n", encoding="utf-8")
    idx.update()
    for q in queries[:10] + ["alpha omega", "sigma"]:
        want = reference(idx, q, 10)
        assert hits(idx, q, 10) == want
        assert hits(idx, q, 10) == want
    assert "kb/new.md" in {d for d, _ in hits(idx, "alpha omega", 10)}
    assert "kb/n001-x.md" not in {d for d, _ in hits(idx, "alpha beta gamma delta omega sigma", 120)}
    idx.close()

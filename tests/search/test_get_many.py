"""One query for a result list's documents and chunks: same answers as one lookup per document,
through the ``(collection, path)`` index rather than a scan of every document."""

from __future__ import annotations

import qmdlab.store.documents as documents

ALL = ["kb/git-rebase.md", "kb/git-merge.md", "kb/pasta.md", "kb/multi-agent.md", "kb/tokyo.md", "kb/other/notes.md"]


def test_get_many_equals_get_per_document(corpus_index):
    want = ["kb/pasta.md", "kb/other/notes.md", "kb/pasta.md", "kb/missing.md", "nocoll/x.md"]
    got = corpus_index.get_many(want)
    assert sorted(got) == ["kb/other/notes.md", "kb/pasta.md"]  # the missing ones are absent, dupes once
    for d, doc in got.items():
        assert doc == corpus_index.get(d)
    assert corpus_index.get_many([]) == {}


def test_get_many_in_batches_equals_one_query(corpus_index, monkeypatch):
    one = corpus_index.get_many(ALL)
    monkeypatch.setattr(documents, "_ROW_VALUES_MAX", 2)  # three SQL batches of two docnos
    assert corpus_index.get_many(ALL) == one and len(one) == 6


def test_chunks_of_docnos_equal_the_filtered_whole(corpus_index, monkeypatch):
    whole = corpus_index.chunks()
    pick = ["kb/tokyo.md", "kb/git-merge.md", "kb/other/notes.md"]
    expected = whole.filter(whole["docno"].is_in(pick))
    assert corpus_index.chunks(pick).equals(expected) and expected.height >= 3
    monkeypatch.setattr(documents, "_ROW_VALUES_MAX", 2)  # more docnos than the row-value list takes: scan + filter
    assert corpus_index.chunks(pick).equals(expected)
    assert corpus_index.chunks([]).height == 0


def test_docno_lookup_uses_the_collection_path_index(corpus_index):
    where, params = documents._docno_rows(["kb/pasta.md", "kb/other/notes.md"])
    plan = corpus_index.conn.execute(
        f"EXPLAIN QUERY PLAN SELECT d.id FROM documents d WHERE d.active = 1 AND {where}", params
    ).fetchall()
    details = " ".join(r[-1] for r in plan)
    # documents are looked up (by rowid, the rowids through the unique (collection, path) index), never scanned
    assert "SEARCH d USING INTEGER PRIMARY KEY" in details and "SEARCH x USING COVERING INDEX" in details, details
    assert "SCAN d" not in details and "SCAN x" not in details, details

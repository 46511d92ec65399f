"""Exact cosine search over stored vectors: closed-form scores, best chunk per doc, filters, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qmdlab.errors import DimensionMismatchError, StoreError
from qmdlab.search import SearchFilters, vector_search
from qmdlab.search.vector import best_per_document, top_documents, top_k


def embed_all(idx, fp="fp", rows=None):
    need = idx.chunks_needing_vectors(fp)
    vecs = {
        "kb/git-rebase.md": [1, 0, 0],
        "kb/git-merge.md": [1, 1, 0],
        "kb/pasta.md": [0, 1, 0],
        "kb/multi-agent.md": [0, 0, 1],
        "kb/tokyo.md": [0, -1, 0],
        "kb/other/notes.md": [-1, 0, 0],
    }
    mat = np.array([vecs[d] for d in need["docno"]], dtype=np.float32)
    idx.store_vectors(need["chunk_id"].to_list(), mat, fp)
    return need


def test_cosine_scores_closed_form(corpus_index):
    need = embed_all(corpus_index)
    hits = vector_search(corpus_index, np.array([2.0, 0.0, 0.0]), fingerprint="fp", limit=3)
    assert [h.docno for h in hits] == ["kb/git-rebase.md", "kb/git-merge.md", "kb/multi-agent.md"]
    assert hits[0].score == pytest.approx(1.0)
    assert hits[1].score == pytest.approx(1 / np.sqrt(2))  # cos 45°
    assert hits[2].score == pytest.approx(0.0)  # ties with pasta/tokyo at 0: docno order
    assert hits[1].backend_score == hits[1].score
    assert hits[0].chunk_id == need.filter(need["docno"] == "kb/git-rebase.md")["chunk_id"][0]
    assert [h.rank for h in hits] == [1, 2, 3]


def test_filters_and_collections(corpus_index):
    embed_all(corpus_index)
    hits = vector_search(
        corpus_index, np.array([0.0, 1.0, 0.0]), fingerprint="fp", limit=10, filters=SearchFilters(tags=("git",))
    )
    assert [h.docno for h in hits] == ["kb/git-merge.md", "kb/git-rebase.md"]
    assert len(vector_search(corpus_index, np.ones(3), fingerprint="fp", collections=["kb"])) == 6


def test_best_chunk_per_document():
    scores = np.array([0.2, 0.7, 0.5, 0.9, 0.9, 0.1])
    best = best_per_document(scores, np.array([0, 3, 5]))
    assert best.rows.tolist() == [1, 3, 5] and best.scores.tolist() == [0.7, 0.9, 0.1]


def test_top_k_ties_and_bounds():
    s = np.array([0.5, 0.9, 0.5, 0.1, 0.5])
    assert top_k(s, 2).tolist() == [1, 0]
    assert top_k(s, 4).tolist() == [1, 0, 2, 4]
    assert top_k(s, 10).tolist() == [1, 0, 2, 4, 3]
    assert top_k(s, 0).tolist() == []


def test_errors_name_the_fix(corpus_index):
    with pytest.raises(StoreError, match="run `qmdlab embed`"):
        vector_search(corpus_index, np.ones(3), fingerprint="fp")
    embed_all(corpus_index)
    with pytest.raises(DimensionMismatchError, match="qmdlab embed -f"):
        vector_search(corpus_index, np.ones(5), fingerprint="fp")
    with pytest.raises(StoreError, match=r"holds vectors of fp\); run `qmdlab embed`"):
        vector_search(corpus_index, np.ones(3), fingerprint="other")


def test_multi_chunk_document_uses_its_best_chunk(tmp_path):
    from qmdlab.store import Index

    root = tmp_path / "c"
    root.mkdir()
    (root / "long.md").write_text("# A\n\n" + "alpha " * 700 + "\n\n# B\n\n" + "beta " * 700 + "\n")
    (root / "short.md").write_text("# S\n\nshort\n")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("c", root)
    idx.update()
    need = idx.chunks_needing_vectors("fp")
    long_ids = need.filter(need["docno"] == "c/long.md")["chunk_id"].to_list()
    assert len(long_ids) == 3  # 7,713 chars of 3,600-char chunks
    mat = {long_ids[0]: [1, 0], long_ids[1]: [0.6, 0.8], long_ids[2]: [0.8, 0.6]}
    ids = need["chunk_id"].to_list()
    idx.store_vectors(ids, np.array([mat.get(i, [0.0, -1.0]) for i in ids], dtype=np.float32), "fp")
    hits = vector_search(idx, np.array([0.0, 1.0]), fingerprint="fp")
    assert hits[0].docno == "c/long.md" and hits[0].chunk_id == long_ids[1]
    assert hits[0].score == pytest.approx(0.8)
    assert [h.docno for h in hits] == ["c/long.md", "c/short.md"]
    assert hits[1].score == pytest.approx(-1.0)


@pytest.mark.parametrize("query", [np.zeros(3), np.array([np.nan, 1.0, 0.0]), np.array([np.inf, 0.0, 0.0])])
def test_directionless_query_vector_returns_no_hits(corpus_index, query):
    # All-zero (or non-finite) query vectors have no direction: before the fix every document
    # came back at cosine 0 in docno order, an arbitrary ranking.
    embed_all(corpus_index)
    assert vector_search(corpus_index, query, fingerprint="fp", limit=10) == []
    # a real direction still ranks (the guard is not a blanket "return []")
    assert len(vector_search(corpus_index, np.array([0.0, 0.0, 1e-3]), fingerprint="fp", limit=10)) == 6


def test_out_of_vocabulary_query_records_an_empty_vector_list(tmp_path):
    from qmdlab.models.fakes import KeywordEmbedder
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.pipeline.lab import Lab
    from qmdlab.store import Index

    src = tmp_path / "notes"
    src.mkdir()
    (src / "git.md").write_text("# Git\n\ngit rebase onto main\n", encoding="utf-8")
    (src / "pasta.md").write_text("# Pasta\n\nboil the pasta\n", encoding="utf-8")
    with Index(tmp_path / "idx") as idx:
        idx.add_collection("n", src)
        idx.update()
        emb = KeywordEmbedder(["git", "rebase", "pasta"])
        todo = idx.chunks_needing_vectors(emb.fingerprint)
        idx.store_vectors(
            todo["chunk_id"].to_list(), emb.embed_documents(list(zip(todo["title"], todo["text"]))), emb.fingerprint
        )
        assert not emb.embed_query("boil").any()  # "boil" is outside the vocabulary: zero vector
        trace = Lab(idx, (emb, None, None), PipelineConfig(rerank=False)).query("boil")
        assert trace.lists.filter(trace.lists["source"] == "vec").height == 0
        assert trace.lists.filter(trace.lists["source"] == "fts")["docno"].to_list() == ["n/pasta.md"]
        assert trace.final["docno"].to_list() == ["n/pasta.md"]
        # an in-vocabulary query does produce a vector list (the check above is not vacuous)
        t2 = Lab(idx, (emb, None, None), PipelineConfig(rerank=False)).query("rebase")
        assert t2.lists.filter(t2.lists["source"] == "vec")["docno"].to_list()[0] == "n/git.md"


def _top_documents_reference(scores: np.ndarray, starts: np.ndarray, limit: int) -> list[tuple[int, float]]:
    """Plain Python: each document's best finite row (first on ties), documents by score desc, then order."""
    ends = list(starts[1:]) + [len(scores)]
    docs = []
    for g, (lo, hi) in enumerate(zip(starts, ends)):
        finite = [(float(scores[r]), r) for r in range(lo, hi) if np.isfinite(scores[r])]
        if finite:
            best = max(s for s, _ in finite)
            docs.append((-best, g, min(r for s, r in finite if s == best)))
    docs.sort()
    return [(r, -nb) for nb, _, r in docs[:limit]]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=60),
    st.integers(0, 10**6),
    st.integers(0, 25),
    st.sampled_from(["ties", "continuous", "nan", "masked"]),
)
def test_top_documents_equals_the_per_document_reference(sizes, seed, limit, kind):
    # the short path (best rows first) and the full path must both give the reference's answer,
    # including ties at the partition's edge, NaN chunks and filtered (-inf) rows
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    starts = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
    if kind == "continuous":
        scores = rng.standard_normal(n).astype(np.float32)
    else:
        scores = rng.integers(0, 4, n).astype(np.float32) / 4  # few distinct values: ties everywhere
    if kind == "nan":
        scores[rng.random(n) < 0.2] = np.nan
    if kind == "masked":
        scores[rng.random(n) < 0.5] = -np.inf
    got = top_documents(scores, starts, limit)
    want = _top_documents_reference(scores, starts, limit)
    assert list(zip(got.rows.tolist(), got.scores.tolist())) == want


def test_top_documents_takes_the_short_path_on_distinct_scores(monkeypatch):
    # the fast path must actually answer (not always fall back): on distinct scores it decides alone
    import qmdlab.search.vector as vector

    answers = []
    short = vector._top_documents_from_rows
    monkeypatch.setattr(vector, "_top_documents_from_rows", lambda *a: answers.append(short(*a)) or answers[-1])
    scores = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    starts = np.arange(0, 5000, 3, dtype=np.int64)
    got = top_documents(scores, starts, 10)
    assert len(answers) == 1 and answers[0] is not None
    assert list(zip(got.rows.tolist(), got.scores.tolist())) == _top_documents_reference(scores, starts, 10)

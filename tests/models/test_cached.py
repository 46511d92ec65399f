"""Cached wrappers: a repeated call makes no model call; keys follow the fingerprint."""

import sqlite3

import pytest

from qmdlab.models import CachedExpander, CachedReranker, RuleExpander, TableReranker, load_models, with_cache
from qmdlab.models.cached import text_hash
from qmdlab.store.cache import LLMCache, cache_key


@pytest.fixture
def cache():
    return LLMCache(sqlite3.connect(":memory:", check_same_thread=False))


class Counting:
    def __init__(self, inner):
        self.inner, self.model_id, self.fingerprint, self.n = inner, inner.model_id, inner.fingerprint, 0

    def expand(self, q, *, intent=None):
        self.n += 1
        return self.inner.expand(q, intent=intent)

    def score(self, q, texts):
        self.n += 1
        return self.inner.score(q, texts)


def test_expander_second_call_is_free(cache):
    inner = Counting(RuleExpander({"q": "lex: a\nbad line\n"}))
    x = CachedExpander(inner, cache)
    first = x.expand("q")
    second = x.expand("q")
    assert (
        first == second
        and second.lines == [("lex", "a")]
        and second.dropped == [("bad line", "not a 'type: content' line")]
    )
    assert (x.calls, inner.n, x.last_cached) == (1, 1, True)
    x.expand("q", intent="other")  # intent is part of the key
    assert x.calls == 2
    assert cache.get(cache_key(inner.fingerprint, "expand", {"query": "q", "intent": None})) is not None


def test_reranker_only_misses_reach_the_model(cache):
    inner = Counting(TableReranker({("q", "a"): 0.9, ("q", "b"): 0.2}, default=0.5))
    r = CachedReranker(inner, cache)
    assert r.score_cached("q", ["a", "b"]) == [(0.9, False), (0.2, False)]
    assert r.score_cached("q", ["b", "c", "a", "c"]) == [(0.2, True), (0.5, False), (0.9, True), (0.5, False)]
    assert (r.calls, r.items, inner.n) == (2, 3, 2)
    assert r.score("q", ["a", "b", "c"]) == [0.9, 0.2, 0.5]
    assert (r.calls, inner.n) == (2, 2)
    assert cache.get(cache_key(inner.fingerprint, "rerank", ["q", text_hash("a")])) == 0.9


def test_different_fingerprint_misses(cache):
    CachedReranker(TableReranker({}, default=0.1), cache).score("q", ["a"])
    other = CachedReranker(TableReranker({}, default=0.7), cache)
    assert other.score_cached("q", ["a"]) == [(0.7, False)]


def test_with_cache_wraps_expander_and_reranker(cache):
    m = with_cache(load_models("fake"), cache)
    assert isinstance(m.expander, CachedExpander) and isinstance(m.reranker, CachedReranker)
    assert m.reranker.fingerprint == load_models("fake").reranker.fingerprint
    assert with_cache(load_models("fake", rerank="none"), cache).reranker is None


class CountingEmbedder:
    """A KeywordEmbedder that counts the calls reaching it."""

    def __init__(self, inner):
        self.inner, self.queries, self.documents = inner, 0, 0

    model_id = property(lambda self: self.inner.model_id)
    fingerprint = property(lambda self: self.inner.fingerprint)
    dim = property(lambda self: self.inner.dim)

    def embed_query(self, text):
        self.queries += 1
        return self.inner.embed_query(text)

    def embed_documents(self, docs):
        self.documents += 1
        return self.inner.embed_documents(docs)

    def release(self):
        return "released"


def test_memo_embedder_repeated_query_is_not_re_embedded():
    import numpy as np

    from qmdlab.models import KeywordEmbedder
    from qmdlab.models.base import Embedder
    from qmdlab.models.cached import MemoEmbedder

    base = KeywordEmbedder(["git", "rebase", "pasta"])
    inner = CountingEmbedder(base)
    memo = MemoEmbedder(inner, maxsize=2)
    assert isinstance(memo, Embedder)
    assert (memo.model_id, memo.fingerprint, memo.dim) == (base.model_id, base.fingerprint, base.dim)
    assert memo.release() == "released"

    first = memo.embed_query("git rebase")
    assert inner.queries == 1 and (memo.query_calls, memo.query_hits) == (1, 0)
    first[:] = 9.0  # the caller's copy: mutating it does not touch the memo
    again = memo.embed_query("git rebase")
    assert inner.queries == 1 and (memo.query_calls, memo.query_hits) == (1, 1)
    assert again.tolist() == base.embed_query("git rebase").tolist()

    memo.embed_query("pasta")
    assert inner.queries == 2
    memo.embed_query("git rebase")  # still memoised; now the most recently used
    memo.embed_query("git")  # evicts "pasta" (least recently used, maxsize=2)
    assert inner.queries == 3
    memo.embed_query("git rebase")
    assert inner.queries == 3
    memo.embed_query("pasta")
    assert inner.queries == 4

    docs = [("", "pasta"), ("t", "git")]
    assert np.array_equal(memo.embed_documents(docs), base.embed_documents(docs))
    memo.embed_documents(docs)
    assert inner.documents == 2  # documents pass through, never memoised

    memo.clear()
    memo.embed_query("git rebase")
    assert inner.queries == 5


def test_lab_memoises_query_embeddings():
    from qmdlab.models import KeywordEmbedder, ModelSet
    from qmdlab.models.cached import MemoEmbedder
    from qmdlab.pipeline.lab import Lab

    inner = CountingEmbedder(KeywordEmbedder(["git", "rebase", "pasta"]))
    lab = Lab(None, ModelSet(inner, None, None))
    assert isinstance(lab.embedder, MemoEmbedder) and lab.embedder.inner is inner
    assert Lab(None, ModelSet(lab.embedder, None, None)).embedder is lab.embedder  # not wrapped twice
    assert Lab(None, ModelSet(None, None, None)).embedder is None

"""The BM25 query builder is bounded: repeated terms are capped, long or many-termed queries refused."""

from __future__ import annotations

import time

import pytest

from qmdlab.errors import QmdlabError
from qmdlab.search.lexical import (
    MAX_QUERY_CHARS,
    MAX_QUERY_TERMS,
    MAX_TERM_REPEAT,
    bm25_search,
    build_fts_query,
    parse_fts_query,
)


@pytest.mark.parametrize("mode", ["or", "msm", "and"])
def test_a_term_repeated_thousands_of_times_builds_a_short_expression(mode):
    text = "postgres " * 1_100  # 9,900 characters: under the length cap
    expr = build_fts_query(text, mode=mode)
    want = MAX_TERM_REPEAT if mode != "and" else 1
    assert expr.count('"postgres"') == want
    assert parse_fts_query(text, mode).positive == ('"postgres"*',)


def test_query_tf_below_the_cap_is_unchanged():
    assert build_fts_query("rebase git rebase", mode="or") == '"rebase"* OR "git"* OR "rebase"*'
    expr = build_fts_query("x " * MAX_TERM_REPEAT + "x", mode="or", stopwords=False)
    assert expr.count('"x"*') == MAX_TERM_REPEAT


def test_an_overlong_query_is_refused_with_the_limit():
    with pytest.raises(
        QmdlabError,
        match=rf"search query of {MAX_QUERY_CHARS + 1} characters is over the "
        rf"limit of {MAX_QUERY_CHARS}; shorten it",
    ):
        build_fts_query("a" * (MAX_QUERY_CHARS + 1))


def test_too_many_distinct_terms_are_refused():
    ok = " ".join(f"w{i}" for i in range(MAX_QUERY_TERMS))
    assert len(parse_fts_query(ok, "or").positive) == MAX_QUERY_TERMS
    with pytest.raises(QmdlabError, match=rf"more than {MAX_QUERY_TERMS} distinct terms"):
        parse_fts_query(ok + " extra", "or")


def test_a_repeated_term_query_runs_fast_on_a_real_index(corpus_index):
    start = time.perf_counter()
    hits = bm25_search(corpus_index, "pasta " * 1_600, limit=5)
    assert time.perf_counter() - start < 2.0
    assert [h.docno for h in hits] == ["kb/pasta.md"]

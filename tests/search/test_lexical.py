"""FTS5 query building (exact strings, safety) and BM25 search on a real index."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qmdlab.errors import QmdlabError
from qmdlab.search import SearchFilters, bm25_search, build_fts_query
from qmdlab.search.hit import normalize_bm25


@pytest.mark.parametrize(
    "text,expected",
    [
        ("git rebase", '"git"* AND "rebase"*'),
        ("Git  REBASE ", '"git"* AND "rebase"*'),
        ('"exact phrase" word', '"exact phrase" AND "word"*'),
        ("rebase -merge", '"rebase"* NOT "merge"*'),
        ('rebase -"merge commit"', '"rebase"* NOT "merge commit"'),
        ("multi-agent systems", '"multi agent" AND "systems"*'),
        ("node.js", '"node js"'),
        ("東京大学", '"東 京 大 学"'),
        ("東京 tower", '"東 京" AND "tower"*'),
        ("don't", '"don\'t"*'),
        ("-only -negatives", None),
        ("", None),
        ("*** ::: ^^^", None),
        ("a AND b", '"a"* AND "and"* AND "b"*'),
        ("NEAR(a b)", '"near a" AND "b"*'),
        ("title:git", '"title git"'),
    ],
)
def test_and_mode_strings(text, expected):
    assert build_fts_query(text, "and") == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("how do I rebase in git", '"rebase"* OR "git"*'),
        ("rebase rebase git", '"rebase"* OR "rebase"* OR "git"*'),  # query_tf
        ("the who", '"the"* OR "who"*'),
        ('"the who" rebase', '"the who" OR "rebase"*'),
        ("multi-agent", '"multi"* OR "agent"*'),
        ("rebase -merge", '"rebase"* NOT "merge"*'),
        ("rebase git -merge -squash", '("rebase"* OR "git"*) NOT "merge"* NOT "squash"*'),
        ("東京大学", '"東 京" OR "京 大" OR "大 学"'),
        ("猫", '"猫"'),
        ("-x", None),
        ("?!", None),
    ],
)
def test_or_mode_strings(text, expected):
    assert build_fts_query(text, "or") == expected


def test_unknown_mode_is_a_user_error():
    with pytest.raises(QmdlabError, match="--mode 'xor'"):
        build_fts_query("a", "xor")


@pytest.fixture(scope="module")
def fts():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(filepath, title, body, tokenize='porter unicode61')")
    conn.execute("INSERT INTO t VALUES ('a/b.md', 'near and or', 'NOT AND OR NEAR quotes \"x\" 東 京')")
    return conn


HOSTILE = [
    '"',
    '""',
    '"unterminated',
    "*",
    "a*",
    "^a",
    "col:umn",
    "title:x",
    "NEAR(",
    "NEAR(a b, 2)",
    "a AND",
    "AND",
    "OR OR",
    "NOT",
    "(",
    ")",
    "a) OR (b",
    "{a b}",
    "+",
    "-",
    "--",
    '-"',
    "'",
    "a'b'",
    "\\",
    "\x00",
    "x:y:z",
    "a NOT b",
    "東京*",
    "😀",
    "_",
    "a_b",
    "{title}: x",
    "ñandú-café",
]


@pytest.mark.parametrize("mode", ["and", "or"])
@pytest.mark.parametrize("text", HOSTILE)
def test_fts5_syntax_in_queries_never_raises(fts, text, mode):
    q = build_fts_query(text, mode)
    if q is not None:
        fts.execute("SELECT count(*) FROM t WHERE t MATCH ?", (q,)).fetchone()


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab東 \"*^:()-_'.,NEARORANDNOT+{}\\é")) | st.characters(), max_size=30),
    st.sampled_from(["and", "or"]),
)
def test_any_text_is_safe(fts, text, mode):
    q = build_fts_query(text, mode)
    if q is not None:
        fts.execute("SELECT count(*) FROM t WHERE t MATCH ?", (q,)).fetchone()


def test_normalisation_closed_form():
    assert normalize_bm25(-3.0) == 0.75
    assert normalize_bm25(-0.25) == 0.2
    assert normalize_bm25(4.0) == 0.8


def test_bm25_ranking_weights_and_scores(corpus_index):
    hits = bm25_search(corpus_index, "rebase", limit=10)
    assert [h.docno for h in hits] == ["kb/git-rebase.md", "kb/git-merge.md"]  # title weight 4.0 wins
    assert [h.rank for h in hits] == [1, 2]
    assert all(h.chunk_id is None for h in hits)
    assert hits[0].backend_score < hits[1].backend_score < 0
    assert hits[0].score == pytest.approx(-hits[0].backend_score / (1 - hits[0].backend_score))
    raw = dict(
        corpus_index.conn.execute(
            "SELECT d.collection || '/' || d.path, bm25(documents_fts, 1.5, 4.0, 1.0) FROM documents_fts "
            "JOIN documents d ON d.id = documents_fts.rowid WHERE documents_fts MATCH '\"rebase\"'"
        ).fetchall()
    )
    assert {h.docno: h.backend_score for h in hits} == raw


def test_and_versus_or(corpus_index):
    assert [h.docno for h in bm25_search(corpus_index, "rebase history merge", mode="and")] == ["kb/git-merge.md"]
    assert len(bm25_search(corpus_index, "rebase history merge", mode="or")) == 2
    assert bm25_search(corpus_index, "rebase -merge", mode="and")[0].docno == "kb/git-rebase.md"
    assert [h.docno for h in bm25_search(corpus_index, "multi-agent", mode="and")] == ["kb/multi-agent.md"]
    assert bm25_search(corpus_index, "reb", mode="and")[0].docno == "kb/git-rebase.md"  # prefix


def test_cjk_queries_match_inside_runs(corpus_index):
    for mode in ("and", "or"):
        assert [h.docno for h in bm25_search(corpus_index, "東京", mode=mode)] == ["kb/tokyo.md"]
        assert [h.docno for h in bm25_search(corpus_index, "大学", mode=mode)] == ["kb/tokyo.md"]
    assert bm25_search(corpus_index, "京都", mode="and") == []


def test_filters_and_collections(corpus_index):
    q = "rebase OR pasta OR merge"
    assert {h.docno for h in bm25_search(corpus_index, q, filters=SearchFilters(tags=("git",)))} == {
        "kb/git-rebase.md",
        "kb/git-merge.md",
    }
    assert {h.docno for h in bm25_search(corpus_index, q, filters=SearchFilters(tags=("GIT", "howto")))} == {
        "kb/git-rebase.md"
    }
    assert {h.docno for h in bm25_search(corpus_index, q, filters=SearchFilters(since="2024-01-01"))} == {
        "kb/git-rebase.md",
        "kb/pasta.md",
    }
    assert {h.docno for h in bm25_search(corpus_index, q, filters=SearchFilters(before="2024-03-05"))} == {
        "kb/git-merge.md"
    }  # before is exclusive
    assert {
        h.docno for h in bm25_search(corpus_index, q, filters=SearchFilters(since="2024-03-05", before="2024-03-06"))
    } == {"kb/git-rebase.md"}
    assert len(bm25_search(corpus_index, q, collections=["kb"])) == 3
    with pytest.raises(QmdlabError, match="unknown collection 'zz'"):
        bm25_search(corpus_index, q, collections=["zz"])
    with pytest.raises(QmdlabError, match="--since '2024/01/01'"):
        bm25_search(corpus_index, q, filters=SearchFilters(since="2024/01/01"))


def test_limit_and_empty(corpus_index):
    assert len(bm25_search(corpus_index, "rebase", limit=1)) == 1
    assert bm25_search(corpus_index, "zzzzqqq") == []
    assert bm25_search(corpus_index, '"*"') == []

"""The lexical knobs: closed-form checks of each knob, and a differential test of
:func:`bm25_search` against raw FTS5 SQL written by hand on a small real index."""

from __future__ import annotations

import itertools

import pytest

from qmdlab.errors import ConfigError, QmdlabError
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.search import bm25_search, build_fts_query
from qmdlab.search.lexical import check_weights, parse_fts_query, required_matches

# -- closed form: the built expressions ----------------------------------------------------------


def test_prefix_knob():
    assert build_fts_query("git rebase", "or", prefix=True) == '"git"* OR "rebase"*'
    assert build_fts_query("git rebase", "or", prefix=False) == '"git" OR "rebase"'
    assert build_fts_query("git rebase", "or") == '"git"* OR "rebase"*'  # the default
    assert build_fts_query("git rebase", "and", prefix=False) == '"git"* AND "rebase"*'  # and mode: qmd's builder
    assert build_fts_query('"git rebase" x', "or", prefix=True) == '"git rebase" OR "x"*'  # phrases never


def test_stopword_knob():
    assert build_fts_query("how to rebase", "or", stopwords=True, prefix=False) == '"rebase"'
    assert build_fts_query("how to rebase", "or", stopwords=False, prefix=False) == '"how" OR "to" OR "rebase"'
    assert build_fts_query("how to rebase", "or") == '"rebase"*'  # the default
    assert build_fts_query("the who", "or", stopwords=True, prefix=False) == '"the" OR "who"'  # nothing else left


def test_query_tf_knob():
    assert build_fts_query("rebase git rebase", "or", prefix=False, query_tf=False) == '"rebase" OR "git"'
    assert build_fts_query("rebase git rebase", "or", prefix=False) == '"rebase" OR "git" OR "rebase"'  # default
    assert (
        build_fts_query("rebase git rebase -x -x", "or", prefix=False, query_tf=True)
        == '("rebase" OR "git" OR "rebase") NOT "x"'
    )  # negations once
    assert build_fts_query("rebase rebase", "and", query_tf=True) == '"rebase"*'  # and mode: qmd's builder
    # msm counts distinct terms even when the expression repeats them
    assert parse_fts_query("a1 b1 a1", "msm", prefix=False, query_tf=True).positive == ('"a1"', '"b1"')


@pytest.mark.parametrize(
    "n,m,want",
    [
        (5, 0.5, 2),
        (4, 0.75, 3),
        (3, 0.34, 1),
        (5, 0.2, 1),
        (10, 0.99, 9),
        (5, 0.0, 1),
        (5, 2, 2),
        (5, 2.9, 2),
        (3, 9, 3),
        (0, 0.5, 0),
    ],
)
def test_required_matches_closed_form(n, m, want):
    """Share m < 1: floor(m·n), at least 1; count m >= 1: int(m), at most n."""
    assert required_matches(n, m) == want


def test_required_matches_rejects_negative():
    with pytest.raises(QmdlabError, match="--min-match -1: must be a finite number >= 0"):
        required_matches(3, -1)


def test_weights_validation():
    assert check_weights((0, 4, 1)) == (0.0, 4.0, 1.0)
    for bad in [(0, 0, 0), (1, -1, 1), (1, 2), (float("nan"), 1, 1), (float("inf"), 1, 1)]:
        with pytest.raises(QmdlabError, match="column weights"):
            check_weights(bad)


def test_config_fields_validate_save_and_load(tmp_path):
    with pytest.raises(ConfigError, match="bm25_weight_title"):
        PipelineConfig(bm25_weight_title=-1.0)
    with pytest.raises(ConfigError, match="all 0"):
        PipelineConfig(bm25_weight_filepath=0.0, bm25_weight_title=0.0, bm25_weight_body=0.0)
    with pytest.raises(ConfigError, match="bm25_min_match"):
        PipelineConfig(bm25_min_match=-0.5)
    with pytest.raises(ConfigError, match="unknown bm25_mode 'xor'; choose one of: and, or, msm"):
        PipelineConfig(bm25_mode="xor")
    with pytest.raises(ConfigError, match="option 'bm25_prefix' must be bool"):
        PipelineConfig.from_dict({"bm25_prefix": "yes"})
    cfg = PipelineConfig(
        bm25_weight_title=2.5,
        bm25_prefix=True,
        bm25_mode="msm",
        bm25_min_match=2,
        bm25_stopwords=True,
        bm25_query_tf=True,
    )
    from qmdlab.eval.optimise import write_config

    write_config(cfg, tmp_path / "c.yaml")
    assert PipelineConfig.from_yaml(tmp_path / "c.yaml") == cfg
    assert cfg.lexical() == {
        "mode": "msm",
        "weights": (cfg.bm25_weight_filepath, 2.5, cfg.bm25_weight_body),
        "prefix": True,
        "stopwords": True,
        "query_tf": True,
        "min_match": 2.0,
    }


# -- differential: bm25_search vs hand-written FTS5 SQL ------------------------------------------


def _raw(idx, match: str, weights, limit: int = 50):
    w = ", ".join(repr(float(x)) for x in weights)
    return idx.conn.execute(
        f"SELECT d.collection || '/' || d.path, bm25(documents_fts, {w}) AS s FROM documents_fts "
        "JOIN documents d ON d.id = documents_fts.rowid WHERE documents_fts MATCH ? ORDER BY s, 1 LIMIT ?",
        (match, limit),
    ).fetchall()


def _matches(idx, term: str) -> set[str]:
    return {
        r[0]
        for r in idx.conn.execute(
            "SELECT d.collection || '/' || d.path FROM documents_fts JOIN documents d ON d.id = documents_fts.rowid "
            "WHERE documents_fts MATCH ?",
            (term,),
        ).fetchall()
    }


QUERY = "how to rebase the rebase history of many agents"
# hand-written expressions for QUERY per (prefix, stopwords, query_tf)
EXPECTED = {
    (False, False, False): '"how" OR "to" OR "rebase" OR "the" OR "history" OR "of" OR "many" OR "agents"',
    (False, False, True): '"how" OR "to" OR "rebase" OR "the" OR "rebase" OR "history" OR "of" OR "many" OR "agents"',
    (False, True, False): '"rebase" OR "history" OR "many" OR "agents"',
    (False, True, True): '"rebase" OR "rebase" OR "history" OR "many" OR "agents"',
    (True, False, False): '"how"* OR "to"* OR "rebase"* OR "the"* OR "history"* OR "of"* OR "many"* OR "agents"*',
    (True, True, False): '"rebase"* OR "history"* OR "many"* OR "agents"*',
    (True, True, True): '"rebase"* OR "rebase"* OR "history"* OR "many"* OR "agents"*',
    (True, False, True): '"how"* OR "to"* OR "rebase"* OR "the"* OR "rebase"* OR "history"* OR "of"* OR "many"* '
    'OR "agents"*',
}


@pytest.mark.parametrize("prefix,stop,qtf", list(itertools.product([False, True], repeat=3)))
@pytest.mark.parametrize("weights", [(0.0, 4.0, 1.0), (1.5, 4.0, 1.0), (0.0, 1.0, 3.0), (2.0, 0.0, 1.0)])
def test_knobs_equal_raw_fts5(corpus_index, prefix, stop, qtf, weights):
    cfg = PipelineConfig(
        bm25_prefix=prefix,
        bm25_stopwords=stop,
        bm25_query_tf=qtf,
        bm25_weight_filepath=weights[0],
        bm25_weight_title=weights[1],
        bm25_weight_body=weights[2],
    )
    hits = bm25_search(corpus_index, QUERY, limit=50, **cfg.lexical())
    raw = _raw(corpus_index, EXPECTED[(prefix, stop, qtf)], weights)
    assert [(h.docno, h.backend_score) for h in hits] == [(d, s) for d, s in raw]
    assert hits  # the corpus has rebase/history/agents documents


def test_query_tf_changes_scores_as_fts5_does(corpus_index):
    """A repeated term adds its bm25 term again: scores differ exactly as the raw query's do."""
    once = bm25_search(corpus_index, "rebase rebase history", query_tf=False, prefix=False, weights=(0, 4, 1))
    twice = bm25_search(corpus_index, "rebase rebase history", query_tf=True, prefix=False, weights=(0, 4, 1))
    assert {h.docno: h.backend_score for h in once} == dict(_raw(corpus_index, '"rebase" OR "history"', (0, 4, 1)))
    assert {h.docno: h.backend_score for h in twice} == dict(
        _raw(corpus_index, '"rebase" OR "rebase" OR "history"', (0, 4, 1))
    )
    assert {h.docno: h.backend_score for h in once} != {h.docno: h.backend_score for h in twice}


@pytest.mark.parametrize("min_match", [0.0, 0.5, 2, 3, 0.9])
def test_msm_equals_raw_or_filtered_by_match_count(corpus_index, min_match):
    text = "rebase history merge agents"
    terms = ['"rebase"', '"history"', '"merge"', '"agents"']
    need = required_matches(4, min_match)
    count = {}
    for t in terms:
        for d in _matches(corpus_index, t):
            count[d] = count.get(d, 0) + 1
    want = [(d, s) for d, s in _raw(corpus_index, " OR ".join(terms), (0, 4, 1)) if count[d] >= need]
    got = bm25_search(corpus_index, text, mode="msm", min_match=min_match, weights=(0, 4, 1), limit=50, prefix=False)
    assert [(h.docno, h.backend_score) for h in got] == want
    if min_match == 3:
        assert [h.docno for h in got] == ["kb/git-merge.md"]  # rebase + history + merge


def test_msm_with_filters_and_negation(corpus_index):
    from qmdlab.search import SearchFilters

    got = bm25_search(
        corpus_index,
        "rebase history -pasta",
        mode="msm",
        min_match=2,
        weights=(0, 4, 1),
        filters=SearchFilters(tags=("git",)),
    )
    assert {h.docno for h in got} == {"kb/git-merge.md", "kb/git-rebase.md"}
    assert (
        bm25_search(
            corpus_index, "rebase history", mode="msm", min_match=2, weights=(0, 4, 1), collections=["kb"], limit=1
        )[0].rank
        == 1
    )


def test_filepath_weight_only_matters_for_path_terms(corpus_index):
    """A term found only in the path ("notes" of other/notes.md) scores by the filepath column alone."""
    none = bm25_search(corpus_index, "other", weights=(0.0, 4.0, 1.0), prefix=False)
    some = bm25_search(corpus_index, "other", weights=(1.5, 4.0, 1.0), prefix=False)
    assert none and all(h.backend_score == 0.0 for h in none)
    assert [h.docno for h in some] == ["kb/other/notes.md"] and some[0].backend_score < 0

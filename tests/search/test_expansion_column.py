"""BM25 with the ``expansions`` column: the engine's scores equal a raw FTS5 query with the same
four weights, and at weight 0 the column is left out of the match."""

from __future__ import annotations

import pytest

from qmdlab.errors import ConfigError, QmdlabError
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.search import bm25_search
from qmdlab.search.channels import phrase_search
from qmdlab.search.lexical import TEXT_COLUMNS, build_fts_query, check_weights
from qmdlab.store import doc_expansions as dx

# generated queries per document path; "cherry" and "tomato" occur in no document's text
EXPANSIONS = {
    "git-rebase.md": ["cherry pick commits", "rewrite git history"],
    "pasta.md": ["how much salt pasta", "tomato sauce pasta"],
    "git-merge.md": ["merge or rebase"],
}
QUERIES = ["cherry pick", "git history", "pasta salt", "tomato", "merge rebase", "rewrite"]
WEIGHTS = [(1.5, 4.0, 1.0, 0.5), (1.5, 4.0, 1.0, 1.0), (0.0, 1.0, 1.0, 3.0), (1.0, 1.0, 1.0, 1.0)]


@pytest.fixture
def expanded(corpus_index):
    idx = corpus_index
    dx.ensure_table(idx)
    rows, verdicts = [], []
    for path, queries in EXPANSIONS.items():
        (h,) = idx.conn.execute("SELECT hash FROM documents WHERE path = ?", (path,)).fetchone()
        for n, q in enumerate(queries):
            rows.append(dx.GeneratedQuery(h, 0, n, " " + q, q))
            verdicts.append(dx.FilterVerdict(h, 0, n, True, 1))
    dx.store_generated(idx, "gen#test", rows)
    dx.store_verdicts(idx, "gen#test", verdicts)
    assert dx.set_active_generator(idx, "gen#test") == len(EXPANSIONS)
    return idx


def _raw(idx, query: str, weights, columns: str = ""):
    expr = build_fts_query(query, "or")
    if columns:
        expr = f"{columns} : ({expr})"
    w = ", ".join(repr(float(x)) for x in weights)
    return idx.conn.execute(
        f"SELECT d.collection || '/' || d.path, bm25(documents_fts, {w}) AS s FROM documents_fts "
        "JOIN documents d ON d.id = documents_fts.rowid WHERE documents_fts MATCH ? ORDER BY s, 1",
        (expr,),
    ).fetchall()


@pytest.mark.parametrize("weights", WEIGHTS)
def test_bm25_equals_raw_fts5_with_four_weights(expanded, weights):
    for q in QUERIES:
        got = [(h.docno, h.backend_score) for h in bm25_search(expanded, q, limit=50, weights=weights)]
        assert got == _raw(expanded, q, weights), q


def test_expansion_only_terms_need_a_weight(expanded):
    """'cherry' and 'tomato' are only in expansions: found at weight > 0, never at weight 0."""
    for q, doc in (("cherry", "kb/git-rebase.md"), ("tomato", "kb/pasta.md")):
        assert [h.docno for h in bm25_search(expanded, q, weights=(1.5, 4.0, 1.0, 1.0))] == [doc]
        assert bm25_search(expanded, q, weights=(1.5, 4.0, 1.0)) == []
        assert bm25_search(expanded, q, weights=(1.5, 4.0, 1.0, 0.0)) == []


def test_weight_zero_is_the_column_filter(expanded):
    """At weight 0 the engine equals the raw query restricted to filepath/title/body, and it matches
    the same documents as the index with its expansions cleared; cleared, the scores are those of
    a plain three-weight query again."""
    with_exp = {}
    for q in QUERIES:
        got = [(h.docno, h.backend_score) for h in bm25_search(expanded, q, limit=50)]
        assert got == _raw(expanded, q, (1.5, 4.0, 1.0, 0.0), TEXT_COLUMNS), q
        with_exp[q] = got
    assert dx.set_active_generator(expanded, None) == len(EXPANSIONS)
    assert dx.status(expanded).documents == 0
    for q in QUERIES:
        got = [(h.docno, h.backend_score) for h in bm25_search(expanded, q, limit=50)]
        assert {d for d, _ in got} == {d for d, _ in with_exp[q]}, q
        assert got == _raw(expanded, q, (1.5, 4.0, 1.0)), q


def test_msm_and_phrase_channel_leave_the_column_out_at_weight_zero(expanded):
    assert bm25_search(expanded, "cherry pick commits", mode="msm", min_match=2) == []
    assert [
        h.docno
        for h in bm25_search(expanded, "cherry pick commits", mode="msm", min_match=2, weights=(1.5, 4.0, 1.0, 1.0))
    ] == ["kb/git-rebase.md"]
    assert phrase_search(expanded, "tomato sauce") == []
    assert [h.docno for h in phrase_search(expanded, "tomato sauce", weights=(1.5, 4.0, 1.0, 1.0))] == ["kb/pasta.md"]


def test_config_field_flows_into_the_weights():
    assert PipelineConfig().lexical()["weights"] == (1.5, 4.0, 1.0)
    assert PipelineConfig(bm25_weight_doc_queries=0.75).lexical()["weights"] == (1.5, 4.0, 1.0, 0.75)
    assert "bm25_weight_doc_queries" not in PipelineConfig().to_dict()  # trace-cache keys of older configs stay
    assert PipelineConfig().replace_flat(bm25_weight_doc_queries=2).bm25_weight_doc_queries == 2.0
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="bm25_weight_doc_queries"):
            PipelineConfig(bm25_weight_doc_queries=bad)
    with pytest.raises(ConfigError, match="all 0"):
        PipelineConfig(bm25_weight_filepath=0, bm25_weight_title=0, bm25_weight_body=0, bm25_weight_doc_queries=1)
    with pytest.raises(QmdlabError, match="column weights"):
        check_weights((0, 0, 0, 1))
    with pytest.raises(QmdlabError, match="column weights"):
        check_weights((1, 1, 1, 1, 1))


def test_pipeline_and_explain_use_the_column(expanded):
    """A query whose words only an expansion holds: the pipeline's BM25 list finds the document
    at weight > 0 and not at 0, and --explain names the weight."""
    from qmdlab.models.base import ModelSet
    from qmdlab.pipeline.explain import format_explain
    from qmdlab.pipeline.lab import Lab

    lab = Lab(expanded, ModelSet(None, None, None), PipelineConfig(expand=False, rerank=False, vector=False))
    off = lab.query("cherry tomato")
    on = lab.query("cherry tomato", bm25_weight_doc_queries=1.0)
    assert off.final.height == 0
    assert set(on.final["docno"].to_list()) == {"kb/git-rebase.md", "kb/pasta.md"}
    assert "weights filepath 1.5 / title 4 / body 1 / expansions 1," in format_explain(
        on, PipelineConfig(bm25_weight_doc_queries=1.0)
    )
    assert "weights filepath 1.5 / title 4 / body 1, prefix" in format_explain(on, PipelineConfig())

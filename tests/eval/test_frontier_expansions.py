"""The doc-queries column (doc expansion) in the frontier and the recording tiers: rows only when the suite's index
has generated queries, and their scores those of a fresh recording with the column weighted."""

from __future__ import annotations

import pytest

from qmdlab.eval import choices
from qmdlab.eval.ablation import DOC_QUERY_WEIGHT, index_has_doc_queries
from qmdlab.eval.frontier import frontier
from qmdlab.eval.record import prepare_index, record
from qmdlab.eval.study import Study
from qmdlab.models.doc_query_gen import TableDocQueryGenerator
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.doc_expand import expand_documents

from .test_frontier import loader, zoo

pytestmark = pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx

# what each note's generated query adds: words a judged query asks for that the note lacks
EXTRA = {"git merge": " git branch merge", "shell": " linux security user", "cache": " memory cache performance"}


def _generated(passage: str, i: int) -> str:
    low = passage.lower()
    return next((q for key, q in EXTRA.items() if key in low), " " + " ".join(passage.split()[1:3]))


def _expand(suite) -> None:
    idx = prepare_index(suite, loader().embedder, progress=False, log=lambda m: None)
    try:
        expand_documents(idx, TableDocQueryGenerator(_generated), per_chunk=1)
    finally:
        idx.close()


def test_no_doc_expansion_rows_without_doc_expansions(tmp_path, qmdlab_home):
    suite = zoo(tmp_path)
    res = frontier(
        suite, "fake", llm_queries=0, folds=2, trials=4, learned=False, log=lambda m: None, load_models=loader
    )
    assert not [p.name for p in res.points if "doc expansions" in p.name]
    assert not index_has_doc_queries(suite, PipelineConfig())
    assert not [t for t in choices.tiers(suite) if t.config.bm25_weight_doc_queries]


def test_expansion_rows_equal_a_fresh_recording(tmp_path, qmdlab_home):
    suite = zoo(tmp_path)
    _expand(suite)
    assert index_has_doc_queries(suite, PipelineConfig())
    res = frontier(
        suite, "fake", llm_queries=0, folds=2, trials=4, learned=False, log=lambda m: None, load_models=loader
    )
    names = [p.name for p in res.points]
    assert {"bm25 + doc expansions", "hybrid qmd_rrf + doc expansions"} <= set(names)
    hybrid = res.point("hybrid qmd_rrf + doc expansions")
    assert hybrid.config.bm25_weight_doc_queries == DOC_QUERY_WEIGHT and hybrid.seconds is not None
    assert res.point("bm25 + doc expansions").config.vector is False
    # the row is what the pipeline retrieves with the column weighted (re-run BM25 = a fresh recording)
    cfg = PipelineConfig(expand=False, rerank=False, bm25_weight_doc_queries=DOC_QUERY_WEIGHT)
    rec = record(suite, loader(expand="none", rerank="none"), cfg, log=lambda m: None)
    fresh = Study.from_recording(rec, metrics=["ndcg@10"]).evaluate(rec.config).per_query.sort("qid")
    got = hybrid.per_query.sort("qid")
    assert got["qid"].to_list() == fresh["qid"].to_list()
    assert got["ndcg@10"].to_list() == pytest.approx(fresh["ndcg@10"].to_list(), abs=1e-12)
    # the column changes something here, so the comparison is not of two equal runs
    lists_plain = record(
        suite, loader(expand="none", rerank="none"), PipelineConfig(expand=False, rerank=False), log=lambda m: None
    ).trace.lists
    assert (
        not rec.trace.lists.select("qid", "docno", "score")
        .sort("qid", "docno")
        .equals(lists_plain.select("qid", "docno", "score").sort("qid", "docno"))
    )
    # the recording tiers offer the column too, second
    tiers = choices.tiers(suite)
    assert tiers[1].config.bm25_weight_doc_queries == DOC_QUERY_WEIGHT and tiers[1].roles == tiers[0].roles

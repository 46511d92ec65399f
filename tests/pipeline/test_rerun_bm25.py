"""The fast re-query path: recorded traces re-run under other lexical knobs."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.lab import Lab
from qmdlab.pipeline.rerun_bm25 import LEXICAL_FIELDS, Bm25RerunCache, rerun_bm25, rerun_bm25_trace
from qmdlab.pipeline.retune import retune

RULES = {"git rebase branch": [("lex", "rebase commit onto branch"), ("vec", "merge branch commit")]}
KNOBS = [
    dict(bm25_weight_title=0.5),
    dict(bm25_prefix=False),
    dict(bm25_stopwords=False),
    dict(bm25_query_tf=False),
    dict(bm25_mode="msm", bm25_min_match=2),
    dict(bm25_mode="and"),
    dict(bm25_weight_filepath=0.0, bm25_weight_body=3.0),
]


def _lists(lists):
    return lists.select("qid", "list_id", "source", "query_type", "docno", "rank", "backend_score", "weight")


@pytest.mark.parametrize("knobs", KNOBS)
def test_rerun_bm25_equals_a_fresh_run(small_index, knobs):
    """rerun_bm25(recorded lists, new knobs) == the lists a fresh pipeline run with those knobs records."""
    idx, emb = small_index
    models = ModelSet(emb, RuleExpander(RULES), None)
    base = PipelineConfig(rerank=False, strong_signal_min=2.0)  # never skip expansion: same routes in both runs
    recorded = Lab(idx, models, base).query("git rebase branch")
    new = base.replace(**knobs)
    fresh = Lab(idx, models, new).query("git rebase branch")
    assert set(recorded.lists["query_type"]) == {"original", "lex", "vec"}
    got = rerun_bm25(recorded.lists, idx, new)
    assert _lists(got).equals(_lists(fresh.lists))
    assert (
        retune(rerun_bm25_trace(recorded, idx, new), new)
        .final.select("docno", "final_rank")
        .equals(fresh.final.select("docno", "final_rank"))
    )


def test_rerun_bm25_keeps_vector_rows_and_uses_the_cache(small_index):
    idx, emb = small_index
    base = PipelineConfig(rerank=False, expand=False)
    trace = Lab(idx, ModelSet(emb, None, None), base).query("git rebase")
    cache = Bm25RerunCache()
    cfg = base.replace(bm25_weight_title=0.0, bm25_weight_filepath=0.0)
    a = rerun_bm25(trace.lists, idx, cfg, cache=cache)
    assert a.filter(pl.col("source") == "vec").equals(trace.lists.filter(pl.col("source") == "vec"))
    assert rerun_bm25(trace.lists, idx, cfg, cache=cache) is a  # second call: from the cache
    assert rerun_bm25(trace.lists, idx, cfg.replace(rrf_k=5), cache=cache) is a  # not a lexical knob
    assert rerun_bm25(trace.lists, idx, base, cache=cache) is not a


def test_lexical_fields_are_the_bm25_options():
    # every bm25_* option is declared in the bm25 stage, so the BM25 re-run sees it
    assert {f for f in PipelineConfig.field_names() if f.startswith("bm25_")} == set(LEXICAL_FIELDS)
    assert "list_limit" not in LEXICAL_FIELDS and "rrf_k" not in LEXICAL_FIELDS


def test_explain_shows_the_bm25_knobs_and_built_queries(small_index):
    from qmdlab.pipeline.explain import format_explain

    idx, emb = small_index
    cfg = PipelineConfig(rerank=False, expand=False, bm25_prefix=False, bm25_weight_title=2.5)
    text = format_explain(Lab(idx, ModelSet(emb, None, None), cfg).query("git rebase the rebase"))
    assert (
        "bm25: mode or, weights filepath 1.5 / title 2.5 / body 1, prefix off, stopwords dropped on, query tf on"
    ) in text
    assert '\'git rebase the rebase\' -> "git" OR "rebase" OR "rebase"' in text

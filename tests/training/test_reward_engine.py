"""The engine-faithful retrieval term (``engine_scorer``): a completion is scored as the expander's
answer, so the engine's expansion filter applies — unlike ``pipeline_scorer``'s user-typed searches.
Real SQLite index, BM25 only, no model weights."""

from __future__ import annotations

import pytest

from qmdlab.training.reward import RetrievalReward, engine_scorer, pipeline_scorer


@pytest.fixture
def lab(bm25_lab):
    bm25_lab.config = bm25_lab.config.replace(strong_signal_min=2.0)
    return bm25_lab


QRELS = {"q1": {"n/rebase.md": 1}}


def test_a_line_sharing_no_query_term_is_dropped_as_the_engine_drops_it(lab):
    q = "tidy up work"
    off_topic = "lex: rebase commits branch"  # finds the answer, but shares no term with the query
    typed = RetrievalReward(pipeline_scorer(lab), QRELS)
    engine = RetrievalReward(engine_scorer(lab), QRELS)
    assert typed(q, "q1", off_topic) == pytest.approx(1.0)  # a user-typed search skips the filter
    assert engine(q, "q1", off_topic) == 0.0  # a served expander's line does not
    trace = lab.query(q, expand=True)  # the last completion's lines, replayed
    rows = trace.expansions.select("type", "text", "kept", "reason_dropped", "origin").rows()
    assert rows == [("lex", "rebase commits branch", False, "shares no query term", "expander")]
    assert trace.lists.filter(trace.lists["query_type"] != "original").height == 0


def test_a_kept_line_retrieves_and_completions_do_not_leak_into_each_other(lab):
    q = "tidy up work"
    engine = RetrievalReward(engine_scorer(lab), QRELS)
    assert engine(q, "q1", "lex: tidy rebase commits") == pytest.approx(1.0)
    assert engine(q, "q1", "lex: rebase commits branch") == 0.0  # the next completion's lines, not the last's
    assert engine(q, "q1", "lex: tidy rebase commits\nlex: work rebase branch") == pytest.approx(1.0)
    trace = lab.query(q, expand=True)
    assert trace.expansions["kept"].to_list() == [True, True]
    # the query alone finds nothing; each kept line is a list of its own
    assert sorted(set(trace.lists["subquery"].to_list())) == ["tidy rebase commits", "work rebase branch"]
    assert set(trace.lists["query_type"].to_list()) == {"lex"}


def test_vector_lines_follow_the_labs_stage_switches(lab):
    engine = engine_scorer(lab)
    engine("tidy up work", [("vec", "tidy up work on a branch by rebasing")])
    trace = lab.query("tidy up work", expand=True)
    assert trace.expansions["reason_dropped"].to_list() == ["vector search disabled"]


def test_the_baseline_is_the_query_with_expansion_off(lab):
    engine = engine_scorer(lab)
    for q in ("rebase branch", "spaghetti water", "tidy up work"):
        off = lab.query(q, expand=False).final.sort("final_rank")["docno"].to_list()
        assert engine(q, None) == off[:10]
    assert engine("rebase branch", None)[0] == "n/rebase.md"
    assert RetrievalReward(engine, QRELS).baseline("rebase branch", "q1") == 1.0
    assert lab.expander.fingerprint == "fixed-lines"  # the lab's expander is the completion's lines

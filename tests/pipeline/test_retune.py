"""retune: the cheap stages again, with no model or index call."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander, TableReranker, term_overlap
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.lab import Lab
from qmdlab.pipeline.retune import retune
from qmdlab.pipeline.trace import Trace

RULES = {"git rebase": [("lex", "rebase squash"), ("vec", "rebase branch"), ("hyde", "git rebase commit")]}


class NoCalls:
    """Stands in for the index and the models: any use is a test failure."""

    def __getattr__(self, name):
        raise AssertionError(f"retune touched {name!r}")


@pytest.fixture
def lab(small_index):
    idx, emb = small_index
    return Lab(idx, ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=term_overlap)))


def test_retune_with_a_saved_trace_needs_nothing_else(lab, tmp_path):
    trace = lab.query("git rebase", qid="1")
    saved = Trace.from_parquet(trace.to_parquet(tmp_path / "t"))
    lab.index = lab.reranker = lab.expander = lab.embedder = NoCalls()
    out = retune(saved, PipelineConfig(fusion="rrf", blend="score"))
    assert out.fused.height == trace.fused.height and out.config["fusion"] == "rrf"
    assert out.final["docno"].to_list()
    assert "retune" in out.timings["stage"].to_list()


def test_newly_promoted_candidates_are_marked(lab):
    trace = lab.query("git rebase", candidate_limit=2)
    assert trace.rerank.height == 2
    out = retune(trace, PipelineConfig(candidate_limit=5))
    assert out.final.height == 5
    assert out.final["rerank_score"].null_count() == 3
    assert out.notes_for("retune") == [
        "3 candidates newly promoted without a cached rerank score (rerank_score null: position score kept)"
    ]
    missing = out.final.filter(pl.col("rerank_score").is_null())
    assert (missing["final_score"] == missing["position_score"]).all()


def test_rerank_fn_fills_missing_scores(lab):
    trace = lab.query("git rebase", candidate_limit=2)
    calls_before = lab.reranker.calls
    seen = []

    def fn(missing):
        seen.append(missing.rows())
        return lab.rerank_fn(trace)(missing)

    out = retune(trace, PipelineConfig(candidate_limit=5), rerank_fn=fn)
    assert len(seen) == 1 and len(seen[0]) == 3
    assert out.final["rerank_score"].null_count() == 0 and out.rerank.height == 5
    assert lab.reranker.calls == calls_before + 1 and out.notes_for("retune") == []
    # the same as running with candidate_limit=5 from the start
    direct = lab.query("git rebase", candidate_limit=5)
    assert out.final.equals(direct.final)


def test_extra_rerank_scores_override(lab):
    trace = lab.query("git rebase")
    extra = pl.DataFrame(
        {"qid": ["q", "q"], "docno": ["notes/sqlite.md", "notes/git-rebase.md"], "rerank_score": [1.0, 0.0]}
    )
    out = retune(trace, PipelineConfig(blend="rerank_only"), extra)
    assert out.final.select("docno", "rerank_score").rows()[:2] == [
        ("notes/sqlite.md", 1.0),
        ("notes/git-merge.md", 0.5),
    ]


def test_ablations_drop_recorded_lists(lab):
    trace = lab.query("git rebase")
    out = retune(trace, PipelineConfig(vector=False))
    assert set(out.lists["source"]) == {"fts"}
    assert out.fused["docno"].to_list() == ["notes/git-rebase.md", "notes/git-merge.md"]
    out = retune(trace, PipelineConfig(expand=False, weight_original_vec=0.0))
    assert set(out.lists["query_type"]) == {"original"} and set(out.lists["weight"]) == {2.0, 0.0}
    out = retune(trace, PipelineConfig(rerank=False))
    assert out.final["rerank_score"].null_count() == out.final.height


def test_many_queries_at_once(lab):
    qs = pl.DataFrame({"qid": ["a", "b", "c"], "text": ["git rebase", "docker network", "pasta"]})
    trace = lab.run_queries(qs, progress=False)
    out = retune(trace, PipelineConfig(limit=1))
    assert out.final.select("qid", "docno").rows() == [
        ("a", "notes/git-rebase.md"),
        ("b", "notes/docker.md"),
        ("c", "notes/pasta.md"),
    ]
    assert out.results.select("qid", "title").rows() == [
        ("a", "Git rebase"),
        ("b", "Docker network"),
        ("c", "Cooking pasta"),
    ]

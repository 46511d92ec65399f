"""The whole pipeline over a five-document index with the deterministic fakes: exact rankings,
degradation, caching, typed searches, many queries."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.errors import QmdlabError
from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander, TableReranker
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.lab import Lab

R, M, D, P, S = (f"notes/{n}.md" for n in ("git-rebase", "git-merge", "docker", "pasta", "sqlite"))
RULES = {
    "git rebase": [
        ("lex", "rebase squash"),
        ("vec", "rebase branch"),
        ("hyde", "git rebase replays commit"),
        ("lex", "pasta"),
    ]
}


def pasta_lover(query: str, text: str) -> float:
    """A reranker fake that prefers the pasta note: 0.9 for it, 0.1 for everything else."""
    return 0.9 if "pasta" in text.lower() else 0.1


class Boom:
    model_id = fingerprint = "boom"

    def score(self, query, texts):
        raise RuntimeError("GPU on fire")

    def expand(self, query, *, intent=None):
        raise RuntimeError("expander crashed")


def notes(trace, stage=None):
    return " | ".join(trace.notes_for(stage))


def test_exact_ranking_embedder_only(small_index):
    idx, emb = small_index
    t = Lab(idx, ModelSet(emb, None, None)).query("git rebase")
    assert t.lists.select("list_id", "source", "docno", "rank").rows() == [
        (0, "fts", R, 1),
        (0, "fts", M, 2),
        (1, "vec", R, 1),
        (1, "vec", M, 2),
        (1, "vec", D, 3),
        (1, "vec", P, 4),
        (1, "vec", S, 5),
    ]
    assert t.fused.select("docno", "fused_score", "fused_rank").rows() == [
        (R, 2.0 / 61 + 2.0 / 61 + 0.05, 1),
        (M, 2.0 / 62 + 2.0 / 62 + 0.02, 2),
        (D, 2.0 / 63 + 0.02, 3),
        (P, 2.0 / 64, 4),
        (S, 2.0 / 65, 5),
    ]
    # no reranker: final order is fusion order, final score the position score 1/rank
    assert t.final.select("docno", "final_score", "blend_weight").rows() == [
        (R, 1.0, 1.0),
        (M, 0.5, 1.0),
        (D, 1.0 / 3, 1.0),
        (P, 0.25, 1.0),
        (S, 0.2, 1.0),
    ]
    assert "no expander" in notes(t, "expand") and "no reranker" in notes(t, "rerank")
    assert t.results.select("docno", "title", "line").rows()[0] == (R, "Git rebase", 1)


def test_exact_ranking_full_pipeline(small_index):
    idx, emb = small_index
    lab = Lab(idx, ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=pasta_lover)))
    t = lab.query("git rebase")
    assert t.expansions.select("type", "kept", "reason_dropped").rows() == [
        ("lex", True, None),
        ("vec", True, None),
        ("hyde", True, None),
        ("lex", False, "shares no query term"),
    ]
    assert t.lists.group_by("list_id", maintain_order=True).agg(pl.first("query_type"), pl.first("source")).rows() == [
        (0, "original", "fts"),
        (1, "original", "vec"),
        (2, "lex", "fts"),
        (3, "vec", "vec"),
        (4, "hyde", "vec"),
    ]
    top = t.fused.row(0, named=True)
    assert top["docno"] == R and top["n_lists"] == 5
    # five terms: polars' float sum is not a left fold, so allow the last bit
    assert top["rrf_base"] == pytest.approx(2.0 / 61 + 2.0 / 61 + 1.0 / 61 + 1.0 / 61 + 1.0 / 61, rel=1e-15)
    assert t.fused["docno"].to_list() == [R, M, D, P, S]
    assert t.rerank.select("docno", "rerank_score").rows() == [(R, 0.1), (M, 0.1), (D, 0.1), (P, 0.9), (S, 0.1)]
    assert t.final.select("docno", "final_score").rows() == [
        (R, 0.75 * 1.0 + 0.25 * 0.1),
        (P, 0.6 * 0.25 + 0.4 * 0.9),  # promoted from fused rank 4 by the reranker
        (M, 0.75 * 0.5 + 0.25 * 0.1),
        (D, 0.75 * (1.0 / 3) + 0.25 * 0.1),
        (S, 0.6 * 0.2 + 0.4 * 0.1),
    ]
    assert t.final["final_rank"].to_list() == [1, 2, 3, 4, 5]
    assert set(t.timings["stage"]) >= {"probe", "expand", "retrieve", "fuse", "select", "rerank", "blend"}


def test_limit_min_score_and_config_overrides(small_index):
    idx, emb = small_index
    lab = Lab(idx, ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=pasta_lover)))
    t = lab.query("git rebase", limit=2)
    assert t.final["docno"].to_list() == [R, P]
    t = lab.query("git rebase", min_score=0.3)
    assert t.final["docno"].to_list() == [R, P, M]
    t = lab.query("git rebase", blend="rerank_only")
    assert t.final["docno"].to_list()[0] == P


def test_strong_signal_skips_expansion_unless_intent(small_index):
    idx, emb = small_index
    lab = Lab(
        idx,
        ModelSet(emb, RuleExpander({"pasta": [("lex", "pasta water")]}), None),
        PipelineConfig(strong_signal_min=0.3, strong_signal_gap=0.1),
    )
    t = lab.query("pasta")
    assert "expansion skipped" in notes(t, "probe") and t.expansions.height == 0
    assert lab.expander.calls == 0
    assert set(t.lists["source"]) == {"fts", "vec"}  # vector search of the original still runs
    t = lab.query("pasta", intent="cooking dinner")
    assert "intent given" in notes(t, "probe") and lab.expander.calls == 1
    assert t.expansions.select("text", "kept").rows() == [("pasta water", True)]


def test_degrades_without_vectors(small_index_no_vectors):
    idx, emb = small_index_no_vectors
    t = Lab(idx, ModelSet(emb, RuleExpander(RULES), None)).query("git rebase")
    assert "no vectors" in notes(t, "retrieve") and set(t.lists["source"]) == {"fts"}
    assert t.final["docno"].to_list()[0] == R


def test_degrades_with_failing_models(small_index):
    idx, emb = small_index
    t = Lab(idx, ModelSet(emb, Boom(), Boom())).query("git rebase")
    assert "expander failed (RuntimeError: expander crashed)" in notes(t, "expand")
    assert "reranker failed (RuntimeError: GPU on fire): fusion order kept" in notes(t, "rerank")
    assert t.rerank.height == 0
    assert t.final["docno"].to_list() == t.fused["docno"].to_list()


def test_bad_reranker_scores_fail_open(small_index):
    idx, emb = small_index
    t = Lab(idx, ModelSet(emb, None, TableReranker({}, default=lambda q, x: 7.0))).query("git rebase")
    assert "outside [0, 1]" in notes(t, "rerank") and t.final["rerank_score"].null_count() == t.final.height


def test_stage_switches(small_index):
    idx, emb = small_index
    lab = Lab(idx, ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=pasta_lover)))
    t = lab.query("git rebase", vector=False, rerank=False, expand=False)
    assert set(t.lists["source"]) == {"fts"} and t.expansions.height == 0 and t.rerank.height == 0
    assert {"expansion disabled", "vector search disabled", "rerank disabled: fusion order kept"} <= set(t.notes_for())
    t = lab.query("git rebase", hyde=False)
    assert "hyde" not in set(t.lists["query_type"])
    assert t.expansions.filter(pl.col("type") == "hyde")["reason_dropped"].to_list() == ["hyde disabled"]


def test_caches_expansions_and_rerank_scores(small_index):
    idx, emb = small_index
    lab = Lab(idx, ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=pasta_lover)))
    first = lab.query("git rebase")
    second = lab.query("git rebase")
    assert lab.expander.calls == 1 and lab.reranker.calls == 1
    assert not any(first.rerank["cached"]) and all(second.rerank["cached"])
    assert first.final.equals(second.final)


def test_typed_searches_replace_the_expander(small_index):
    idx, emb = small_index
    lab = Lab(idx, ModelSet(emb, RuleExpander(RULES), None))
    t = lab.query("intent: history editing\nlex: squash\nvec: rebase branch")
    assert lab.expander.calls == 0
    assert t.queries.rows() == [("q", "", "history editing")]
    assert t.expansions.select("type", "text", "origin").rows() == [
        ("lex", "squash", "user"),
        ("vec", "rebase branch", "user"),
    ]
    assert t.lists.group_by("list_id", maintain_order=True).agg(pl.first("query_type")).rows() == [
        (0, "lex"),
        (1, "vec"),
    ]
    assert t.final["docno"].to_list()[0] == R


def test_run_queries_concatenates(small_index):
    idx, emb = small_index
    lab = Lab(idx, ModelSet(emb, None, None))
    qs = pl.DataFrame({"qid": ["1", "2"], "text": ["git rebase", "docker network"]})
    t = lab.run_queries(qs, progress=False)
    assert t.qids == ["1", "2"]
    assert t.final.group_by("qid", maintain_order=True).agg(pl.first("docno")).rows() == [("1", R), ("2", D)]
    with pytest.raises(QmdlabError, match="'text' column"):
        lab.run_queries(pl.DataFrame({"qid": ["1"]}), progress=False)


def test_tags_lift_and_tag_listing(small_index):
    idx, emb = small_index
    lab = Lab(idx, ModelSet(emb, None, None))
    t = lab.query("git rebase", tags=("search",), tag_lift=3)
    assert t.final["docno"].to_list() == [R, S, M, D, P]  # sqlite.md (tag "search") lifted from 5 to 2
    t = lab.query("", tags=("ops",))
    assert t.final["docno"].to_list() == [D] and "tags filter" in notes(t)
    with pytest.raises(QmdlabError, match="empty query"):
        lab.query("   ")

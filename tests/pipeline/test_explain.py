"""explain / to_json: per-result contributions add up to the fused score."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander, TableReranker, term_overlap
from qmdlab.pipeline.config import FUSION_METHODS, PipelineConfig
from qmdlab.pipeline.explain import COLUMNS, explain, format_explain, to_json
from qmdlab.pipeline.lab import Lab

RULES = {"git rebase": [("lex", "rebase squash"), ("vec", "rebase branch")]}


@pytest.mark.parametrize("fusion", FUSION_METHODS)
def test_contributions_plus_bonus_equal_fused_score(small_index, fusion):
    idx, emb = small_index
    lab = Lab(idx, ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=term_overlap)))
    t = lab.query("git rebase", fusion=fusion)
    e = explain(t)
    assert e.columns == COLUMNS
    sums = e.group_by("docno").agg(pl.col("contribution").sum(), pl.first("bonus"), pl.first("fused_score"))
    for d, c, b, f in sums.iter_rows():
        assert c + b == pytest.approx(f, rel=1e-12, abs=1e-15), d
    assert e["final_rank"].to_list() == sorted(e["final_rank"].to_list())


def test_format_and_json(small_index):
    idx, emb = small_index
    t = Lab(idx, ModelSet(emb, RuleExpander(RULES), None)).query("git rebase", limit=2)
    text = format_explain(t)
    assert text.startswith("#1 notes/git-rebase.md  final 1.0000 = position 1.0000 (no rerank score)")
    assert "list 2 fts/lex      rank  1  weight 1.00" in text and "[rerank] no reranker" in text
    data = to_json(t)
    assert [r["file"] for r in data["results"]] == ["notes/git-rebase.md", "notes/git-merge.md"]
    assert data["query"] == {"qid": "q", "text": "git rebase", "intent": None}
    assert data["results"][0]["explain"]["fused_rank"] == 1
    assert data["expansions"][0] == {
        "type": "lex",
        "text": "rebase squash",
        "kept": True,
        "reason_dropped": None,
        "origin": "expander",
    }


def test_module_level_query(small_index):
    import qmdlab

    idx, emb = small_index
    t = qmdlab.query("git rebase", index=idx, models=ModelSet(emb, None, None), limit=1, rerank=False)
    assert t.final["docno"].to_list() == ["notes/git-rebase.md"]
    assert "rerank disabled: fusion order kept" in t.notes_for("rerank")
    assert qmdlab.PipelineConfig is PipelineConfig
    assert qmdlab.retune(t, PipelineConfig(limit=1)).final["docno"].to_list() == ["notes/git-rebase.md"]

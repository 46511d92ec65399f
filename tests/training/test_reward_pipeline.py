"""The retrieval term over the real qmdlab pipeline (BM25 only, no model weights)."""

from __future__ import annotations

import pytest

from qmdlab.training.reward import RetrievalReward, pipeline_scorer


@pytest.fixture
def lab(bm25_lab):
    return bm25_lab


def test_delta_ndcg_through_the_pipeline(lab):
    # Nothing matches "tidy up work" lexically; a lex line about rebasing finds the answer.
    q = "tidy up work"
    r = RetrievalReward(pipeline_scorer(lab), {"q1": {"n/rebase.md": 1}})
    assert r.scorer(q, None) == []
    assert r.baseline(q, "q1") == 0.0
    assert r(q, "q1", "lex: rebase commits branch\nvec: replay commits on another branch") == pytest.approx(1.0)
    assert r.scorer(q, [("lex", "rebase commits branch")])[0] == "n/rebase.md"
    assert r(q, "q1", "lex: spaghetti water") == 0.0
    assert r(q, "unlabelled", "lex: rebase") is None


def test_expansion_can_also_hurt(lab):
    # The original query already ranks the answer first; an expansion that pulls in another
    # document at rank 1 of its own list cannot raise nDCG and the delta is never positive.
    q = "rebase branch"
    r = RetrievalReward(pipeline_scorer(lab), {"q1": {"n/rebase.md": 1}})
    assert r.baseline(q, "q1") == 1.0
    assert r(q, "q1", "lex: spaghetti water salt\nlex: boil pasta") <= 0.0

"""The retrieval term over the real qmdlab pipeline (BM25 only, no model weights)."""
from __future__ import annotations

import pytest

from training.reward import RetrievalReward, pipeline_scorer


@pytest.fixture
def lab(tmp_path, qmdlab_home):
    from qmdlab.pipeline.lab import Lab
    from qmdlab.store import Index

    corpus = tmp_path / "notes"
    corpus.mkdir()
    (corpus / "rebase.md").write_text("# Rebasing\n\nRebase replays your commits on top of another branch.\n")
    (corpus / "pasta.md").write_text("# Pasta\n\nBoil water, add salt, cook the spaghetti for nine minutes.\n")
    (corpus / "history.md").write_text("# History of Rome\n\nThe squash court was built in the old town.\n")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", corpus)
    idx.update()
    lab = Lab(idx, None)
    lab.config = lab.config.replace(vector=False, rerank=False)
    return lab


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

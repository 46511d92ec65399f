"""Expander evaluation over a real pipeline with scripted expanders: exact nDCG per variant."""

from __future__ import annotations

import json

import pytest

from qmdlab.training.evaluate import EvaluateConfig, ensure_index, run_evaluate, suite_rows


@pytest.fixture
def suite(tmp_path):
    root = tmp_path / "suite"
    corpus = root / "corpus"
    corpus.mkdir(parents=True)
    (corpus / "rebase.md").write_text("# Rebasing\n\nRebase replays your commits on top of another branch.\n")
    (corpus / "pasta.md").write_text("# Pasta\n\nBoil water, add salt, cook the spaghetti for nine minutes.\n")
    (root / "queries.jsonl").write_text(
        json.dumps({"qid": "q1", "query": "tidy up work", "category": "x"})
        + "\n"
        + json.dumps({"qid": "q2", "query": "spaghetti", "category": "x"})
        + "\n"
    )
    (root / "qrels.txt").write_text("q1 0 rebase.md 1\nq2 0 pasta.md 2\n")
    return root


def test_suite_rows_prefix_docnos_with_the_collection(suite):
    rows = suite_rows(suite, "c")
    assert rows == [
        {"qid": "q1", "query": "tidy up work", "intent": None, "qrels": {"c/rebase.md": 1}},
        {"qid": "q2", "query": "spaghetti", "intent": None, "qrels": {"c/pasta.md": 2}},
    ]


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_evaluate_variants_against_no_expansion(tmp_path, suite, qmdlab_home):
    from qmdlab.models import ModelSet, RuleExpander
    from qmdlab.pipeline.lab import Lab

    idx = ensure_index(tmp_path / "idx", suite / "corpus", "c", None)

    def lab_factory(expander):
        lab = Lab(idx, ModelSet(None, expander, None))
        lab.config = lab.config.replace(vector=False, rerank=False, strong_signal_min=2.0)
        return lab

    helpful = RuleExpander(
        {
            "tidy up work": "hyde: Tidy up work by rebasing the commits on the branch.\n"
            "lex: tidy rebase commits\nvec: tidy up my work on a branch"
        }
    )
    harmful = RuleExpander({"spaghetti": [("lex", "spaghetti rebase branch commits")]})
    examples = tmp_path / "held.jsonl"
    examples.write_text(json.dumps({"query": "tidy up work", "output": [["lex", "tidy work"]]}) + "\n")
    cfg = EvaluateConfig(suite=str(suite), collection="c", output_dir=str(tmp_path / "ev"), examples_file=str(examples))
    res = run_evaluate(cfg, expanders={"helpful": helpful, "harmful": harmful}, lab_factory=lab_factory)
    # none: q1 finds nothing (0), q2 finds pasta first (1)
    assert res["none"]["ndcg@10"] == pytest.approx(0.5)
    # helpful: q1's lex line finds rebase.md (rank 1) → 1; q2 untouched → 1
    assert res["helpful"]["ndcg@10"] == pytest.approx(1.0)
    assert (res["helpful"]["wins"], res["helpful"]["losses"]) == (1, 0)
    # harmful: q2 keeps pasta.md first (the original query's lists weigh double) → no change
    assert res["harmful"]["ndcg@10"] == pytest.approx(0.5)
    assert res["helpful"]["rule_score"] > 0.5 and res["harmful"]["gate_failures"] == 1  # empty output is gated
    card = (tmp_path / "ev" / "README.md").read_text()
    row = next(line for line in card.splitlines() if line.startswith("| helpful |"))
    assert row.startswith("| helpful | 1.0000 | +0.5000 | ") and "| 1/0 |" in row, row
    # paired against no expansion on the same two queries; timed on the expander object itself
    # (per-query differences [1, 0]: t = 0.5 / (0.7071 / sqrt 2) = 1 on 1 df, two-sided p = 0.5)
    assert res["helpful"]["p_t"] == pytest.approx(0.5) and 0.0 < res["helpful"]["p_fisher"] <= 1.0
    assert res["helpful"]["s_per_query"] >= 0.0 and "p_t" not in res["none"]

"""qmdlab.eval.runner.ranx_check: the saved run is always re-scored by ranx, also when it is empty,
and negative grades (judged not relevant) are read and scored as ranx does."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.eval.metrics import mean_scores, per_query
from qmdlab.eval.runner import ranx_check

pytestmark = pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx

METRICS = ["ndcg@10", "mrr@10", "recall@10", "p@5", "p"]
QRELS = "1 0 a 2\n1 0 b -1\n1 0 c 0\n2 0 d 1\n3 0 e -1\n"


def _qrels_frame() -> pl.DataFrame:
    rows = [line.split() for line in QRELS.splitlines()]
    return pl.DataFrame(
        {"qid": [r[0] for r in rows], "docno": [r[2] for r in rows], "grade": [int(r[3]) for r in rows]}
    )


def test_empty_run_is_compared_not_assumed(tmp_path):
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "run.trec").write_text("")
    ours = mean_scores(
        per_query(pl.DataFrame(schema={"qid": pl.Utf8, "docno": pl.Utf8, "rank": pl.Int64}), _qrels_frame(), METRICS)
    )
    assert ranx_check(tmp_path / "qrels.txt", tmp_path / "run.trec", ours) == {m: 0.0 for m in METRICS}
    # a wrong claim about an empty run is caught: the check really compares
    with pytest.raises(RuntimeError, match="disagree with ranx"):
        ranx_check(tmp_path / "qrels.txt", tmp_path / "run.trec", {**ours, "mrr@10": 0.5})


def test_negative_grades_score_as_in_ranx(tmp_path):
    (tmp_path / "qrels.txt").write_text(QRELS)
    run = pl.DataFrame({"qid": ["1", "1", "1", "2", "3"], "docno": ["b", "a", "c", "x", "e"], "rank": [1, 2, 3, 1, 1]})
    (tmp_path / "run.trec").write_text("".join(f"{q} Q0 {d} {r} {-r} t\n" for q, d, r in run.iter_rows()))
    ours = mean_scores(per_query(run, _qrels_frame(), METRICS))
    theirs = ranx_check(tmp_path / "qrels.txt", tmp_path / "run.trec", ours)
    assert theirs == pytest.approx(ours, abs=1e-12)
    # query 1: the -1 document at rank 1 is not relevant, the grade-2 one at rank 2 is
    assert ours["mrr@10"] == pytest.approx((1 / 2 + 0 + 0) / 3)
    with pytest.raises(RuntimeError, match="disagree with ranx"):
        ranx_check(tmp_path / "qrels.txt", tmp_path / "run.trec", {**ours, "ndcg@10": ours["ndcg@10"] + 1e-6})

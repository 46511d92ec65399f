"""Closed-form values of every blend method."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.pipeline.blend import blend
from qmdlab.pipeline.config import PipelineConfig


def cands(n: int = 12, qid: str = "q") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "qid": [qid] * n,
            "docno": [f"d{r:02d}" for r in range(1, n + 1)],
            "fused_rank": list(range(1, n + 1)),
            "fused_score": [1.0 / (60 + r) for r in range(1, n + 1)],
        }
    )


def rr(scores: dict[str, float], qid: str = "q") -> pl.DataFrame:
    return pl.DataFrame({"qid": [qid] * len(scores), "docno": list(scores), "rerank_score": list(scores.values())})


def by_doc(final: pl.DataFrame) -> dict[str, dict]:
    return {r["docno"]: r for r in final.to_dicts()}


def test_position_blend_bands():
    scores = {f"d{r:02d}": 0.1 * (r % 5) for r in range(1, 13)}
    out = by_doc(blend(cands(), rr(scores), PipelineConfig()))
    for r, w in [(1, 0.75), (3, 0.75), (4, 0.6), (10, 0.6), (11, 0.4), (12, 0.4)]:
        row = out[f"d{r:02d}"]
        s = scores[f"d{r:02d}"]
        assert row["position_score"] == 1.0 / r
        assert row["blend_weight"] == w
        assert row["final_score"] == w * (1.0 / r) + (1.0 - w) * s


def test_position_blend_ranking_and_qmd_flaw():
    # DESIGN's known flaw: the fused #1 scores >= 0.75 even with rerank 0, so a perfect
    # rerank score at fused #2 (0.75/2 + 0.25 = 0.625) cannot displace it.
    out = blend(cands(3), rr({"d01": 0.0, "d02": 1.0, "d03": 1.0}), PipelineConfig())
    assert out["docno"].to_list() == ["d01", "d02", "d03"]
    assert out["final_score"].to_list() == [0.75, 0.75 * 0.5 + 0.25 * 1.0, 0.75 * (1.0 / 3) + 0.25 * 1.0]
    assert out["final_rank"].to_list() == [1, 2, 3]


def test_custom_bands_and_weights():
    cfg = PipelineConfig(blend_bands=(1, 2), blend_weights=(0.9, 0.5, 0.1))
    out = by_doc(blend(cands(3), rr({"d01": 0.2, "d02": 0.2, "d03": 0.2}), cfg))
    assert [out[d]["blend_weight"] for d in ("d01", "d02", "d03")] == [0.9, 0.5, 0.1]
    assert out["d03"]["final_score"] == 0.1 * (1.0 / 3) + (1.0 - 0.1) * 0.2


def test_score_blend_uses_normalised_fused_score():
    c = pl.DataFrame(
        {"qid": ["q"] * 3, "docno": ["a", "b", "c"], "fused_rank": [1, 2, 3], "fused_score": [0.5, 0.25, 0.125]}
    )
    out = by_doc(blend(c, rr({"a": 0.0, "b": 1.0, "c": 0.5}), PipelineConfig(blend="score")))
    assert out["a"]["position_score"] == 1.0 and out["b"]["position_score"] == 0.5
    assert out["b"]["final_score"] == 0.75 * (0.25 / 0.5) + (1.0 - 0.75) * 1.0
    assert out["c"]["final_score"] == 0.75 * (0.125 / 0.5) + (1.0 - 0.75) * 0.5


def test_rerank_only_and_none():
    sc = {"d01": 0.2, "d02": 0.9, "d03": 0.5}
    only = blend(cands(3), rr(sc), PipelineConfig(blend="rerank_only"))
    assert only["docno"].to_list() == ["d02", "d03", "d01"]
    assert only["final_score"].to_list() == [0.9, 0.5, 0.2] and set(only["blend_weight"]) == {0.0}
    none = blend(cands(3), rr(sc), PipelineConfig(blend="none"))
    assert none["docno"].to_list() == ["d01", "d02", "d03"]
    assert none["final_score"].to_list() == [1.0, 0.5, 1.0 / 3]


@pytest.mark.parametrize("method", ["position", "score", "rerank_only", "none"])
def test_missing_rerank_keeps_position_score(method):
    out = by_doc(blend(cands(4), rr({"d01": 0.0, "d02": 0.0}), PipelineConfig(blend=method)))
    for d in ("d03", "d04"):
        assert out[d]["rerank_score"] is None
        assert out[d]["blend_weight"] == 1.0
        assert out[d]["final_score"] == out[d]["position_score"]
    none = blend(cands(4), None, PipelineConfig(blend=method))
    assert none["docno"].to_list() == ["d01", "d02", "d03", "d04"]


def test_many_queries_at_once_equal_one_at_a_time():
    c = pl.concat([cands(5, "a"), cands(5, "b")])
    r = pl.concat(
        [
            rr({f"d{i:02d}": (i * 0.17) % 1 for i in range(1, 6)}, "a"),
            rr({f"d{i:02d}": (i * 0.31) % 1 for i in range(1, 6)}, "b"),
        ]
    )
    both = blend(c, r, PipelineConfig())
    for q in ("a", "b"):
        alone = blend(c.filter(pl.col("qid") == q), r.filter(pl.col("qid") == q), PipelineConfig())
        assert both.filter(pl.col("qid") == q).equals(alone)

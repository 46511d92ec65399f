"""Closed-form values of every fusion method, and differential tests against ranx."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from qmdlab.errors import ConfigError
from qmdlab.pipeline.config import FUSION_METHODS, PipelineConfig
from qmdlab.pipeline.fuse import METHODS, candidates, contributions, fuse
from qmdlab.pipeline.trace import SCHEMAS

# qid a: three lists; qid b: one list with one hit.
ROWS = [
    # qid, list_id, source, query_type, docno, rank, score, weight
    ("a", 0, "fts", "original", "d1", 1, 0.8, 2.0),
    ("a", 0, "fts", "original", "d2", 2, 0.4, 2.0),
    ("a", 1, "vec", "original", "d2", 1, 0.9, 2.0),
    ("a", 1, "vec", "original", "d3", 2, 0.6, 2.0),
    ("a", 1, "vec", "original", "d1", 3, 0.3, 2.0),
    ("a", 2, "fts", "lex", "d3", 1, 0.5, 1.0),
    ("b", 0, "fts", "original", "d1", 1, 0.5, 2.0),
]


def lists_table(rows=ROWS) -> pl.DataFrame:
    cols = ["qid", "list_id", "source", "query_type", "docno", "rank", "score", "weight"]
    types = [pl.String, pl.Int64, pl.String, pl.String, pl.String, pl.Int64, pl.Float64, pl.Float64]
    df = pl.DataFrame([dict(zip(cols, r)) for r in rows], schema=dict(zip(cols, types)))
    return df.with_columns(
        subquery=pl.lit("s"), chunk_id=pl.lit(None, dtype=pl.Int64), backend_score=pl.col("score")
    ).select([pl.col(c).cast(t) for c, t in SCHEMAS["lists"].items()])


def as_dict(fused: pl.DataFrame, qid: str = "a") -> dict[str, tuple]:
    f = fused.filter(pl.col("qid") == qid)
    return {d: (s, r) for d, s, r in f.select("docno", "fused_score", "fused_rank").iter_rows()}


def test_output_columns_are_the_design_columns_for_every_method():
    for name in FUSION_METHODS:
        out = fuse(lists_table(), PipelineConfig(fusion=name))
        assert out.columns == [
            "qid",
            "docno",
            "rrf_base",
            "best_rank",
            "bonus",
            "fused_score",
            "fused_rank",
            "n_lists",
        ], name


def test_qmd_rrf_closed_form():
    out = fuse(lists_table(), PipelineConfig())
    a = out.filter(pl.col("qid") == "a")
    assert a["docno"].to_list() == ["d2", "d1", "d3"]
    rows = {r["docno"]: r for r in a.to_dicts()}
    assert rows["d2"]["rrf_base"] == 2.0 / 62 + 2.0 / 61
    assert rows["d1"]["rrf_base"] == 2.0 / 61 + 2.0 / 63
    assert rows["d3"]["rrf_base"] == 2.0 / 62 + 1.0 / 61
    for d in ("d1", "d2", "d3"):
        assert rows[d]["bonus"] == 0.05 and rows[d]["best_rank"] == 1
        assert rows[d]["fused_score"] == rows[d]["rrf_base"] + 0.05
    assert [rows[d]["n_lists"] for d in ("d1", "d2", "d3")] == [2, 2, 2]
    b = out.filter(pl.col("qid") == "b").to_dicts()
    assert b == [
        {
            "qid": "b",
            "docno": "d1",
            "rrf_base": 2.0 / 61,
            "best_rank": 1,
            "bonus": 0.05,
            "fused_score": 2.0 / 61 + 0.05,
            "fused_rank": 1,
            "n_lists": 1,
        }
    ]


def test_qmd_rrf_bonus_bands_and_k():
    rows = [("q", 0, "fts", "original", f"d{r}", r, 1.0 / r, 2.0) for r in range(1, 6)]
    out = fuse(lists_table(rows), PipelineConfig(rrf_k=10, bonus_rank1=0.5, bonus_rank23=0.25))
    got = {r["docno"]: (r["bonus"], r["fused_score"]) for r in out.to_dicts()}
    assert got == {
        "d1": (0.5, 2.0 / 11 + 0.5),
        "d2": (0.25, 2.0 / 12 + 0.25),
        "d3": (0.25, 2.0 / 13 + 0.25),
        "d4": (0.0, 2.0 / 14),
        "d5": (0.0, 2.0 / 15),
    }


def test_rrf_ignores_weights_and_breaks_ties_by_best_rank_then_docno():
    out = fuse(lists_table(), PipelineConfig(fusion="rrf"))
    got = as_dict(out)
    # d2 and d3 tie exactly (1/62 + 1/61 each, best rank 1): docno decides.
    assert got == {"d2": (1.0 / 62 + 1.0 / 61, 1), "d3": (1.0 / 62 + 1.0 / 61, 2), "d1": (1.0 / 61 + 1.0 / 63, 3)}
    assert out["bonus"].to_list() == [0.0] * out.height


def test_norm_sum_closed_form():
    # BM25 rows over their list's best; vector rows keep the cosine (never divided by the list's best)
    out = fuse(lists_table(), PipelineConfig(fusion="norm_sum"))
    got = as_dict(out)
    assert got == {
        "d3": (0.9 * 0.6 + 1.0 * (0.5 / 0.5), 1),
        "d2": (1.0 * (0.4 / 0.8) + 0.9 * 0.9, 2),
        "d1": (1.0 * (0.8 / 0.8) + 0.9 * 0.3, 3),
    }
    out2 = fuse(lists_table(), PipelineConfig(fusion="norm_sum", norm_weight_fts=0.5, norm_weight_vec=2.0))
    assert as_dict(out2)["d1"][0] == 0.5 * (0.8 / 0.8) + 2.0 * 0.3


def test_norm_sum_keeps_nothing_close_low():
    # a vector list whose best cosine is 0.12: nothing is close, and the fused score says so
    # (dividing by the list's best would have given the top document 0.9 · 1.0)
    rows = [
        ("a", 0, "vec", "original", "d1", 1, 0.12, 2.0),
        ("a", 0, "vec", "original", "d2", 2, 0.10, 2.0),
        ("a", 0, "vec", "original", "d3", 3, -0.2, 2.0),
    ]
    got = as_dict(fuse(lists_table(rows), PipelineConfig(fusion="norm_sum")))
    assert got == {"d1": (0.9 * 0.12, 1), "d2": (0.9 * 0.10, 2), "d3": (0.0, 3)}


def test_gated_rrf_admits_vector_hits_near_the_top():
    out = fuse(lists_table(), PipelineConfig(fusion="gated_rrf", gate_margin=0.1, gate_max_take=10))
    got = as_dict(out)
    # only d2 (0.9 >= 0.9 - 0.1) passes the gate of the vector list; d1 and d3 tie at 1/61.
    assert got == {"d2": (1.0 / 62 + 1.0 / 61, 1), "d1": (1.0 / 61, 2), "d3": (1.0 / 61, 3)}
    assert out.filter(pl.col("qid") == "a")["n_lists"].to_list() == [2, 1, 1]


def test_gated_rrf_max_take_caps_admissions():
    out = fuse(lists_table(), PipelineConfig(fusion="gated_rrf", gate_margin=1.0, gate_max_take=2))
    got = as_dict(out)
    assert got["d1"] == (1.0 / 61, 3)  # its rank-3 vector hit is cut by max_take
    assert got["d3"] == (1.0 / 62 + 1.0 / 61, 2)
    assert got["d2"] == (1.0 / 62 + 1.0 / 61, 1)


def test_wsum_minmax_closed_form():
    got = as_dict(fuse(lists_table(), PipelineConfig(fusion="wsum_minmax")))
    d1 = 2.0 * ((0.8 - 0.4) / (0.8 - 0.4)) + 2.0 * ((0.3 - 0.3) / (0.9 - 0.3))
    d2 = 2.0 * ((0.4 - 0.4) / (0.8 - 0.4)) + 2.0 * ((0.9 - 0.3) / (0.9 - 0.3))
    d3 = 2.0 * ((0.6 - 0.3) / (0.9 - 0.3)) + 1.0 * ((0.5 - 0.5) / 1e-9)
    assert got == {"d1": (d1, 1), "d2": (d2, 2), "d3": (d3, 3)}
    assert as_dict(fuse(lists_table(), PipelineConfig(fusion="wsum_minmax")), "b") == {"d1": (0.0, 1)}


def test_combmnz_closed_form():
    out = fuse(lists_table(), PipelineConfig(fusion="combmnz"))
    got = as_dict(out)
    d3 = ((0.6 - 0.3) / (0.9 - 0.3) + (0.5 - 0.5) / 1e-9) * 2.0
    assert got == {"d1": ((1.0 + 0.0) * 2.0, 1), "d2": ((0.0 + 1.0) * 2.0, 2), "d3": (d3, 3)}


def test_unknown_method_is_a_config_error():
    with pytest.raises(ConfigError, match="fusion.*qmd_rrf"):
        PipelineConfig(fusion="borda")


def test_empty_lists_give_an_empty_fused_table():
    for name in METHODS:
        assert fuse(lists_table([]), PipelineConfig(fusion=name)).height == 0


def test_candidates_cut_per_query():
    rows = [("q", 0, "fts", "original", f"d{r}", r, 1.0, 1.0) for r in range(1, 6)] + [
        ("p", 0, "fts", "original", f"d{r}", r, 1.0, 1.0) for r in range(1, 3)
    ]
    cut = candidates(fuse(lists_table(rows), PipelineConfig()), 3)
    assert cut.group_by("qid").len().sort("qid").rows() == [("p", 2), ("q", 3)]


def test_contributions_sum_to_rrf_base():
    for name in FUSION_METHODS:
        cfg = PipelineConfig(fusion=name)
        c = contributions(lists_table(), cfg).group_by(["qid", "docno"]).agg(pl.col("contribution").sum())
        f = fuse(lists_table(), cfg).join(c, on=["qid", "docno"])
        assert np.allclose(f["contribution"].to_numpy(), f["rrf_base"].to_numpy(), rtol=0, atol=1e-15), name

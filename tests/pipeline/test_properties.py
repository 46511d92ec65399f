"""Properties: the cheap stages are pure functions of the recorded tables.

The recorded ``fused`` table equals an independent, plain-Python reference of the six
fusion formulas (:func:`ref_fuse`, written from docs/design.md, pipeline, not calling
:mod:`qmdlab.pipeline.fuse`) applied to the recorded ``lists``; the recorded ``final``
table equals a plain-Python reference of blend + finish (:func:`ref_final`) applied to the
recorded ``fused`` and ``rerank`` tables; :func:`qmdlab.retune` of a trace under a config
equals running the pipeline under that config; fusing many queries at once equals fusing
them one by one, whatever the row order.
"""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander, TableReranker, term_overlap
from qmdlab.pipeline.blend import blend
from qmdlab.pipeline.config import BLEND_METHODS, PipelineConfig
from qmdlab.pipeline.finish import finish
from qmdlab.pipeline.fuse import candidates, fuse
from qmdlab.pipeline.lab import Lab
from qmdlab.pipeline.retune import retune
from qmdlab.pipeline.trace import SCHEMAS

# No two documents tie on a vector score except at 0: float32 dot products of tied
# vectors may differ in the last bit between runs (BLAS alignment), which would make
# "rerunning" a different experiment.
RULES = {
    "git rebase": [("lex", "rebase squash"), ("vec", "rebase branch"), ("hyde", "git rebase commit")],
    "docker network": [("lex", "bridge network"), ("vec", "docker containers")],
    "search": [("lex", "sqlite search"), ("hyde", "full text search with bm25")],
}
QUERIES = ["git rebase", "docker network", "search", "pasta"]
# the six formula methods (``learned`` needs a trained model file and has its own tests)
FUSION_METHODS = ("qmd_rrf", "rrf", "norm_sum", "gated_rrf", "wsum_minmax", "combmnz")
TOL = 1e-12


# -- independent references (plain Python over rows; no qmdlab.pipeline.fuse/blend/finish) ------
def ref_fuse(lists: pl.DataFrame, cfg: PipelineConfig) -> dict[tuple[str, str], dict]:
    """``{(qid, docno): {rrf_base, bonus, fused_score, best_rank, n_lists}}`` from docs/design.md's formulas."""
    by_list: dict[tuple, list[dict]] = {}
    for row in lists.iter_rows(named=True):
        by_list.setdefault((row["qid"], row["list_id"]), []).append(row)
    docs: dict[tuple[str, str], dict] = {}
    for entries in by_list.values():
        scores = [e["score"] for e in entries]
        top, lo = max(scores), min(scores)
        if cfg.fusion == "gated_rrf" and entries[0]["source"] == "vec":  # admission gate, vector lists only
            order = sorted(range(len(entries)), key=lambda i: -entries[i]["score"])  # stable: ties by row
            keep = {
                i for n, i in enumerate(order) if n < cfg.gate_max_take and entries[i]["score"] >= top - cfg.gate_margin
            }
            entries = [e for i, e in enumerate(entries) if i in keep]
        for e in entries:
            k, w, s = cfg.rrf_k, e["weight"], e["score"]
            term = {
                "qmd_rrf": w / (k + e["rank"]),
                "rrf": 1 / (k + e["rank"]),
                "gated_rrf": 1 / (k + e["rank"]),
                "norm_sum": (
                    cfg.norm_weight_vec * max(s, 0.0)
                    if e["source"] == "vec"
                    else cfg.norm_weight_fts * (s / top if top > 0 else 0.0)
                ),
                "wsum_minmax": w * (s - lo) / max(top - lo, 1e-9),
                "combmnz": (s - lo) / max(top - lo, 1e-9),
            }[cfg.fusion]
            d = docs.setdefault((e["qid"], e["docno"]), {"terms": [], "ranks": [], "lists": set()})
            d["terms"].append(term)
            d["ranks"].append(e["rank"])
            d["lists"].add(e["list_id"])
    out = {}
    for key, d in docs.items():
        base = sum(d["terms"]) * (len(d["lists"]) if cfg.fusion == "combmnz" else 1)
        best = min(d["ranks"])
        bonus = 0.0
        if cfg.fusion == "qmd_rrf":
            bonus = cfg.bonus_rank1 if best == 1 else cfg.bonus_rank23 if best <= 3 else 0.0
        out[key] = {
            "rrf_base": base,
            "bonus": bonus,
            "fused_score": base + bonus,
            "best_rank": best,
            "n_lists": len(d["lists"]),
        }
    return out


def assert_ranked(rows: list[dict], score: str, tiebreak: tuple[str, ...], rank: str) -> None:
    """Within each qid: ``rank`` is 1..n along the row order, ``score`` never increases, and
    equal scores (within float noise) are ordered by ``tiebreak``."""
    by_q: dict[str, list[dict]] = {}
    for r in rows:
        by_q.setdefault(r["qid"], []).append(r)
    for part in by_q.values():
        part.sort(key=lambda r: r[rank])
        assert [r[rank] for r in part] == list(range(1, len(part) + 1))
        for a, b in zip(part, part[1:]):
            assert a[score] >= b[score] - TOL, (a, b)
            if abs(a[score] - b[score]) == 0:
                assert tuple(a[c] for c in tiebreak) <= tuple(b[c] for c in tiebreak), (a, b)


def assert_fused_matches_reference(fused: pl.DataFrame, lists: pl.DataFrame, cfg: PipelineConfig) -> None:
    ref = ref_fuse(lists, cfg)
    got = {(r["qid"], r["docno"]): r for r in fused.iter_rows(named=True)}
    assert set(got) == set(ref)
    for key, want in ref.items():
        row = got[key]
        assert (row["best_rank"], row["n_lists"]) == (want["best_rank"], want["n_lists"]), key
        for col in ("rrf_base", "bonus", "fused_score"):
            assert abs(row[col] - want[col]) <= TOL, (key, col, row[col], want[col])
    assert_ranked(list(got.values()), "fused_score", ("best_rank", "docno"), "fused_rank")


def ref_final(fused: pl.DataFrame, rerank: pl.DataFrame, cfg: PipelineConfig) -> dict[str, list[tuple]]:
    """Per qid, ``[(docno, position_score, blend_weight, final_score)]`` in final order
    (blend of the top ``candidate_limit`` fused documents, then min_score and limit)."""
    rr = {(r["qid"], r["docno"]): r["rerank_score"] for r in rerank.iter_rows(named=True)} if cfg.rerank else {}
    cands: dict[str, list[dict]] = {}
    for r in fused.iter_rows(named=True):
        if r["fused_rank"] <= cfg.candidate_limit:
            cands.setdefault(r["qid"], []).append(r)
    out = {}
    for qid, part in cands.items():
        top = max(r["fused_score"] for r in part)
        rows = []
        for r in part:
            if cfg.blend == "score":
                pos = r["fused_score"] / top if top > 0 else 0.0
            else:
                pos = 1.0 / r["fused_rank"]
            band = 0 if r["fused_rank"] <= cfg.blend_bands[0] else 1 if r["fused_rank"] <= cfg.blend_bands[1] else 2
            w = {
                "position": cfg.blend_weights[band],
                "score": cfg.blend_weights[band],
                "rerank_only": 0.0,
                "none": 1.0,
            }[cfg.blend]
            s = rr.get((qid, r["docno"]))
            if s is None:
                w, final = 1.0, pos
            else:
                final = w * pos + (1 - w) * s
            rows.append((r["docno"], pos, w, final, r["fused_rank"]))
        rows.sort(key=lambda x: (-x[3], x[4], x[0]))
        rows = [x for x in rows if x[3] >= cfg.min_score][: cfg.limit]
        out[qid] = [x[:4] for x in rows]
    return out


def assert_final_matches_reference(
    final: pl.DataFrame, fused: pl.DataFrame, rerank: pl.DataFrame, cfg: PipelineConfig
) -> None:
    want = ref_final(fused, rerank, cfg)
    got: dict[str, list[tuple]] = {}
    for r in final.sort("qid", "final_rank").iter_rows(named=True):
        got.setdefault(r["qid"], []).append((r["docno"], r["position_score"], r["blend_weight"], r["final_score"]))
    assert set(got) == {q for q, rows in want.items() if rows}
    for qid, rows in got.items():
        # final scores are elementwise (no sums), so the order is exact, not up to float noise
        assert [x[0] for x in rows] == [x[0] for x in want[qid]], qid
        for a, b in zip(rows, want[qid]):
            assert all(abs(x - y) <= TOL for x, y in zip(a[1:], b[1:])), (a, b)


weights = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0])
configs = st.builds(
    PipelineConfig,
    fusion=st.sampled_from(FUSION_METHODS),
    blend=st.sampled_from(BLEND_METHODS),
    rrf_k=st.integers(0, 100),
    bonus_rank1=st.sampled_from([0.0, 0.05, 0.3]),
    bonus_rank23=st.sampled_from([0.0, 0.02, 0.1]),
    weight_original_fts=weights,
    weight_original_vec=weights,
    weight_lex=weights,
    weight_vec=weights,
    weight_hyde=weights,
    candidate_limit=st.integers(1, 6),
    limit=st.integers(1, 6),
    min_score=st.sampled_from([0.0, 0.2, 0.5]),
    gate_margin=st.sampled_from([0.0, 0.2, 1.0]),
    gate_max_take=st.integers(1, 5),
    blend_bands=st.sampled_from([(3, 10), (1, 2), (2, 2)]),
    blend_weights=st.sampled_from([(0.75, 0.6, 0.4), (1.0, 0.0, 0.5), (0.0, 0.0, 0.0)]),
)


@pytest.fixture(scope="module")
def lab(module_index):
    idx, emb = module_index
    return Lab(idx, ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=term_overlap)))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cfg=configs, q=st.sampled_from(QUERIES))
def test_recorded_tables_reproduce_fused_and_final(lab, cfg, q):
    t = lab.query(q, **cfg.to_dict())
    assert t.lists.height > 0 and t.fused.height > 0
    assert_fused_matches_reference(t.fused, t.lists, cfg)
    assert_final_matches_reference(t.final, t.fused, t.rerank, cfg)
    again = finish(blend(candidates(t.fused, cfg.candidate_limit), t.rerank, cfg), cfg)
    assert again.equals(t.final)  # the stages are pure functions of the recorded tables


@pytest.fixture(scope="module")
def base_trace(lab):
    return lab.run_queries(pl.DataFrame({"qid": QUERIES, "text": QUERIES}), progress=False, candidate_limit=6)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cfg=configs)
def test_retune_equals_rerunning(lab, base_trace, cfg):
    base = base_trace
    tuned = retune(base, cfg)
    direct = lab.run_queries(pl.DataFrame({"qid": QUERIES, "text": QUERIES}), progress=False, **cfg.to_dict())
    assert tuned.fused.equals(direct.fused)
    assert tuned.final.equals(direct.final)


def lists_strategy():
    row = st.tuples(
        st.sampled_from(["q1", "q2", "q3"]),
        st.integers(0, 3),
        st.sampled_from(["fts", "vec"]),
        st.sampled_from([f"d{i}" for i in range(8)]),
        st.floats(0.0, 1.0),
        st.sampled_from([1.0, 2.0]),
    )
    return st.lists(row, min_size=0, max_size=40)


def build_lists(rows) -> pl.DataFrame:
    # one entry per (qid, list, doc); ranks follow the scores within each list
    seen, clean = set(), []
    for q, l, src, d, s, w in rows:
        if (q, l, d) not in seen:
            seen.add((q, l, d))
            clean.append((q, l, src, d, s, w))
    df = pl.DataFrame(
        {
            "qid": [r[0] for r in clean],
            "list_id": [r[1] for r in clean],
            "source": [r[2] for r in clean],
            "docno": [r[3] for r in clean],
            "score": [r[4] for r in clean],
            "weight": [r[5] for r in clean],
        },
        schema={
            "qid": pl.String,
            "list_id": pl.Int64,
            "source": pl.String,
            "docno": pl.String,
            "score": pl.Float64,
            "weight": pl.Float64,
        },
    )
    # a list has one source: take the first row's
    df = df.with_columns(source=pl.col("source").first().over(["qid", "list_id"]))
    df = df.with_columns(rank=pl.col("score").rank("ordinal", descending=True).over(["qid", "list_id"]).cast(pl.Int64))
    return df.with_columns(
        query_type=pl.lit("original"),
        subquery=pl.lit("s"),
        chunk_id=pl.lit(None, pl.Int64),
        backend_score=pl.col("score"),
    ).select([pl.col(c).cast(t) for c, t in SCHEMAS["lists"].items()])


@settings(max_examples=60, deadline=None)
@given(rows=lists_strategy(), method=st.sampled_from(FUSION_METHODS), seed=st.integers(0, 2**16))
def test_fusion_is_per_query_and_order_free(rows, method, seed):
    cfg = PipelineConfig(fusion=method)
    lists = build_lists(rows)
    whole = fuse(lists, cfg)
    assert_fused_matches_reference(whole, lists, cfg)
    shuffled = fuse(lists.sample(fraction=1.0, shuffle=True, seed=seed), cfg)
    # queries come out in first-seen order; within a query the result is identical
    assert shuffled.sort("qid", maintain_order=True).equals(whole.sort("qid", maintain_order=True))
    for q in lists["qid"].unique().to_list():
        assert fuse(lists.filter(pl.col("qid") == q), cfg).equals(whole.filter(pl.col("qid") == q))
    # ranks are 1..n per query, and scores never increase down the ranking
    for q, part in whole.group_by("qid"):
        assert part["fused_rank"].to_list() == list(range(1, part.height + 1))
        s = part["fused_score"].to_list()
        assert s == sorted(s, reverse=True)

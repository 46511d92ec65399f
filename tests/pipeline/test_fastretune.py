"""FastRetune (numpy slider path) against the polars stages it replaces: the same ``final`` table,
bit for bit, on random traces built to have ties (few documents, repeated scores and ranks, equal
weights), for every fusion and blend method, the rank bonuses, list/candidate limits, the ablation
switches, min score with its fallback probe, a row filter, and rows in any order."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qmdlab.errors import ConfigError
from qmdlab.pipeline.config import BLEND_METHODS, FUSION_METHODS, PipelineConfig
from qmdlab.pipeline.fastretune import FastRetune, sort_order
from qmdlab.pipeline.retune import blend_finish, fuse_candidates, rerank_scores_of
from qmdlab.pipeline.trace import SCHEMAS

KINDS = [
    ("fts", "original"),
    ("vec", "original"),
    ("fts", "lex"),
    ("vec", "vec"),
    ("vec", "hyde"),
    ("phrase", "original"),
    ("fts", "lex"),
]


def random_lists(seed: int, n_queries: int = 5, n_docs: int = 9, shuffle: bool = False):
    """Lists with many exact ties: scores from a 4-value grid, short lists of a few documents."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_queries):
        n_lists = int(rng.integers(1, len(KINDS) + 1))
        for li in range(n_lists):
            source, qt = KINDS[li]
            k = int(rng.integers(1, n_docs + 1))
            docs = rng.choice(n_docs, size=k, replace=False)
            grid = np.array([0.9, 0.5, 0.5, 0.2, -0.1 if source == "vec" else 0.0])
            scores = np.sort(rng.choice(grid, size=k))[::-1]
            for rank, (d, s) in enumerate(zip(docs, scores), 1):
                rows.append(
                    {
                        "qid": f"q{q}",
                        "list_id": li,
                        "source": source,
                        "query_type": qt,
                        "subquery": "s",
                        "docno": f"c/d{d}",
                        "chunk_id": None,
                        "rank": rank,
                        "backend_score": float(s),
                        "score": float(s),
                        "weight": 1.0,
                    }
                )
    lists = pl.DataFrame(rows, schema=SCHEMAS["lists"])
    if shuffle:
        lists = lists.sample(fraction=1.0, shuffle=True, seed=seed)
    pairs = lists.select("qid", "docno").unique(maintain_order=True)
    keep = rng.random(pairs.height) < 0.7
    rr = pairs.filter(pl.Series(keep)).with_columns(
        rerank_score=pl.Series(rng.choice([0.0, 0.3, 0.3, 0.8, 1.0], size=int(keep.sum())))
    )
    return lists, rr


configs = st.builds(
    PipelineConfig,
    fusion=st.sampled_from(FUSION_METHODS),
    blend=st.sampled_from(BLEND_METHODS),
    rrf_k=st.sampled_from([0, 1, 60]),
    weight_lex=st.sampled_from([0.0, 1.0, 2.0]),
    weight_vec=st.sampled_from([1.0, 2.0]),
    weight_original_vec=st.sampled_from([1.0, 2.0]),
    weight_original_phrase=st.sampled_from([0.0, 1.0]),
    bonus_rank1=st.sampled_from([0.0, 0.05, 1.0]),
    bonus_rank23=st.sampled_from([0.0, 0.02]),
    candidate_limit=st.integers(1, 12),
    list_limit=st.integers(1, 10),
    limit=st.integers(1, 12),
    blend_bands=st.sampled_from([(3, 10), (1, 2), (2, 2)]),
    blend_weights=st.sampled_from([(0.75, 0.6, 0.4), (0.5, 0.5, 0.5), (1.0, 0.0, 0.3)]),
    min_score=st.sampled_from([0.0, 0.2, 0.45, 2.0]),
    min_score_fallback=st.sampled_from([0.0, 0.3, 5.0]),
    fallback_max=st.integers(0, 3),
    gate_margin=st.sampled_from([0.0, 0.4, 1.0]),
    gate_max_take=st.integers(1, 4),
    norm_weight_vec=st.sampled_from([0.9, 1.0]),
    vector=st.booleans(),
    hyde=st.booleans(),
    expand=st.booleans(),
    rerank=st.booleans(),
)


def reference(lists: pl.DataFrame, rr: pl.DataFrame, cfg: PipelineConfig) -> pl.DataFrame:
    """The polars path Study.final used before (retune's own stage functions)."""
    scores = rr.select("qid", "docno", "rerank_score")
    return blend_finish(fuse_candidates(lists, cfg)[2], scores if cfg.rerank else None, cfg)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), cfg=configs, shuffle=st.booleans(), filtered=st.booleans())
def test_fast_final_equals_the_polars_stages(seed, cfg, shuffle, filtered):
    lists, rr = random_lists(seed, shuffle=shuffle)
    keep = None
    if filtered:  # a Study lists filter: a mask over the recorded rows
        keep = (lists["rank"] % 3 != 2).to_numpy()
        ref = reference(lists.filter(pl.Series(keep)), rr, cfg)
    else:
        ref = reference(lists, rr, cfg)
    got = FastRetune(lists, rr).final(cfg, keep)
    assert got.schema == ref.schema
    assert got.equals(ref), (cfg.diff(), ref, got)


def test_ties_are_broken_like_polars_and_bonus_counts():
    # two documents with identical contributions: best rank, then docno decide; the rank-1 bonus
    # lifts a single first place over two second places
    rows = [
        ("q", 0, "fts", "original", "c/b", 1, 0.9),
        ("q", 0, "fts", "original", "c/a", 2, 0.5),
        ("q", 1, "vec", "original", "c/a", 1, 0.9),
        ("q", 1, "vec", "original", "c/b", 2, 0.5),
        ("q", 2, "fts", "lex", "c/c", 1, 0.9),
        ("q", 3, "fts", "lex", "c/d", 1, 0.9),
    ]
    lists = (
        pl.DataFrame([dict(zip(["qid", "list_id", "source", "query_type", "docno", "rank", "score"], r)) for r in rows])
        .with_columns(
            subquery=pl.lit("s"), chunk_id=pl.lit(None, pl.Int64), backend_score=pl.col("score"), weight=pl.lit(1.0)
        )
        .select([pl.col(c).cast(t) for c, t in SCHEMAS["lists"].items()])
    )
    fast = FastRetune(lists)
    for cfg in (
        PipelineConfig(rerank=False),
        PipelineConfig(rerank=False, bonus_rank1=0.0, bonus_rank23=0.0),
        PipelineConfig(rerank=False, fusion="rrf"),
    ):
        ref = reference(
            lists, pl.DataFrame(schema={"qid": pl.String, "docno": pl.String, "rerank_score": pl.Float64}), cfg
        )
        assert fast.final(cfg).equals(ref)
    # closed form, default qmd_rrf: a and b both 2/61 + 2/62 (+0.05 bonus); c, d 1/61 + 0.05
    order = fast.final(PipelineConfig(rerank=False))["docno"].to_list()
    assert order == ["c/a", "c/b", "c/c", "c/d"]


def test_unsupported_configs_are_named():
    lists, rr = random_lists(1)
    fast = FastRetune(lists, rr)
    assert fast.unsupported(PipelineConfig()) is None
    assert "learned" in fast.unsupported(PipelineConfig(fusion="learned", learned_model="m.txt"))
    tags = pl.DataFrame({"docno": ["c/d1"], "tags": [["x"]], "hash": ["h"]})
    assert fast.unsupported(PipelineConfig(tags=("x",), tag_lift=2), doc_tags=tags)
    with pytest.raises(ConfigError, match="learned"):
        fast.final(PipelineConfig(fusion="learned", learned_model="m.txt"))
    doubled = pl.concat([lists, lists.head(1)])
    assert "twice" in FastRetune(doubled, rr).unsupported(PipelineConfig())


def test_sort_order_equals_lexsort():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 200))
        g = rng.integers(0, 5, n)
        s = rng.choice([0.5, -0.0, 0.0, 0.25, 1e-300, -2.0], n)
        t = rng.integers(0, 4, n)
        assert sort_order(g, s, t, 4).tolist() == np.lexsort((np.arange(n), t, -s, g)).tolist()
        assert sort_order(g, s).tolist() == np.lexsort((np.arange(n), -s, g)).tolist()


def test_empty_lists():
    lists = pl.DataFrame(schema=SCHEMAS["lists"])
    assert (
        FastRetune(lists)
        .final(PipelineConfig())
        .equals(
            reference(
                lists,
                pl.DataFrame(schema={"qid": pl.String, "docno": pl.String, "rerank_score": pl.Float64}),
                PipelineConfig(),
            )
        )
    )


def test_recorded_rerank_scores_of_a_trace():
    lists, rr = random_lists(7)
    from qmdlab.pipeline.trace import Trace

    trace = Trace(
        lists=lists,
        rerank=rr.with_columns(
            chunk_id=pl.lit(None, pl.Int64), chunk_hash=pl.lit(None, pl.String), cached=pl.lit(True)
        ),
    )
    scores = rerank_scores_of(trace)
    cfg = PipelineConfig(candidate_limit=5)
    assert (
        FastRetune(trace.lists, scores)
        .final(cfg)
        .equals(blend_finish(fuse_candidates(trace.lists, cfg)[2], scores, cfg))
    )

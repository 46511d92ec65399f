"""The plain-Python paths of fuse/blend/finish for small frames (one query of Lab.query) against the
polars paths, frame for frame, on random lists built to have ties, for every fusion and blend
method, content duplicates, the fallback probe, the tag lift, and several queries at once."""

from __future__ import annotations

import contextlib

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qmdlab.pipeline import blend as blend_mod
from qmdlab.pipeline import finish as finish_mod
from qmdlab.pipeline import fuse as fuse_mod
from qmdlab.pipeline.blend import blend
from qmdlab.pipeline.config import BLEND_METHODS, FUSION_METHODS, PipelineConfig
from qmdlab.pipeline.finish import finish
from qmdlab.pipeline.fuse import candidates, fuse
from qmdlab.pipeline.retrieve import ablate, reweight
from qmdlab.pipeline.trace import SCHEMAS

KINDS = [("fts", "original"), ("vec", "original"), ("fts", "lex"), ("vec", "hyde"), ("like", "original")]


@contextlib.contextmanager
def polars_only():
    """Force the polars paths (the reference)."""
    saved = fuse_mod.SMALL_ROWS, blend_mod.SMALL_ROWS, finish_mod.SMALL_ROWS
    fuse_mod.SMALL_ROWS = blend_mod.SMALL_ROWS = finish_mod.SMALL_ROWS = -1
    try:
        yield
    finally:
        fuse_mod.SMALL_ROWS, blend_mod.SMALL_ROWS, finish_mod.SMALL_ROWS = saved


def random_case(seed: int, n_queries: int):
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_queries):
        for li, (source, qt) in enumerate(KINDS[: int(rng.integers(1, len(KINDS) + 1))]):
            k = int(rng.integers(1, 9))
            docs = rng.choice(10, size=k, replace=False)
            scores = np.sort(rng.choice([0.9, 0.5, 0.5, 0.2, -0.1 if source == "vec" else 0.0], size=k))[::-1]
            for rank, (d, s) in enumerate(zip(docs, scores), 1):
                rows.append(
                    {
                        "qid": f"q{(q * 7) % 5}",
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
    pairs = lists.select("qid", "docno").unique(maintain_order=True)
    keep = rng.random(pairs.height) < 0.7
    rr = pairs.filter(pl.Series(keep)).with_columns(
        rerank_score=pl.Series(rng.choice([0.0, 0.3, 0.3, 0.8, 1.0], size=int(keep.sum())))
    )
    doc_tags = pl.DataFrame(
        {
            "docno": [f"c/d{d}" for d in range(10)],
            "tags": [["git"] if d % 3 == 0 else [] for d in range(10)],
            "hash": [None if d == 9 else f"h{d % 6}" for d in range(10)],
        }
    )
    return lists, rr, doc_tags


configs = st.builds(
    PipelineConfig,
    fusion=st.sampled_from(FUSION_METHODS),
    blend=st.sampled_from(BLEND_METHODS),
    rrf_k=st.sampled_from([0, 60]),
    weight_lex=st.sampled_from([0.0, 1.0]),
    weight_original_like=st.sampled_from([0.0, 1.0]),
    bonus_rank1=st.sampled_from([0.0, 0.05]),
    candidate_limit=st.integers(1, 10),
    limit=st.integers(1, 10),
    blend_bands=st.sampled_from([(3, 10), (1, 2)]),
    min_score=st.sampled_from([0.0, 0.3, 0.5, 2.0]),
    min_score_fallback=st.sampled_from([0.0, 0.3, 5.0]),
    fallback_max=st.integers(0, 3),
    gate_margin=st.sampled_from([0.0, 0.5]),
    gate_max_take=st.integers(1, 3),
    dedupe_content=st.booleans(),
    tags=st.sampled_from([(), ("GIT",)]),
    tag_lift=st.integers(0, 2),
    list_limit=st.integers(1, 8),
)


def stages(lists, rr, doc_tags, cfg, with_tags):
    lists = ablate(reweight(lists, cfg), cfg)
    fused = fuse(lists, cfg)
    blended = blend(candidates(fused, cfg.candidate_limit), rr if cfg.rerank else None, cfg)
    return fused, blended, finish(blended, cfg, doc_tags=doc_tags if with_tags else None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n_queries=st.integers(1, 3), cfg=configs, with_tags=st.booleans())
def test_small_paths_equal_polars(seed, n_queries, cfg, with_tags):
    lists, rr, doc_tags = random_case(seed, n_queries)
    got = stages(lists, rr, doc_tags, cfg, with_tags)
    with polars_only():
        ref = stages(lists, rr, doc_tags, cfg, with_tags)
    for name, g, r in zip(("fused", "blended", "final"), got, ref):
        assert g.schema == r.schema, name
        assert g.equals(r), (name, cfg.diff(), r, g)


def test_the_small_paths_run():
    """The comparison above is not polars against itself: a small query takes the plain paths."""
    lists, rr, doc_tags = random_case(1, 1)
    cfg = PipelineConfig()
    seen = []
    targets = ((fuse_mod, "_aggregate_small"), (blend_mod, "_blend_small"), (finish_mod, "_finish_small"))
    originals = {name: getattr(mod, name) for mod, name in targets}
    for mod, name in targets:

        def spy(*a, _orig=originals[name], _name=name, **k):
            seen.append(_name)
            return _orig(*a, **k)

        setattr(mod, name, spy)
    try:
        stages(lists, rr, doc_tags, cfg, True)
    finally:
        for mod, name in targets:
            setattr(mod, name, originals[name])
    assert seen == ["_aggregate_small", "_blend_small", "_finish_small"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n_queries=st.integers(1, 3))
def test_content_duplicates_small_equals_polars(seed, n_queries):
    lists, rr, doc_tags = random_case(seed, n_queries)
    cfg = PipelineConfig()
    blended = blend(candidates(fuse(lists, cfg), cfg.candidate_limit), rr, cfg)
    shuffled = blended.sample(fraction=1.0, shuffle=True, seed=seed)  # rank order must come from final_rank
    got = finish_mod.content_duplicates(shuffled, doc_tags)
    with polars_only():
        ref = finish_mod.content_duplicates(shuffled, doc_tags)
    assert got.equals(ref)

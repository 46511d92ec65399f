"""The numpy stage functions (fuse, candidates, blend, finish over coded lists) against the polars
reference (``tests/pipeline/reference_stages.py``): the same tables, bit for bit, on random lists
built to have ties (few documents, repeated scores and ranks, equal weights), for every fusion and
blend method, the rank bonuses, list/candidate limits, the ablation switches, min score with its
fallback probe, content dedupe, the tag lift, a row filter and rows in any order — through each
way the library calls them: one query's plain columns (``Lab.query``), the frame functions
(``retune``), and lists coded once with a row mask (a tuning ``Study``)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qmdlab.errors import ConfigError
from qmdlab.pipeline import blend as blend_mod
from qmdlab.pipeline import fuse as fuse_mod
from qmdlab.pipeline.blend import blend
from qmdlab.pipeline.coded import CodedLists, Names, scores_for, sort_order
from qmdlab.pipeline.config import BLEND_METHODS, FUSION_METHODS, PipelineConfig
from qmdlab.pipeline.finish import doc_flags, finish
from qmdlab.pipeline.fuse import candidates, contributions, fuse
from qmdlab.pipeline.retune import blend_finish, fuse_candidates, rerank_scores_of, retune
from qmdlab.pipeline.trace import SCHEMAS, Columns, Trace
from tests.pipeline import reference_stages as ref

KINDS = [
    ("fts", "original"),
    ("vec", "original"),
    ("fts", "lex"),
    ("vec", "vec"),
    ("vec", "hyde"),
    ("phrase", "original"),
    ("fts", "lex"),
    ("like", "original"),
]


def random_lists(seed: int, n_queries: int = 5, n_docs: int = 9, shuffle: bool = False):
    """Lists with many exact ties: scores from a 4-value grid, short lists of a few documents;
    rerank scores for most pairs, and doc tags with shared content digests."""
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
    doc_tags = pl.DataFrame(
        {
            "docno": [f"c/d{d}" for d in range(n_docs)],
            "tags": [["Git"] if d % 3 == 0 else [] for d in range(n_docs)],
            "hash": [None if d == n_docs - 1 else f"h{d % 5}" for d in range(n_docs)],
        }
    )
    return lists, rr, doc_tags


configs = st.builds(
    PipelineConfig,
    fusion=st.sampled_from(FUSION_METHODS),
    blend=st.sampled_from(BLEND_METHODS),
    rrf_k=st.sampled_from([0, 1, 60]),
    weight_lex=st.sampled_from([0.0, 1.0, 2.0]),
    weight_vec=st.sampled_from([1.0, 2.0]),
    weight_original_vec=st.sampled_from([1.0, 2.0]),
    weight_original_phrase=st.sampled_from([0.0, 1.0]),
    weight_original_like=st.sampled_from([0.0, 1.0]),
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
    dedupe_content=st.booleans(),
    tags=st.sampled_from([(), ("GIT",)]),
    tag_lift=st.integers(0, 2),
    vector=st.booleans(),
    hyde=st.booleans(),
    expand=st.booleans(),
    rerank=st.booleans(),
)


def assert_same(got: pl.DataFrame, want: pl.DataFrame, what: str, cfg: PipelineConfig) -> None:
    assert got.schema == want.schema, what
    assert got.equals(want), (what, cfg.diff(), want, got)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n_queries=st.integers(1, 5),
    cfg=configs,
    shuffle=st.booleans(),
    filtered=st.booleans(),
    with_tags=st.booleans(),
)
def test_stage_functions_equal_the_polars_reference(seed, n_queries, cfg, shuffle, filtered, with_tags):
    lists, rr, doc_tags = random_lists(seed, n_queries, shuffle=shuffle)
    tags = doc_tags if with_tags else None
    scores = rr if cfg.rerank else None
    keep = (lists["rank"] % 3 != 2).to_numpy() if filtered else None
    recorded = lists.filter(pl.Series(keep)) if keep is not None else lists
    want_lists, want_fused, want_cands = ref.fuse_candidates(recorded, cfg)
    want_final = ref.blend_finish(want_cands, scores, cfg, doc_tags=tags)

    # the frame functions (retune's, a study's with fast = False)
    got_lists, got_fused, got_cands = fuse_candidates(recorded, cfg)
    assert_same(got_lists, want_lists, "lists", cfg)
    assert_same(got_fused, want_fused, "fused", cfg)
    assert_same(got_cands, want_cands, "candidates", cfg)
    assert_same(blend_finish(got_cands, scores, cfg, doc_tags=tags), want_final, "final", cfg)
    assert_same(blend(got_cands, scores, cfg), ref.blend(want_cands, scores, cfg), "blended", cfg)

    # lists coded once, a row mask, the arrays end to end (a study's slider path)
    coded = CodedLists(lists)
    f = fuse(coded, cfg, active=coded.active(cfg, keep), weight=coded.weights(cfg))
    assert_same(coded.fused_table(f, frame=True), want_fused, "coded fused", cfg)
    c = candidates(f, cfg.candidate_limit)
    vals, has = coded.pair_values(rr, "rerank_score")
    done = finish(
        blend(c, (vals[c.pair], has[c.pair]) if cfg.rerank else None, cfg), cfg, doc_flags(tags, coded.docnos, cfg)
    )
    assert_same(coded.final_table(done, frame=True), want_final, "coded final", cfg)

    # each query alone from plain columns (Lab.query: recorded weights, nothing ablated)
    for (qid,), part in want_lists.group_by("qid", maintain_order=True):
        one = CodedLists(Columns({k: part[k].to_list() for k in SCHEMAS["lists"]}))
        f1 = fuse(one, cfg)
        want1 = ref.fuse(part, cfg)
        assert_same(one.fused_table(f1, frame=False).frame("fused"), want1, "one query fused", cfg)
        c1 = candidates(f1, cfg.candidate_limit)
        docs1 = one.docnos.take(c1.doc)
        rows = Columns({k: rr.filter(pl.col("qid") == qid)[k].to_list() for k in rr.columns})
        got1 = finish(
            blend(c1, scores_for([qid] * len(docs1), docs1, rows) if cfg.rerank else None, cfg),
            cfg,
            doc_flags(tags, one.docnos, cfg),
        )
        want1f = ref.blend_finish(ref.candidates(want1, cfg.candidate_limit), scores, cfg, doc_tags=tags)
        assert_same(one.final_table(got1, frame=False).frame("final"), want1f, "one query final", cfg)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), cfg=configs)
def test_contributions_equal_the_reference(seed, cfg):
    lists, _, _ = random_lists(seed, 3, shuffle=True)
    got, want = contributions(lists, cfg), ref.contributions(lists, cfg)
    assert got.columns == want.columns and got.drop("contribution").equals(want.drop("contribution"))
    assert np.array_equal(got["contribution"].to_numpy(), want["contribution"].to_numpy())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), cfg=configs, shuffle=st.booleans())
def test_retune_equals_the_reference(seed, cfg, shuffle):
    lists, rr, doc_tags = random_lists(seed, 4, shuffle=shuffle)
    rerank = rr.with_columns(chunk_id=pl.lit(None, pl.Int64), chunk_hash=pl.lit(None, pl.String), cached=pl.lit(True))
    trace = Trace(lists=lists, rerank=rerank.select(list(SCHEMAS["rerank"])))
    out = retune(trace, cfg, doc_tags=doc_tags)
    want_lists, want_fused, want_cands = ref.fuse_candidates(lists, cfg)
    scores = rerank_scores_of(trace) if cfg.rerank else None
    assert_same(out.lists, want_lists, "lists", cfg)
    assert_same(out.fused, want_fused, "fused", cfg)
    assert_same(out.final, ref.blend_finish(want_cands, scores, cfg, doc_tags=doc_tags), "final", cfg)


def test_finish_of_frames_with_duplicates_and_rows_out_of_order():
    f = pl.DataFrame(
        {
            "qid": ["b", "a", "b", "a", "b"],
            "docno": ["x", "y", "x", "z", "w"],
            "final_score": [0.3, 0.9, 0.8, 0.1, 0.5],
            "final_rank": [3, 1, 1, 2, 2],
        }
    )
    tags = pl.DataFrame(
        {"docno": ["w", "x", "y", "z"], "tags": [["t"], [], ["t"], ["T"]], "hash": ["h", "h", "g", None]}
    )
    for cfg in (
        PipelineConfig(limit=5),
        PipelineConfig(limit=2, dedupe_content=True, tags=("t",), tag_lift=1),
        PipelineConfig(min_score=0.95, min_score_fallback=0.9, fallback_max=1),
    ):
        assert_same(finish(f, cfg, doc_tags=tags), ref.finish(f, cfg, doc_tags=tags), "finish", cfg)


def test_ties_are_broken_like_the_reference_and_the_bonus_counts():
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
    for cfg in (
        PipelineConfig(rerank=False),
        PipelineConfig(rerank=False, bonus_rank1=0.0, bonus_rank23=0.0),
        PipelineConfig(rerank=False, fusion="rrf"),
    ):
        _, fused, cands = fuse_candidates(lists, cfg)
        assert fused.equals(ref.fuse_candidates(lists, cfg)[1])
        assert blend_finish(cands, None, cfg).equals(ref.blend_finish(ref.candidates(fused, 40), None, cfg))
    # closed form, default qmd_rrf: a and b both 2/61 + 2/62 (+0.05 bonus); c, d 1/61 + 0.05
    _, _, cands = fuse_candidates(lists, PipelineConfig(rerank=False))
    assert blend_finish(cands, None, PipelineConfig())["docno"].to_list() == ["c/a", "c/b", "c/c", "c/d"]


def test_a_list_holding_a_document_twice_counts_once():
    lists, _, _ = random_lists(5, 1)
    doubled = pl.concat([lists, lists.head(1)])
    got = fuse(doubled, PipelineConfig(fusion="combmnz"))
    want = ref.fuse(doubled, PipelineConfig(fusion="combmnz"))
    assert (
        got.select("qid", "docno", "n_lists").sort("docno").equals(want.select("qid", "docno", "n_lists").sort("docno"))
    )
    assert np.allclose(got.sort("docno")["fused_score"], want.sort("docno")["fused_score"], rtol=1e-12, atol=0)


def test_empty_lists():
    lists = pl.DataFrame(schema=SCHEMAS["lists"])
    for name in FUSION_METHODS:
        cfg = PipelineConfig(fusion=name)
        _, fused, cands = fuse_candidates(lists, cfg)
        assert fused.equals(ref.fuse_candidates(lists, cfg)[1])
        assert blend_finish(cands, None, cfg).equals(ref.blend_finish(cands, None, cfg))
    one = CodedLists(Columns.empty("lists"))
    assert len(fuse(one, PipelineConfig()).query) == 0
    assert retune(Trace(lists=lists), PipelineConfig()).final.height == 0


def test_a_method_is_one_entry_of_one_table():
    assert tuple(fuse_mod.METHODS) == FUSION_METHODS
    assert tuple(blend_mod.METHODS) == BLEND_METHODS
    lists, _, _ = random_lists(1, 2)
    coded = CodedLists(lists)
    for bad in ("borda", "learned"):
        with pytest.raises(ConfigError, match="unknown fusion method"):
            fuse_mod.method(bad)
    with pytest.raises(ConfigError, match="unknown blend method"):
        blend_mod.method("borda")
    # a new method: a function and its entry; the rest of the stage is shared
    fuse_mod.METHODS["first_list"] = lambda rows, config: fuse_mod.Terms(np.where(rows.lst == rows.lst.min(), 1.0, 0.0))
    try:
        cfg = PipelineConfig()
        object.__setattr__(cfg, "fusion", "first_list")  # the config's validation knows the shipped methods only
        got = fuse(coded, cfg)
        assert len(got.query) and set(got.fused_score.tolist()) <= {0.0, 1.0}
    finally:
        del fuse_mod.METHODS["first_list"]


def test_sort_order_equals_lexsort():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 200))
        g = rng.integers(0, 5, n)
        s = rng.choice([0.5, -0.0, 0.0, 0.25, 1e-300, -2.0], n)
        t = rng.integers(0, 4, n)
        assert sort_order(g, s, t, 4).tolist() == np.lexsort((np.arange(n), t, -s, g)).tolist()
        assert sort_order(g, s).tolist() == np.lexsort((np.arange(n), -s, g)).tolist()


def test_codes_of_frames_and_columns_agree():
    lists, _, _ = random_lists(11, 4, shuffle=True)
    a = CodedLists(lists)
    b = CodedLists(Columns({k: lists[k].to_list() for k in SCHEMAS["lists"]}))
    assert a.qids.list == b.qids.list == lists["qid"].unique(maintain_order=True).to_list()
    assert a.docnos.list == b.docnos.list == sorted(set(lists["docno"].to_list()))
    for name in ("row", "query", "doc", "pair", "list_id", "lst", "rank", "score", "weight", "vec", "offsets"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert {a.kinds[k] for k in a.kind.tolist()} == {b.kinds[k] for k in b.kind.tolist()}
    assert Names(["é", "z", "Z", "東"]).series.sort().to_list() == sorted(["é", "z", "Z", "東"])

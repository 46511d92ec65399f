"""CodedScorer (the slider path's metrics) against qmdlab.eval.metrics.Scorer and ranx.evaluate, and
Study's slider path (lists coded once) against its frame path (coded anew each call), on random
traces with ties."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from qmdlab.eval.fastmetrics import CodedScorer
from qmdlab.eval.metrics import Scorer, ranx_qrels, ranx_run
from qmdlab.eval.study import Study
from qmdlab.pipeline.blend import blend
from qmdlab.pipeline.coded import CodedLists
from qmdlab.pipeline.config import BLEND_METHODS, FUSION_METHODS, PipelineConfig
from qmdlab.pipeline.finish import finish
from qmdlab.pipeline.fuse import candidates, fuse
from qmdlab.pipeline.trace import SCHEMAS, Trace

METRICS = ["ndcg@10", "ndcg@3", "ndcg_burges@5", "mrr@10", "recall@10", "recall", "p@5", "p", "ndcg"]


def random_trace(seed: int, n_queries: int = 12, n_docs: int = 15):
    rng = np.random.default_rng(seed)
    kinds = [("fts", "original"), ("vec", "original"), ("fts", "lex"), ("vec", "hyde")]
    rows = []
    for q in range(n_queries):
        for li, (source, qt) in enumerate(kinds[: int(rng.integers(1, 5))]):
            k = int(rng.integers(1, 12))
            docs = rng.choice(n_docs, size=k, replace=False)
            scores = np.sort(rng.choice([0.9, 0.6, 0.6, 0.3], size=k))[::-1]
            for rank, (d, s) in enumerate(zip(docs, scores), 1):
                rows.append(
                    {
                        "qid": f"q{q:02d}",
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
    rerank = pairs.with_columns(
        chunk_id=pl.lit(None, pl.Int64),
        chunk_hash=pl.lit(None, pl.String),
        rerank_score=pl.Series(rng.choice([0.1, 0.5, 0.5, 0.9], pairs.height)),
        cached=pl.lit(True),
    )
    # qrels: some judged queries have no lists (score 0), some judged documents never retrieved,
    # grades 0..3 (0 = judged not relevant)
    qrels = pl.DataFrame(
        [
            (f"q{q:02d}", f"c/d{d}", int(rng.integers(0, 4)))
            for q in range(n_queries + 2)
            for d in rng.choice(n_docs, 4, replace=False)
        ],
        schema=["qid", "docno", "grade"],
        orient="row",
    )
    return Trace(lists=lists, rerank=rerank), qrels


CONFIGS = (
    [PipelineConfig(), PipelineConfig(rerank=False), PipelineConfig(limit=3, candidate_limit=4)]
    + [PipelineConfig(fusion=m, blend=b) for m in FUSION_METHODS for b in BLEND_METHODS[:2]]
    + [PipelineConfig(min_score=0.7, min_score_fallback=0.3, fallback_max=2, expand=False)]
)


@pytest.mark.parametrize("seed", range(4))
def test_coded_scorer_equals_scorer(seed):
    trace, qrels = random_trace(seed)
    scores = trace.rerank.select("qid", "docno", "rerank_score")
    lists = CodedLists(trace.lists)
    vals, has = lists.pair_values(scores, "rerank_score")
    scorer = Scorer(qrels, METRICS)
    coded = CodedScorer(scorer, lists)
    assert coded.reason is None
    for cfg in CONFIGS:
        c = candidates(fuse(lists, cfg, active=lists.active(cfg), weight=lists.weights(cfg)), cfg.candidate_limit)
        ranked = finish(blend(c, (vals[c.pair], has[c.pair]) if cfg.rerank else None, cfg), cfg)
        expected = scorer.score(lists.final_table(ranked, frame=True).rename({"final_rank": "rank"}))
        got = coded.per_query(ranked)
        assert got["qid"].to_list() == expected["qid"].to_list()
        for m in METRICS:
            np.testing.assert_allclose(got[m].to_numpy(), expected[m].to_numpy(), rtol=0, atol=1e-12, err_msg=m)


@pytest.mark.slow  # ranx's numba kernels load/compile for seconds on a busy machine
@pytest.mark.parametrize("seed", range(3))
def test_study_fast_path_matches_ranx_and_the_frame_path(seed):
    import ranx

    trace, qrels = random_trace(seed)
    study = Study(trace, qrels, metrics=["ndcg@10", "mrr@10", "recall@10"])
    rq = ranx_qrels(qrels)
    for cfg in CONFIGS:
        fast_eval = study.evaluate(cfg)
        fast_score = study.score(cfg, "ndcg@10")
        study.fast = False
        ref = study.evaluate(cfg)
        study.fast = True
        assert fast_eval.final.equals(ref.final)
        assert fast_eval.unscored == ref.unscored
        for m in study.metrics:
            assert fast_eval.metrics[m] == pytest.approx(ref.metrics[m], abs=1e-9)
        assert fast_score == pytest.approx(ref.metrics["ndcg@10"], abs=1e-9)
        # ranx scores the fast path's ranking (ties included: positions, not scores) the same way;
        # ranx averages over the queries of its run ∩ qrels, so compare per query
        run = ranx_run(fast_eval.final.rename({"final_rank": "rank"}))
        per_q = ranx.evaluate(rq, run, "ndcg@10", return_mean=False, make_comparable=True)
        ranx_q = dict(zip(rq.keys(), per_q))
        ours = dict(zip(fast_eval.per_query["qid"].to_list(), fast_eval.per_query["ndcg@10"].to_list()))
        for q, v in ranx_q.items():
            assert ours[q] == pytest.approx(float(v), abs=1e-9), (cfg.diff(), q)
    # plain RRF without rerank: ranx's own fusion + evaluation gives the same nDCG@10 per query
    # wherever no two fused scores tie (so the tie-break cannot differ); ranx needs every run to
    # hold the same queries: those with all four lists
    cfg = PipelineConfig(fusion="rrf", rerank=False, candidate_limit=10_000, limit=10)
    full = trace.lists.group_by("qid").agg(pl.col("list_id").n_unique().alias("n")).filter(pl.col("n") == 4)
    qs = set(full["qid"].to_list())
    runs = []
    for lid in range(4):
        d: dict = {}
        for q, doc, s in (
            trace.lists.filter((pl.col("list_id") == lid) & pl.col("qid").is_in(qs))
            .select("qid", "docno", "score")
            .iter_rows()
        ):
            d.setdefault(q, {})[doc] = s
        runs.append(ranx.Run(d, name=f"l{lid}"))
    fused = ranx.fuse(runs, method="rrf", params={"k": 60}).to_dict()
    untied = sorted(q for q, docs in fused.items() if len(set(docs.values())) == len(docs))
    ours = study.evaluate(cfg).per_query
    ours = dict(zip(ours["qid"].to_list(), ours["ndcg@10"].to_list()))
    checked = 0
    for q in untied:
        judged = {d: g for qq, d, g in qrels.filter(pl.col("qid") == q).iter_rows()}
        if not any(g >= 1 for g in judged.values()):
            continue
        theirs = ranx.evaluate(ranx.Qrels({q: judged}), ranx.Run({q: fused[q]}), "ndcg@10")
        assert ours[q] == pytest.approx(float(theirs), abs=1e-9), q
        checked += 1
    assert checked >= 1  # the seeds are chosen so that some judged query has no tie


def test_duplicate_judgements_fall_back_to_the_frame_scorer():
    trace, qrels = random_trace(0)
    doubled = pl.concat([qrels, qrels.filter(pl.col("grade") >= 1).head(1)])
    study = Study(trace, doubled, metrics=["ndcg@10"])
    study.fast = False
    ref = study.evaluate(PipelineConfig())
    study.fast = True
    assert study.evaluate(PipelineConfig()).metrics == ref.metrics
    assert CodedScorer(study.scorer, CodedLists(trace.lists)).reason

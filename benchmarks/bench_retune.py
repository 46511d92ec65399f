"""Benchmark: retune (re-fuse + candidates + re-blend + finish) of many recorded queries.

Builds a synthetic trace of Q queries × L lists × H hits with rerank scores for the
candidates, then times :func:`qmdlab.retune` under a changed config against a
baseline measured in the same run: ranx's numba RRF fusing the same lists (fusion
only, no candidates/blend; its JIT warm-up is excluded). Prints medians and the ratio.
Target: 300 × 8 × 20 well under 50 ms. A benchmark, not a test.

    .venv/bin/python benchmarks/bench_retune.py [--queries 300 --lists 8 --hits 20 --reps 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import polars as pl

from qmdlab.pipeline.blend import blend
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.finish import finish
from qmdlab.pipeline.fuse import candidates, fuse
from qmdlab.pipeline.retune import retune
from qmdlab.pipeline.trace import SCHEMAS, Trace

TYPES = [
    ("fts", "original"),
    ("vec", "original"),
    ("fts", "lex"),
    ("fts", "lex"),
    ("vec", "vec"),
    ("vec", "vec"),
    ("vec", "hyde"),
    ("vec", "hyde"),
]


def synthetic_trace(n_queries: int, n_lists: int, n_hits: int, n_docs: int = 2000, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    cfg = PipelineConfig()
    cols: dict[str, list] = {c: [] for c in SCHEMAS["lists"]}
    for q in range(n_queries):
        for li in range(n_lists):
            source, qt = TYPES[li % len(TYPES)]
            docs = rng.choice(n_docs, size=n_hits, replace=False)
            scores = np.sort(rng.random(n_hits))[::-1]
            for rank, (d, s) in enumerate(zip(docs, scores), 1):
                cols["qid"].append(f"q{q}")
                cols["list_id"].append(li)
                cols["source"].append(source)
                cols["query_type"].append(qt)
                cols["subquery"].append(f"sub {li}")
                cols["docno"].append(f"d{d}")
                cols["chunk_id"].append(int(d))
                cols["rank"].append(rank)
                cols["backend_score"].append(float(s))
                cols["score"].append(float(s))
                cols["weight"].append(cfg.list_weight(source, qt))
    lists = pl.DataFrame(cols, schema=SCHEMAS["lists"])
    fused = fuse(lists, cfg)
    # rerank scores for the top 60 fused documents (what a lab run with candidate_limit=60 records)
    docs = fused.filter(pl.col("fused_rank") <= 60).select("qid", "docno")
    rerank = docs.with_columns(
        chunk_id=pl.lit(None, pl.Int64),
        chunk_hash=pl.lit(None, pl.String),
        rerank_score=pl.Series(rng.random(docs.height)),
        cached=pl.lit(True),
    )
    final = finish(blend(candidates(fused, cfg.candidate_limit), rerank, cfg), cfg)
    return Trace(lists=lists, fused=fused, rerank=rerank, final=final, config=cfg.to_dict())


def median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--lists", type=int, default=8)
    ap.add_argument("--hits", type=int, default=20)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    trace = synthetic_trace(args.queries, args.lists, args.hits)
    new = PipelineConfig(weight_lex=1.5, rrf_k=40, blend_weights=(0.6, 0.5, 0.3))
    retune(trace, new)  # warm-up (polars plan caches)
    ours = median_ms(lambda: retune(trace, new), args.reps)

    from ranx import Run
    from ranx.fusion import rrf as ranx_rrf

    runs = []
    for li in range(args.lists):
        part = trace.lists.filter(pl.col("list_id") == li)
        d: dict[str, dict[str, float]] = {}
        for q, doc, s in part.select("qid", "docno", "score").iter_rows():
            d.setdefault(q, {})[doc] = s
        runs.append(Run(d))
    ranx_rrf(runs, k=60)  # JIT warm-up
    base = median_ms(lambda: ranx_rrf(runs, k=60), args.reps)
    n = trace.lists.height
    print(f"rows: {n} ({args.queries} queries × {args.lists} lists × {args.hits} hits)")
    print(f"qmdlab retune (fuse + candidates + blend + finish), median of {args.reps}: {ours:.1f} ms")
    print(f"ranx.fusion.rrf (fusion only), median of {args.reps}:                 {base:.1f} ms")
    print(f"ratio retune / ranx rrf: {ours / base:.2f}")


if __name__ == "__main__":
    main()

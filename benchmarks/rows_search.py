"""Benchmark rows: BM25 (against raw FTS5 and bm25s) and exact vector search (against numpy)."""

from __future__ import annotations

import gc
import os
import shutil
import sqlite3
import time

# On a machine whose cores are already busy, OpenBLAS's (and llama.cpp's OpenMP) worker threads
# spin-wait for each other: a 2-thread matvec or decode then runs several times slower, and
# erratically. One BLAS thread and passive OpenMP waiting keep the timings stable; the stage and
# its raw baseline always run under the same setting. Export the variables to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

from benchmarks.harness import (
    Row,
    Work,
    add,
    bench_data,
    fmt,
    paired,
    paired_units,
    ratio_row,
    skip,
    timed,
)


def bench_bm25(w: Work, sz: dict) -> None:
    from qmdlab.search import bm25_search, build_fts_query
    from qmdlab.search.lexical import BM25_WEIGHTS

    queries = w.corpus.queries(sz["queries"])
    weights = ", ".join(str(x) for x in BM25_WEIGHTS)
    raw_sql = (
        f"SELECT rowid, bm25(documents_fts, {weights}) AS s FROM documents_fts "
        "WHERE documents_fts MATCH ? ORDER BY s LIMIT 20"
    )
    for n in sz["bm25"]:
        idx, _, nbytes, _ = w.index(n)
        built = [build_fts_query(q, "or") for q in queries]
        conn = sqlite3.connect(idx.db_path)  # a bare connection: the engine without qmdlab

        stage = [lambda q=q: bm25_search(idx, q, limit=20, mode="or") for q in queries]
        raw = [lambda fq=fq: conn.execute(raw_sql, (fq,)).fetchall() for fq in built]
        s, b = paired_units(stage, raw, sz["repeats"])
        hits = sum(
            conn.execute("SELECT count(*) FROM documents_fts WHERE documents_fts MATCH ?", (fq,)).fetchone()[0]
            for fq in built
        ) / len(built)
        ratio_row(
            "bm25",
            "bm25_search vs raw FTS5 bm25() SQL",
            f"{n:,} docs, {len(queries)} q",
            s / len(queries),
            b / len(queries),
            1.25,
            note=f"OR mode, top 20; mean {hits:,.0f} matching docs/query",
            matches=hits,
        )
        conn.close()


def bench_bm25s(w: Work, sz: dict) -> None:
    try:
        import bm25s
    except ImportError:
        skip("bm25s", "bm25s queries/s", "bm25s not installed (pip install bm25s)")
        return
    from qmdlab.search import bm25_search

    n = max(sz["bm25"])
    idx, root, _, _ = w.index(n)
    queries = w.corpus.queries(sz["queries"])
    texts = [t for _, t in w.corpus.documents(n)]
    t0 = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    t_index = time.perf_counter() - t0

    def ours():
        for q in queries:
            bm25_search(idx, q, limit=20, mode="or")

    def theirs():  # one query at a time, as a search box issues them (tokenising included)
        for q in queries:
            retriever.retrieve(
                bm25s.tokenize([q], stopwords="en", show_progress=False), k=20, show_progress=False, n_threads=1
            )

    s, b = paired(ours, theirs, sz["repeats"])
    qs, qb = len(queries) / s, len(queries) / b
    add(
        Row(
            "bm25s",
            "BM25 queries/s: qmdlab (FTS5) vs bm25s",
            f"{n:,} docs, {len(queries)} q",
            qs,
            qb,
            "/s",
            qs / qb,
            "qmdlab/bm25s",
            "compare",
            "info",
            f"bm25s {bm25s.__version__}, no stemmer, 1 query per call; bm25s indexing {t_index:.2f} s",
        )
    )


def bench_vector(w: Work, sz: dict) -> None:
    from qmdlab.search import vector_search

    bw = copy_bandwidth()
    rng = np.random.default_rng(1)
    for n, dim in sz["vector"]:
        fp = f"bench:{dim}"
        idx, vm, load_s, ndocs = bench_data.build_vector_index(w.dir / f"vec{n}x{dim}", n, dim, fp)
        m = vm.matrix
        qs = [rng.standard_normal(dim).astype(np.float32) for _ in range(sz["vec_queries"])]
        qs = [q / np.linalg.norm(q) for q in qs]

        def raw_one(q, m=m):
            s = m @ q
            p = np.argpartition(-s, 19)[:20]
            return p[np.argsort(-s[p])]

        stage = [lambda q=q, idx=idx, fp=fp: vector_search(idx, q, fingerprint=fp, limit=20) for q in qs]
        raw = [lambda q=q: raw_one(q) for q in qs]
        s, b = paired_units(stage, raw, sz["repeats"])
        floor = m.nbytes / bw
        ratio_row(
            "vector",
            "vector_search vs numpy matvec+argpartition",
            f"{n:,}×{dim} ({ndocs:,} docs)",
            s / len(qs),
            b / len(qs),
            1.25,
            note=f"bandwidth floor {fmt(floor, 's')} ({m.nbytes / 2**20:.0f} MiB at {bw / 1e9:.1f} GB/s); "
            f"raw = {b / len(qs) / floor:.1f}× floor; matrix load {load_s:.2f} s",
            floor_s=floor,
            copy_bandwidth=bw,
            matrix_bytes=m.nbytes,
            load_s=load_s,
        )
        idx.close()
        del idx, vm, m
        shutil.rmtree(w.dir / f"vec{n}x{dim}", ignore_errors=True)
        gc.collect()


def copy_bandwidth(nbytes: int = 256 * 2**20) -> float:
    """Memory copy bandwidth in bytes/s, STREAM convention (bytes read + bytes written)."""
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    np.copyto(b, a)
    t = timed(lambda: np.copyto(b, a), 5, warmup=1)
    return 2 * a.nbytes / t

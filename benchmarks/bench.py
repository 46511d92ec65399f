#!/usr/bin/env python
"""qmdlab benchmarks: every stage against the bare engine underneath it, measured in one run.

Usage::

    python benchmarks/bench.py            # full sizes (several minutes; `make bench`)
    python benchmarks/bench.py --quick    # smaller sizes: minutes, mostly ranx's numba JIT, model
                                       # loads and corpus builds (longer on a busy machine)
    python benchmarks/bench.py --only bm25,vector --out results/bench

Each row times a qmdlab stage and its baseline in the same process, alternating the two
(A B B A …; per query for the BM25 and vector rows) after a warm-up, and reports the medians
and their ratio, the goal and ``meets``/``misses``; ratio rows also note the ratio of
the fastest repeats, the figure least disturbed by other processes on a shared machine.
Model rows are ``skipped`` with the reason when ``llama_cpp`` or the
offline models are absent (``qmdlab pull --preset offline``). Rows without a goal in the issue
are ``info``. The table is printed and written as JSON and markdown under ``--out``
(default ``results/bench``; ``latest.json``/``latest.md`` are the newest run).

Groups (``--only``/``--skip``): bm25, bm25s, vector, retune, update, build, embed, rerank,
expand, query, cli, memory. Absolute times are noisy on a shared machine; the ratios are the result.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import hashlib
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# On a machine whose cores are already busy, OpenBLAS's (and llama.cpp's OpenMP) worker threads
# spin-wait for each other: a 2-thread matvec or decode then runs several times slower, and
# erratically. One BLAS thread and passive OpenMP waiting keep the timings stable; the stage and
# its raw baseline always run under the same setting. Export the variables to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (str(ROOT), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

import bench_data  # noqa: E402

GROUPS = ("bm25", "bm25s", "vector", "retune", "update", "build", "embed", "rerank", "expand", "query", "cli", "memory")
THREADS = 2  # llama.cpp threads: the machine has 2 cores

# sizes per mode; "smoke" is for the test that only proves the script runs
SIZES: dict[str, dict[str, Any]] = {
    "smoke": dict(
        bm25=[200],
        queries=10,
        vector=[(2000, 64)],
        vec_queries=5,
        retune_queries=30,
        update=200,
        embed_texts=4,
        rerank_texts=2,
        query_docs=20,
        memory_docs=200,
        repeats=3,
        text_chars=400,
        offline_candidates=3,
        rerank_batch_texts=2,
        rerank_seqs=2,
        expand_queries=1,
        embed_short=8,
    ),
    "quick": dict(
        bm25=[1000, 5000],
        queries=40,
        vector=[(10000, 384), (10000, 768)],
        vec_queries=20,
        retune_queries=300,
        update=2000,
        embed_texts=6,
        rerank_texts=2,
        query_docs=30,
        memory_docs=2000,
        repeats=5,
        text_chars=300,
        offline_candidates=3,
        rerank_batch_texts=8,
        rerank_seqs=4,
        expand_queries=2,
        embed_short=64,
    ),
    "full": dict(
        bm25=[1000, 10000, 50000],
        queries=100,
        vector=[(n, d) for n in (10000, 50000, 200000) for d in (384, 768)],
        vec_queries=30,
        retune_queries=300,
        update=10000,
        embed_texts=16,
        rerank_texts=4,
        query_docs=60,
        memory_docs=10000,
        repeats=7,
        text_chars=600,
        offline_candidates=5,
        rerank_batch_texts=16,
        rerank_seqs=8,
        expand_queries=3,
        embed_short=128,
    ),
}


# ---------------------------------------------------------------------------- rows and timing
@dataclass
class Row:
    group: str
    name: str
    size: str
    value: float | None = None  # qmdlab's measurement (unit below)
    base: float | None = None  # the bare engine's, same unit
    unit: str = "s"  # "s" (time per op), "/s" (throughput), "MiB", "calls"
    ratio: float | None = None
    ratio_kind: str = ""  # e.g. "qmdlab/raw", "raw/qmdlab", "speed-up"
    goal: str = ""
    status: str = "info"  # meets | misses | info | skipped
    note: str = ""
    extra: dict = field(default_factory=dict)


ROWS: list[Row] = []


def add(row: Row) -> Row:
    ROWS.append(row)
    print(
        f"  {row.status:7s} {row.group}: {row.name} [{row.size}] {fmt(row.value, row.unit)}"
        f" vs {fmt(row.base, row.unit)} {fmt_ratio(row)} ({row.goal}) {row.note}",
        flush=True,
    )
    return row


def skip(group: str, name: str, reason: str) -> None:
    add(Row(group, name, "-", status="skipped", goal="-", note=reason))


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        if v >= 1:
            return f"{v:.2f} s"
        if v >= 1e-3:
            return f"{v * 1e3:.2f} ms"
        return f"{v * 1e6:.1f} µs"
    if unit == "/s":
        return f"{v:,.1f}/s" if v < 100 else f"{v:,.0f}/s"
    if unit == "MiB":
        return f"{v:,.0f} MiB"
    if unit == "calls":
        return f"{int(v)} calls"
    return f"{v:.3g} {unit}"


def fmt_ratio(row: Row) -> str:
    return "-" if row.ratio is None else f"{row.ratio:.2f}×"


def paired(a: Callable[[], Any], b: Callable[[], Any], repeats: int, warmup: int = 1) -> tuple[float, float]:
    """Median seconds of ``a`` and ``b``, alternated (a b, b a, …) after ``warmup`` rounds."""
    for _ in range(warmup):
        a()
        b()
    ta: list[float] = []
    tb: list[float] = []
    gc.collect()
    for i in range(repeats):
        for which in (0, 1) if i % 2 == 0 else (1, 0):
            f = a if which == 0 else b
            t0 = time.perf_counter()
            f()
            (ta if which == 0 else tb).append(time.perf_counter() - t0)
    LAST_MINS[:] = [min(ta), min(tb)]
    return statistics.median(ta), statistics.median(tb)


def paired_units(
    a: list[Callable[[], Any]], b: list[Callable[[], Any]], repeats: int, warmup: int = 1
) -> tuple[float, float]:
    """Like :func:`paired` for batches of small units (one query each): ``a[i]`` and ``b[i]``
    run back to back (order flipped each time), so both sides of a unit see the same machine
    load. Returns the median over repeats of each side's total; ``LAST_MINS`` gets the sum over
    units of each unit's fastest repeat (the undisturbed cost on a busy machine)."""
    n = len(a)
    for _ in range(warmup):
        for f, g in zip(a, b):
            f()
            g()
    ta = np.zeros((repeats, n))
    tb = np.zeros((repeats, n))
    gc.collect()
    pc = time.perf_counter
    for r in range(repeats):
        for i in range(n):
            if (r + i) % 2 == 0:
                t0 = pc()
                a[i]()
                t1 = pc()
                b[i]()
                t2 = pc()  # noqa: E702
                ta[r, i], tb[r, i] = t1 - t0, t2 - t1
            else:
                t0 = pc()
                b[i]()
                t1 = pc()
                a[i]()
                t2 = pc()  # noqa: E702
                tb[r, i], ta[r, i] = t1 - t0, t2 - t1
    LAST_MINS[:] = [float(ta.min(axis=0).sum()), float(tb.min(axis=0).sum())]
    return float(np.median(ta.sum(axis=1))), float(np.median(tb.sum(axis=1)))


LAST_MINS: list[float] = [0.0, 0.0]  # the fastest repeat of the latest ``paired`` (robust to a busy machine)


def timed(f: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        f()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def ratio_row(group, name, size, stage_s, base_s, max_ratio, note="", **extra) -> Row:
    """A time row whose goal is ``qmdlab/raw ≤ max_ratio``."""
    r = stage_s / base_s
    rmin = LAST_MINS[0] / LAST_MINS[1] if LAST_MINS[1] else None
    if rmin is not None:
        note = f"{note}; ratio of fastest repeats {rmin:.2f}×".lstrip("; ")
    return add(
        Row(
            group,
            name,
            size,
            stage_s,
            base_s,
            "s",
            r,
            "qmdlab/raw",
            f"≤ {max_ratio:g}×",
            "meets" if r <= max_ratio else "misses",
            note,
            {**extra, "ratio_of_mins": rmin},
        )
    )


# ---------------------------------------------------------------------------- shared data
class Work:
    """Temporary directories and corpora shared by the rows of one run."""

    def __init__(self, keep: bool = False):
        self.dir = Path(tempfile.mkdtemp(prefix="qmdlab-bench-"))
        self.keep = keep
        self.corpus = bench_data.Corpus()
        self._built: dict[int, tuple[Any, Path, int, float]] = {}
        os.environ["QMDLAB_HOME"] = str(self.dir / "home")  # never touch the user's default index

    def corpus_dir(self, n: int, short: bool = False) -> tuple[Path, int]:
        """An ``n``-file corpus (``short``: ~60-word notes, for the rows that run real models)."""
        root = self.dir / f"{'short' if short else 'corpus'}{n}"
        marker = root / ".bytes"
        if not marker.exists():
            corpus = bench_data.Corpus(seed=9, mean_words=60) if short else self.corpus
            nbytes = corpus.write(root, n)
            marker.write_text(str(nbytes))
        return root, int(marker.read_text())

    def index(self, n: int):
        """``(Index, corpus root, corpus bytes, build seconds)`` of an ``n``-document corpus (built once)."""
        if n not in self._built:
            from qmdlab.store import Index

            root, nbytes = self.corpus_dir(n)
            idx = Index(self.dir / f"index{n}")
            idx.add_collection("bench", root)
            t0 = time.perf_counter()
            idx.update()
            self._built[n] = (idx, root, nbytes, time.perf_counter() - t0)
        return self._built[n]

    def close(self) -> None:
        for idx, *_ in self._built.values():
            idx.close()
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def model_status() -> tuple[bool, str, dict[str, Path]]:
    """Whether the offline models can run: ``(ok, reason, {role: path})``."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False, "llama_cpp not installed (pip install 'qmdlab[llama]')", {}
    from qmdlab.models.registry import MINILM, QWEN_CODER, ref_status

    paths = {}
    for role, ref in (("embed", MINILM), ("rerank", QWEN_CODER)):
        st = ref_status(ref)
        if not st["ready"] or st["path"] is None:
            return False, f"{ref} not assembled (run `qmdlab pull --preset offline`)", {}
        paths[role] = Path(st["path"])
    return True, "", paths


# ---------------------------------------------------------------------------- rows
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


def bench_retune(w: Work, sz: dict) -> None:
    import polars as pl

    from qmdlab.eval.study import Study
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.pipeline.retune import retune

    try:
        import ranx
    except ImportError:
        skip("retune", "re-fusion + re-blend + nDCG@10", "ranx not installed")
        return
    nq = sz["retune_queries"]
    # the issue's shape: 300 recorded queries × 8 lists × 20 hits (lists overlap: a 120-document pool per query)
    trace, qrels = bench_data.synthetic_trace(nq, n_lists=8, pool_size=120)
    study = Study(trace, qrels, metrics=["ndcg@10"])
    state = {"i": 0}

    def move() -> PipelineConfig:  # a slider move: new weights
        state["i"] += 1
        return PipelineConfig(weight_lex=0.5 + (state["i"] % 7) * 0.1)

    def stage():  # re-fuse, re-blend, score every query: Study.score (the tuner's and the sliders' path)
        return study.score(move(), "ndcg@10")

    def polars_path():  # the same through the polars stages (the reference path the fast one replaced)
        study.fast = False
        try:
            return study.score(move(), "ndcg@10")
        finally:
            study.fast = True

    # ranx on the same eight lists per query (one Run per list slot), Qrels built once (warm)
    runs = []
    for lid in range(8):
        d: dict[str, dict[str, float]] = {}
        for qid, doc, sc in trace.lists.filter(pl.col("list_id") == lid).select("qid", "docno", "score").iter_rows():
            d.setdefault(qid, {})[doc] = sc
        runs.append(ranx.Run(d, name=f"list{lid}"))
    rq = ranx.Qrels({q: dict(zip(g["docno"].to_list(), g["grade"].to_list())) for (q,), g in qrels.group_by("qid")})

    def baseline():
        fused = ranx.fuse(runs, method="rrf", params={"k": 60})
        return ranx.evaluate(rq, fused, "ndcg@10")

    t0 = time.perf_counter()
    baseline()  # numba compile / load
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    stage()  # codes assigned once per study
    codes_s = time.perf_counter() - t0
    s, b = paired(stage, baseline, sz["repeats"])
    smin, bmin = LAST_MINS
    old, _ = paired(polars_path, stage, max(3, sz["repeats"] // 2))
    # the same quantity three ways: plain RRF, no rerank, top 10 → nDCG@10 must agree
    cfg = PipelineConfig(fusion="rrf", rerank=False, candidate_limit=10_000, limit=10)
    ours = study.score(cfg, "ndcg@10")
    study.fast = False
    ref = study.score(cfg, "ndcg@10")
    ref_final = study.evaluate(PipelineConfig()).final
    study.fast = True
    same_default = study.evaluate(PipelineConfig()).final.equals(ref_final)
    theirs = float(baseline())
    speed = b / s
    ok = s < 0.025 and speed >= 20
    add(
        Row(
            "retune",
            "re-fuse + re-blend + nDCG@10 (Study.score) vs ranx fuse+evaluate",
            f"{nq} queries × 8 lists × 20",
            s,
            b,
            "s",
            speed,
            "speed-up",
            "< 25 ms and ≥ 20×",
            "meets" if ok else "misses",
            f"fastest repeats {smin * 1e3:.2f} vs {bmin * 1e3:.2f} ms ({bmin / smin:.1f}×); ranx warm (first call "
            f"{compile_s:.1f} s); codes once per study {codes_s * 1e3:.0f} ms; the polars path {old * 1e3:.1f} ms "
            f"({old / s:.1f}× slower); plain-RRF nDCG@10 fast {ours:.10f} / polars {ref:.10f} / ranx {theirs:.10f}; "
            f"default-config final table identical: {same_default}",
            {
                "ndcg_fast": ours,
                "ndcg_polars": ref,
                "ndcg_ranx": theirs,
                "ranx_first_call_s": compile_s,
                "codes_s": codes_s,
                "polars_path_s": old,
                "ratio_of_mins": bmin / smin,
                "same_final": same_default,
            },
        )
    )
    # the pipeline area's own retune benchmark shape (benchmarks/bench_retune.py): 8 lists, fusion only
    try:
        import bench_retune
        from ranx.fusion import rrf as ranx_rrf
    except ImportError as err:
        skip("retune", "retune 300×8×20 vs ranx rrf (bench_retune)", f"benchmarks/bench_retune.py unusable: {err}")
        return
    tr8 = bench_retune.synthetic_trace(nq, 8, 20)
    new = PipelineConfig(weight_lex=1.5, rrf_k=40)
    runs8 = []
    for lid in range(8):
        d = {}
        for qid, doc, sc in tr8.lists.filter(pl.col("list_id") == lid).select("qid", "docno", "score").iter_rows():
            d.setdefault(qid, {})[doc] = sc
        runs8.append(ranx.Run(d))
    s8, b8 = paired(lambda: retune(tr8, new), lambda: ranx_rrf(runs8, k=60), sz["repeats"])
    add(
        Row(
            "retune",
            "retune only vs ranx rrf fuse only (bench_retune shape)",
            f"{nq} queries × 8 lists × 20",
            s8,
            b8,
            "s",
            b8 / s8,
            "speed-up",
            "< 50 ms",
            "meets" if s8 < 0.050 else "misses",
            "scripts/bench_retune.synthetic_trace; retune = fuse + candidates + blend + finish",
        )
    )
    bench_learned(w, tr8, new, sz)


def bench_learned(w: Work, trace, base, sz: dict) -> None:
    """fusion=learned (LightGBM lambdarank over trace features) vs qmd_rrf: one retune of the same trace."""
    import numpy as np
    import polars as pl

    from qmdlab.pipeline.learned import features
    from qmdlab.pipeline.retune import retune

    try:
        from qmdlab.eval.learn import LearnConfig, fit
    except ImportError as err:
        skip("retune", "retune fusion=learned vs qmd_rrf", f"qmdlab.eval.learn unusable: {err}")
        return
    try:
        import lightgbm  # noqa: F401
    except ImportError:
        skip("retune", "retune fusion=learned vs qmd_rrf", "LightGBM not installed (pip install 'qmdlab[learn]')")
        return
    rng = np.random.default_rng(1)
    docnos = trace.lists["docno"].unique().sort()
    docs = pl.DataFrame(
        {
            "docno": docnos,
            "title_terms": [[f"t{i % 50}"] for i in range(len(docnos))],
            "heading_terms": [[] for _ in range(len(docnos))],
            "doc_len": rng.uniform(5, 9, len(docnos)),
        },
        schema={
            "docno": pl.Utf8,
            "title_terms": pl.List(pl.Utf8),
            "heading_terms": pl.List(pl.Utf8),
            "doc_len": pl.Float64,
        },
    )
    frame = features(trace.lists, docs)
    frame = frame.with_columns(label=pl.Series((rng.random(frame.height) < 0.1).astype(np.int64))).sort("qid")
    booster = fit(frame, LearnConfig(n_estimators=100, num_leaves=7, select=False))
    path = w.dir / "learned.lgb.txt"
    booster.save_model(str(path))
    learned = base.replace(fusion="learned", learned_model=str(path))
    s, b = paired(lambda: retune(trace, learned, docs=docs), lambda: retune(trace, base), sz["repeats"])
    ratio_row(
        "retune",
        "retune fusion=learned vs fusion=qmd_rrf (same trace)",
        f"{trace.lists['qid'].n_unique()} queries × 8 lists × 20, 100 trees",
        s,
        b,
        5.0,
        "features + LightGBM predict replace the RRF sum; candidates, blend, finish are the same",
    )


def bench_update(w: Work, sz: dict) -> None:
    n = sz["update"]
    idx, root, nbytes, _ = w.index(n)
    files = bench_data.list_md(root)

    def stage():
        rep = idx.update()
        assert rep.unchanged == n, rep

    def hash_all():  # qmd's way: list, read and sha256 every file
        for p in bench_data.list_md(root):
            with open(p, "rb") as f:
                hashlib.sha256(f.read()).hexdigest()

    size = f"{len(files):,} files, {nbytes / 2**20:.1f} MiB"

    # what any stat-based update can reach: a bare scandir walk + one stat per file
    def walk_stat():
        stack = [str(root)]
        while stack:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.name.endswith(".md"):
                        e.stat()

    # the three alternate in one loop, so the ratios see the same machine load
    t: dict[str, list[float]] = {"update": [], "hash": [], "floor": []}
    fns = {"update": stage, "hash": hash_all, "floor": walk_stat}
    for f in fns.values():
        f()
    gc.collect()
    for i in range(max(5, sz["repeats"])):
        for k in list(fns) if i % 2 == 0 else list(fns)[::-1]:
            t0 = time.perf_counter()
            fns[k]()
            t[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in t.items()}
    mins = {k: min(v) for k, v in t.items()}
    speed = med["hash"] / med["update"]
    load = "load %.1f %.1f %.1f" % os.getloadavg()
    add(
        Row(
            "update",
            "update (unchanged) vs hashing every file",
            size,
            med["update"],
            med["hash"],
            "s",
            speed,
            "speed-up",
            "≥ 3×",
            "meets" if speed >= 3 else "misses",
            f"stat-only path (qmdlab.store.scan.stat_files + one stored digest); ratio of fastest repeats "
            f"{mins['hash'] / mins['update']:.2f}×; {load}",
            {"ratio_of_mins": mins["hash"] / mins["update"], "min_s": mins["update"], "base_min_s": mins["hash"]},
        )
    )
    add(
        Row(
            "update",
            "floor: bare scandir + stat per file vs hashing",
            size,
            med["floor"],
            med["hash"],
            "s",
            med["hash"] / med["floor"],
            "speed-up",
            "report",
            "info",
            f"the most a stat-based update can gain over hashing on these files (path-based stat; qmdlab stats "
            f"relative to a folder descriptor, ~10 % less CPU); ratio of fastest repeats "
            f"{mins['hash'] / mins['floor']:.2f}×",
        )
    )
    add(
        Row(
            "update",
            "update (unchanged) vs the bare scandir + stat floor",
            size,
            med["update"],
            med["floor"],
            "s",
            med["update"] / med["floor"],
            "qmdlab/raw",
            "report",
            "info",
            f"ratio of fastest repeats {mins['update'] / mins['floor']:.2f}×",
        )
    )
    # the file listing a changed collection goes through, against the Path.glob one it replaced
    from qmdlab.store.scan import list_files, list_files_glob

    coll = idx.collection("bench")
    if list(list_files(coll)) != list(list_files_glob(coll)):
        add(
            Row(
                "update",
                "list_files (scandir) vs Path.glob listing",
                size,
                status="error",
                goal="same entries",
                note="the scandir listing differs from the Path.glob reference",
            )
        )
        return
    s2, b2 = paired(lambda: list(list_files(coll)), lambda: list(list_files_glob(coll)), sz["repeats"])
    add(
        Row(
            "update",
            "list_files (scandir) vs Path.glob listing",
            size,
            s2,
            b2,
            "s",
            b2 / s2,
            "speed-up",
            "report",
            "info",
            f"ratio of fastest repeats {LAST_MINS[1] / LAST_MINS[0]:.2f}×",
        )
    )


def bench_build(w: Work, sz: dict) -> None:
    """Index build (update of a new collection) vs reading the files into a bare FTS5 table."""
    from qmdlab.store import Index

    n = sz["update"]
    root, nbytes = w.corpus_dir(n)
    k = [0]

    def stage():
        k[0] += 1
        d = w.dir / f"build{k[0]}"
        idx = Index(d)
        idx.add_collection("bench", root)
        idx.update()
        idx.close()
        shutil.rmtree(d, ignore_errors=True)

    def raw():
        k[0] += 1
        d = w.dir / f"rawfts{k[0]}.sqlite"
        c = sqlite3.connect(d)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("CREATE VIRTUAL TABLE f USING fts5(filepath, title, body, tokenize='porter unicode61')")
        rows = []
        for p in bench_data.list_md(root):
            with open(p, "rb") as fh:
                text = fh.read().decode("utf-8")
            rows.append((p, text.split("\n", 1)[0], text))
        with c:
            c.executemany("INSERT INTO f VALUES (?, ?, ?)", rows)
        c.close()
        for suffix in ("", "-wal", "-shm"):
            Path(str(d) + suffix).unlink(missing_ok=True)

    s, b = paired(stage, raw, max(3, sz["repeats"] // 2), warmup=0)
    add(
        Row(
            "build",
            "index build vs bare FTS5 insert of the files",
            f"{n:,} files, {nbytes / 2**20:.1f} MiB",
            s,
            b,
            "s",
            s / b,
            "qmdlab/raw",
            "report",
            "info",
            f"{n / s:,.0f} docs/s (content, chunks, front matter, FTS triggers)",
        )
    )


def bench_embed(w: Work, sz: dict, models_ok: tuple) -> None:
    ok, reason, paths = models_ok
    if not ok:
        skip("embed", "embedding throughput vs raw llama-cpp-python", reason)
        return
    import llama_cpp

    from qmdlab.models.registry import MINILM, build_model

    docs = [(t, x[: sz["text_chars"]]) for t, x in w.corpus.documents(sz["embed_texts"])]
    emb = build_model("embed", MINILM, n_threads=THREADS, idle_timeout=None, batch_size=32)
    emb1 = build_model("embed", MINILM, n_threads=THREADS, idle_timeout=None, batch_size=1)
    texts = [emb.template.document(t, x) for t, x in docs]
    raw_llm = llama_cpp.Llama(
        model_path=str(paths["embed"]),
        embedding=True,
        n_ctx=512,
        n_batch=512,
        n_ubatch=512,
        n_threads=THREADS,
        n_threads_batch=THREADS,
        verbose=False,
    )
    ntok = sum(len(raw_llm.tokenize(t.encode())) for t in texts)
    reps = max(3, sz["repeats"] // 2)
    s, b = paired(lambda: emb.embed_documents(docs), lambda: raw_llm.embed(texts, truncate=True), reps)
    a = np.asarray(emb.embed_documents(docs))
    r = np.asarray(raw_llm.embed(texts, truncate=True), dtype=np.float32)
    r /= np.linalg.norm(r, axis=1, keepdims=True)
    diff = float(np.abs(a - r).max())
    n = len(docs)
    add(
        Row(
            "embed",
            "embed_documents vs raw Llama.embed (same texts, model)",
            f"{n} chunks, {ntok / n:.0f} tok/chunk",
            n / s,
            n / b,
            "/s",
            (n / s) / (n / b),
            "qmdlab/raw",
            "≥ 0.8×",
            "meets" if b / s >= 0.8 else "misses",
            f"all-MiniLM-L6-v2 f16, {THREADS} threads; max |Δvec| {diff:.1e}",
            {"max_abs_diff": diff},
        )
    )
    u, bb = paired(lambda: emb1.embed_documents(docs), lambda: emb.embed_documents(docs), reps, warmup=0)
    add(
        Row(
            "embed",
            "batched (32/call) vs unbatched (1/call)",
            f"{n} chunks",
            n / bb,
            n / u,
            "/s",
            u / bb,
            "batched/unbatched",
            "≥ 1.5×",
            "meets" if u / bb >= 1.5 else "misses",
            "LlamaEmbedder batch_size 32 vs 1; both go through Llama.embed, which packs several sequences "
            "into each llama_decode (up to n_batch tokens): the batching is there, the gain is not",
        )
    )
    # the same on query-length texts, where a decode's fixed cost is a larger share
    short = [("", q) for q in w.corpus.queries(sz["embed_short"], seed=5)]
    u2, b2 = paired(lambda: emb1.embed_documents(short), lambda: emb.embed_documents(short), reps, warmup=1)
    d2 = float(np.abs(np.asarray(emb1.embed_documents(short)) - np.asarray(emb.embed_documents(short))).max())
    m = len(short)
    add(
        Row(
            "embed",
            "batched (32/call) vs unbatched (1/call), query-length texts",
            f"{m} texts of 2–4 words",
            m / b2,
            m / u2,
            "/s",
            u2 / b2,
            "batched/unbatched",
            "≥ 1.5×",
            "meets" if u2 / b2 >= 1.5 else "misses",
            f"max |Δvec| batched vs unbatched {d2:.1e}",
            {"max_abs_diff": d2},
        )
    )
    for e in (emb, emb1):
        e.release()
    raw_llm.close()


def bench_rerank(w: Work, sz: dict, models_ok: tuple) -> None:
    ok, reason, paths = models_ok
    if not ok:
        skip("rerank", "rerank s/pair vs raw llama.cpp eval", reason)
        return
    import llama_cpp

    from qmdlab.models.cached import CachedReranker
    from qmdlab.models.registry import QWEN_CODER, build_model
    from qmdlab.models.scoring import p_yes
    from qmdlab.models.templates import rerank_prompt_parts

    rr = build_model("rerank", QWEN_CODER, n_threads=THREADS, idle_timeout=None)
    query = w.corpus.queries(1, seed=3)[0]
    texts = [x[: sz["text_chars"]] for _, x in w.corpus.documents(sz["rerank_texts"])]
    rr.score(query, texts[:1])  # load + answer ids
    raw_llm = llama_cpp.Llama(
        model_path=str(paths["rerank"]), n_ctx=rr.n_ctx, n_threads=THREADS, n_threads_batch=THREADS, verbose=False
    )
    prefix, suffix = rerank_prompt_parts(rr.family, query, rr.instruct)
    head = raw_llm.tokenize(prefix.encode(), add_bos=True, special=True)
    tail = raw_llm.tokenize(suffix.encode(), add_bos=False, special=True)
    prompts = [head + raw_llm.tokenize(t.encode(), add_bos=False, special=False) + tail for t in texts]
    n_vocab = raw_llm.n_vocab()

    def raw():  # the whole prompt of every pair, evaluated from scratch
        out = []
        for toks in prompts:
            raw_llm.reset()
            raw_llm.eval(toks)
            z = np.ctypeslib.as_array(raw_llm._ctx.get_logits(), shape=(n_vocab,)).copy()
            out.append(p_yes(z, rr.yes_ids, rr.no_ids))
        return out

    raw_llm.eval(head)  # first-use page faults out of the timing
    raw_llm.reset()
    got: dict[str, list] = {}
    reps = 1 if sz["repeats"] <= 5 else 3
    s, b = paired(
        lambda: got.__setitem__("ours", rr.score(query, texts)), lambda: got.__setitem__("raw", raw()), reps, warmup=0
    )
    diff = float(np.abs(np.array(got["ours"]) - np.array(got["raw"])).max())
    n = len(texts)
    ntok = sum(len(p) for p in prompts) / n
    ratio_row(
        "rerank",
        "LlamaReranker.score vs raw eval of the same prompt",
        f"{n} pairs, {ntok:.0f} tok/prompt",
        s / n,
        b / n,
        1.25,
        note=f"s/pair; Qwen2.5-Coder-0.5B Q4_K_M, {THREADS} threads; query prefix KV reused; max |ΔP(yes)| {diff:.1e}",
        max_abs_diff=diff,
    )
    raw_llm.close()
    bench_cross_encoder(w, sz, llm_s_per_pair=s / n)
    # a repeated query through the LLM cache: zero model calls
    from qmdlab.store import Index

    idx = Index(w.dir / "rerank-cache")
    cr = CachedReranker(rr, idx.cache)
    cr.score(query, texts)
    before = cr.calls
    t = timed(lambda: cr.score(query, texts), sz["repeats"], warmup=0)
    calls = cr.calls - before
    add(
        Row(
            "rerank",
            "repeated query: reranker model calls",
            f"{n} pairs",
            float(calls),
            None,
            "calls",
            None,
            "",
            "0 calls",
            "meets" if calls == 0 else "misses",
            f"cached lookup {fmt(t, 's')} for {n} pairs",
        )
    )
    idx.close()
    rr.release()


def bench_expand(w: Work, sz: dict, models_ok: tuple) -> None:
    """LlamaExpander.expand vs a raw ``llama_cpp.Llama.create_completion`` with the same grammar,
    prompt tokens and sampling (greedy): wall time, prompt and generation tokens/s, same text."""
    ok, reason, paths = models_ok
    if not ok:
        skip("expand", "expansion vs raw llama-cpp-python generation", reason)
        return
    import llama_cpp

    from qmdlab.models.registry import QWEN_CODER, build_model

    exp = build_model("expand", QWEN_CODER, n_threads=THREADS, idle_timeout=None)
    queries = w.corpus.queries(sz["expand_queries"], seed=11)
    raw_llm = llama_cpp.Llama(
        model_path=str(paths["rerank"]), n_ctx=2048, n_threads=THREADS, n_threads_batch=THREADS, verbose=False
    )  # the offline expander is the same GGUF
    grammar = llama_cpp.LlamaGrammar.from_string(exp.grammar_text, verbose=False)
    sm = exp.sampling
    perf: dict[str, list] = {"ours": [], "raw": []}
    texts: dict[str, list] = {"ours": [], "raw": []}

    def perf_of(llm) -> tuple[float, int, float, int]:
        d = llama_cpp.llama_perf_context(llm._ctx.ctx)
        return d.t_p_eval_ms / 1e3, d.n_p_eval, d.t_eval_ms / 1e3, d.n_eval

    def ours():
        for q in queries:
            with exp.llama.use() as llm:
                llm.reset()  # no KV reuse from the previous call: every call evaluates its prompt
                llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
            texts["ours"].append(exp.expand(q).raw)
            with exp.llama.use() as llm:
                perf["ours"].append(perf_of(llm))

    def raw():
        for q in queries:
            raw_llm.reset()
            llama_cpp.llama_perf_context_reset(raw_llm._ctx.ctx)
            toks = raw_llm.tokenize(exp.prompt(q).encode("utf-8"), add_bos=True, special=True)
            out = raw_llm.create_completion(
                toks,
                max_tokens=sm.max_tokens,
                temperature=sm.temperature,
                top_k=sm.top_k,
                top_p=sm.top_p,
                min_p=0.0,
                repeat_penalty=1.0,
                grammar=grammar,
            )
            texts["raw"].append(out["choices"][0]["text"])
            perf["raw"].append(perf_of(raw_llm))

    s, b = paired(ours, raw, max(1, sz["repeats"] // 3), warmup=0)
    same = texts["ours"] == texts["raw"]

    def rates(key: str) -> tuple[float, float, float]:
        tp, npe, te, ne = (sum(x[i] for x in perf[key]) for i in range(4))
        return npe / tp if tp else 0.0, ne / te if te else 0.0, ne / len(perf[key])

    po, go, ntok = rates("ours")
    pr, gr, _ = rates("raw")
    nq = len(queries)
    ratio_row(
        "expand",
        "LlamaExpander.expand vs raw create_completion (same grammar, prompt, greedy)",
        f"{nq} queries, {ntok:.0f} generated tok/query",
        s / nq,
        b / nq,
        1.1,
        note=f"s/query; prompt {po:.0f} vs {pr:.0f} tok/s, generation {go:.1f} vs {gr:.1f} tok/s "
        f"(qmdlab vs raw, llama.cpp perf counters); same text {same}; stops at the grammar's end "
        f"(≤ 6 lines) or {sm.max_tokens} tokens",
        same_text=same,
        prompt_tps=po,
        gen_tps=go,
        raw_prompt_tps=pr,
        raw_gen_tps=gr,
    )
    exp.release()
    raw_llm.close()


def bench_cross_encoder(w: Work, sz: dict, llm_s_per_pair: float | None = None) -> None:
    """Pairs/s of the cross-encoder reranker at 256 tokens per pair, 2 threads, against
    the LLM reranker's pairs/s measured in the same run. The trained model of `make
    train-reranker` (runs/reranker/model) when it exists, else the same architecture (MiniLM-L6
    + a fresh head, from the packaged weights): the speed depends on the architecture only."""
    try:
        from qmdlab.training.reranker import new_model, resolve_base
    except ImportError as err:
        skip("rerank", "cross-encoder pairs/s at 256 tokens", f"train extra missing ({err})")
        return
    from qmdlab.models.cross_encoder import CrossEncoderReranker

    trained = ROOT / "runs" / "reranker" / "model"
    if (trained / "config.json").is_file():
        path, which = trained, "trained (runs/reranker/model)"
    else:
        try:
            base = resolve_base("pkg:all-minilm-l6-v2")
        except Exception as err:
            skip("rerank", "cross-encoder pairs/s at 256 tokens", str(err))
            return
        path, which = w.dir / "cross-encoder", "untrained, same architecture"
        if not path.exists():
            new_model(base, 256, 0).save_pretrained(str(path))
    rr = CrossEncoderReranker(path, max_length=256, batch_size=32, n_threads=THREADS)
    n = 8 if sz["repeats"] <= 3 else 64
    docs = [x for _, x in w.corpus.documents(n)]
    texts = [(d + " ") * (1 + 2000 // max(1, len(d))) for d in docs]  # every pair truncated at 256 tokens
    query = w.corpus.queries(1, seed=3)[0]
    ntok = float(
        np.mean([len(rr._load()[0](query, t, truncation="longest_first", max_length=256)["input_ids"]) for t in texts])
    )
    t = timed(lambda: rr.score(query, texts), max(1, min(3, sz["repeats"])), warmup=1)
    rate = n / t
    llm_rate = 1.0 / llm_s_per_pair if llm_s_per_pair else None
    add(
        Row(
            "rerank",
            "cross-encoder reranker pairs/s at 256 tokens vs LLM reranker",
            f"{n} pairs, {ntok:.0f} tok/pair",
            rate,
            llm_rate,
            "/s",
            rate / llm_rate if llm_rate else None,
            "speed-up",
            "≥ 200/s",
            "meets" if rate >= 200 else "misses",
            f"{which}; torch CPU fp32, {THREADS} threads, batch 32; LLM = Qwen2.5-Coder-0.5B P(yes), same run",
        )
    )
    rr.release()


def _query_index(w: Work, n: int, embedder, name: str, chars: int):
    from qmdlab.store import Index

    root, _ = w.corpus_dir(n, short=True)
    idx = Index(w.dir / f"qindex-{name}")
    if not idx.collections():
        idx.add_collection("bench", root)
        idx.update()
    todo = idx.chunks_needing_vectors(embedder.fingerprint)
    if todo.height:
        vecs = embedder.embed_documents(list(zip(todo["title"].to_list(), [t[:chars] for t in todo["text"].to_list()])))
        idx.store_vectors(todo["chunk_id"].to_list(), vecs, embedder.fingerprint)
    return idx


def bench_query(w: Work, sz: dict, models_ok: tuple) -> None:
    from qmdlab.models import load_models
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.pipeline.lab import Lab

    n = sz["query_docs"]
    # three words of one indexed (short) note: a query that retrieves, fuses, reranks and blends
    # something (words of the main corpus' queries mostly match nothing in the short notes)
    short_texts = [t for _, t in bench_data.Corpus(seed=9, mean_words=60).documents(n)]
    query = " ".join([x for x in short_texts[n // 2].split() if x.isalpha() and len(x) > 3][2:5])
    presets = [("fake", None)]
    ok, reason, _ = models_ok
    presets.append(("offline", None if ok else reason))
    for preset, why in presets:
        if why:
            skip("query", f"cached repeated query, {preset} models", why)
            continue
        models = load_models(preset, n_threads=THREADS, idle_timeout=None)
        idx = _query_index(w, n, models.embedder, preset, sz["text_chars"])
        cfg = PipelineConfig(candidate_limit=sz["offline_candidates"] if preset == "offline" else 40)
        lab = Lab(idx, models, cfg)
        # the first (cache-filling) run may exceed the per-query time budget on a slow or busy
        # machine, which skips the rerank; lift the budget for it so every stage gets cached
        saved = os.environ.get("QMDLAB_QUERY_BUDGET_MS")
        os.environ["QMDLAB_QUERY_BUDGET_MS"] = str(24 * 3600 * 1000)
        try:
            t0 = time.perf_counter()
            first = lab.query(query)
            cold = time.perf_counter() - t0
        finally:
            if saved is None:
                os.environ.pop("QMDLAB_QUERY_BUDGET_MS", None)
            else:
                os.environ["QMDLAB_QUERY_BUDGET_MS"] = saved
        roles = {"expand": lab.expander, "rerank": lab.reranker}
        calls0 = {k: getattr(m, "calls", 0) for k, m in roles.items()}
        traces = []
        times: list[float] = []

        def one():
            t0 = time.perf_counter()
            traces.append(lab.query(query))
            times.append(time.perf_counter() - t0)

        t = timed(one, sz["repeats"] * 4, warmup=1)
        t_min = min(times[1:])
        by_role = {k: getattr(m, "calls", 0) - calls0[k] for k, m in roles.items()}
        calls = sum(by_role.values())
        if calls:  # say which role and which pairs missed the cache
            r0 = traces[0].rerank
            miss = r0.filter(~r0["cached"])["docno"].to_list() if r0.height else []
            print(
                f"    model calls on repeats by role {by_role}; first repeat uncached rerank docs {miss}; "
                f"first-run candidates {first.rerank['docno'].to_list()}; notes "
                f"{traces[0].notes.select('stage', 'message').rows()}",
                flush=True,
            )
        tim = traces[-1].timings.group_by("stage", maintain_order=True).agg(pl_sum("ms"))
        slow = ", ".join(f"{s} {ms:.1f}" for s, ms in sorted(tim.iter_rows(), key=lambda r: -r[1])[:3])
        same = traces[-1].final["docno"].to_list() == first.final["docno"].to_list()
        sizes = f"lists {first.lists.height}, candidates {first.rerank.height}, final {first.final.height}"
        add(
            Row(
                "query",
                f"cached repeated query in-process, {preset} models",
                f"{n} docs, '{query}'",
                t,
                None,
                "s",
                None,
                "",
                "< 5 ms",
                "meets" if t < 0.005 and calls == 0 else "misses",
                f"fastest {t_min * 1e3:.2f} ms; {sizes}; first run {cold:.2f} s; model calls on repeats {calls} "
                f"{by_role}; same ranking {same}; top stages ms: {slow}; load {os.getloadavg()[0]:.1f}",
                {"first_s": cold, "calls": calls, "calls_by_role": by_role, "min_s": t_min},
            )
        )
        w.__dict__.setdefault("query_indexes", {})[preset] = (idx, query)
        for m in models:
            rel = getattr(m, "release", None)
            if callable(rel):
                rel()


def pl_sum(col: str):
    import polars as pl

    return pl.col(col).sum()


def bench_cli(w: Work, sz: dict, models_ok: tuple) -> None:
    """``qmdlab query`` as a fresh process (cached results), vs the bare interpreter start."""
    qi = w.__dict__.get("query_indexes") or {}
    if not qi:
        bench_query(w, {**sz, "repeats": 1}, (False, "not needed", {}))
        qi = w.__dict__.get("query_indexes") or {}
    exe = [sys.executable, "-m", "qmdlab.cli"]
    env = {**os.environ, "QMDLAB_THREADS": str(THREADS), "PYTHONPATH": str(ROOT)}
    reps = max(3, sz["repeats"] // 2)
    bare = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), reps, warmup=1)
    imp = timed(lambda: subprocess.run([sys.executable, "-c", "import qmdlab.cli"], check=True, env=env), reps)
    started = bench_cli_start(w, sz, exe, env)
    for preset in ("fake", "offline"):
        if preset not in qi:
            continue
        idx, query = qi[preset]
        cmd = exe + ["--index", str(idx.dir), "query", query, "--preset", preset]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            add(
                Row(
                    "cli",
                    f"qmdlab query cold start, {preset} models",
                    "-",
                    status="misses",
                    goal="runs",
                    note=f"exit {r.returncode}: {r.stderr.strip()[-200:]}",
                )
            )
            continue
        t = timed(lambda: subprocess.run(cmd, capture_output=True, check=True, env=env), reps, warmup=0)
        add(
            Row(
                "cli",
                f"qmdlab query cold start (cached), {preset} models",
                "fresh process",
                t,
                bare,
                "s",
                t / bare,
                "cli/python -c pass",
                "report",
                "info",
                f"python start {fmt(bare, 's')}; `import qmdlab.cli` {fmt(imp, 's')}",
            )
        )
        if preset == "offline" and started:
            # the offline preset's default stages (BM25 + vectors + fusion: qmdlab.pipeline.stages), a fresh
            # process each, against `qmdlab search` on the same machine
            stages = r.stderr.splitlines()[0] if r.stderr else ""
            add(
                Row(
                    "cli",
                    "qmdlab query, offline preset defaults (warm)",
                    "fresh process",
                    t,
                    started["search"],
                    "s",
                    t / started["search"],
                    "query/search",
                    "< 1 s",
                    "meets" if t < 1.0 else "misses",
                    f"{stages}; `qmdlab search` {fmt(started['search'], 's')} (another index size)",
                )
            )


def bench_cli_start(w: Work, sz: dict, exe: list[str], env: dict) -> None:
    """The cold-start goals: ``import qmdlab.cli`` < 150 ms and ``qmdlab search`` end to end
    < 300 ms, each a fresh process, alternated with a bare ``python -c pass`` (min and median)."""
    n = sz["bm25"][0]
    idx, _, _, _ = w.index(n)
    query = w.corpus.queries(1)[0]
    # a user's interpreter caches bytecode; with PYTHONDONTWRITEBYTECODE set, every module edited
    # since its .pyc was written would be recompiled on each start and counted here
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cmds = {
        "bare": [sys.executable, "-c", "pass"],
        "import": [sys.executable, "-c", "import qmdlab.cli"],
        "search": exe + ["--index", str(idx.dir), "search", query, "-n", "10"],
    }
    for c in cmds.values():  # warm-up (and a failing command is an error, not a time)
        subprocess.run(c, check=True, capture_output=True, env=env)
    t: dict[str, list[float]] = {k: [] for k in cmds}
    for i in range(max(7, sz["repeats"])):
        for k in list(cmds) if i % 2 == 0 else list(cmds)[::-1]:
            t0 = time.perf_counter()
            subprocess.run(cmds[k], check=True, capture_output=True, env=env)
            t[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in t.items()}
    mn = {k: min(v) for k, v in t.items()}
    load = "load %.1f %.1f %.1f" % os.getloadavg()
    for key, name, goal in (
        ("import", "`import qmdlab.cli` cold start", 0.150),
        ("search", f"`qmdlab search` end to end ({n:,} docs)", 0.300),
    ):
        add(
            Row(
                "cli",
                name,
                "fresh process",
                med[key],
                med["bare"],
                "s",
                med[key] / med["bare"],
                "cli/python -c pass",
                f"< {goal * 1e3:.0f} ms",
                "meets" if med[key] < goal else "misses",
                f"min {fmt(mn[key], 's')} (python start min {fmt(mn['bare'], 's')}, above it "
                f"{fmt(mn[key] - mn['bare'], 's')}); {len(t[key])} runs; {load}",
                {"min_s": mn[key], "bare_min_s": mn["bare"]},
            )
        )
    return med


# Peak RSS from /proc/self/status VmHWM (per address space: ru_maxrss survives exec on Linux and
# would report the parent's peak).
CHILD_PEAK = """
import resource
def peak_kb():
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""

CHILD_BUILD = (
    CHILD_PEAK
    + """
import json, sys, time
sys.path[:0] = [{root!r}]
start = peak_kb()
from qmdlab.store import Index
import qmdlab.search, qmdlab.pipeline.lab
base = peak_kb()
idx = Index({index!r}); idx.add_collection("bench", {corpus!r}); t0 = time.perf_counter(); idx.update()
print(json.dumps({{"start_kb": start, "base_kb": base, "peak_kb": peak_kb(),
                  "s": time.perf_counter() - t0}}))
"""
)

CHILD_QUERY = (
    CHILD_PEAK
    + """
import json, sys
sys.path[:0] = [{root!r}]
from qmdlab.store import Index
from qmdlab.models import load_models
from qmdlab.pipeline.lab import Lab
base = peak_kb()
idx = Index({index!r}); models = load_models("fake")
todo = idx.chunks_needing_vectors(models.embedder.fingerprint)
if todo.height:
    idx.store_vectors(todo["chunk_id"].to_list(), models.embedder.embed_documents(
        list(zip(todo["title"].to_list(), todo["text"].to_list()))), models.embedder.fingerprint)
    print(json.dumps({{"embedded": todo.height}})); sys.exit(0)
lab = Lab(idx, models)
mid = peak_kb()
for q in {queries!r}:
    lab.query(q)
print(json.dumps({{"base_kb": base, "open_kb": mid, "peak_kb": peak_kb()}}))
"""
)


def bench_memory(w: Work, sz: dict) -> None:
    n = sz["memory_docs"]
    corpus, nbytes = w.corpus_dir(n)
    index = w.dir / f"mem-index{n}"
    env = {**os.environ, "QMDLAB_HOME": str(w.dir / "home")}

    def child(code: str) -> dict:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-500:])
        return json.loads(r.stdout.strip().splitlines()[-1])

    b = child(CHILD_BUILD.format(root=str(ROOT), index=str(index), corpus=str(corpus)))
    mib = lambda kb: kb / 1024  # noqa: E731
    grow = mib(b["peak_kb"] - b["base_kb"])
    limit = 256.0
    add(
        Row(
            "memory",
            "peak RSS of index build",
            f"{n:,} docs, {nbytes / 2**20:.1f} MiB",
            mib(b["peak_kb"]),
            mib(b["base_kb"]),
            "MiB",
            None,
            "",
            f"≤ imports + {limit:.0f} MiB",
            "meets" if grow <= limit else "misses",
            f"+{grow:.0f} MiB over the imports ({b['s']:.1f} s build)",
        )
    )
    queries = w.corpus.queries(5, seed=9)
    child(CHILD_QUERY.format(root=str(ROOT), index=str(index), queries=queries))  # embeds (fake) once
    q = child(CHILD_QUERY.format(root=str(ROOT), index=str(index), queries=queries))
    grow = mib(q["peak_kb"] - q["base_kb"])
    limit = 128.0
    add(
        Row(
            "memory",
            "peak RSS of a query (fake models)",
            f"{n:,} docs, 5 queries",
            mib(q["peak_kb"]),
            mib(q["base_kb"]),
            "MiB",
            None,
            "",
            f"≤ imports + {limit:.0f} MiB",
            "meets" if grow <= limit else "misses",
            f"+{grow:.0f} MiB over the imports",
        )
    )


# ---------------------------------------------------------------------------- output
HEADER = ("#", "group", "row", "size", "qmdlab", "baseline", "ratio", "goal", "result")


def table_lines(rows: list[Row], markdown: bool = False) -> list[str]:
    cells = [
        (
            str(i),
            r.group,
            r.name,
            r.size,
            fmt(r.value, r.unit),
            fmt(r.base, r.unit),
            "-" if r.ratio is None else f"{r.ratio:.2f}× {r.ratio_kind}".strip(),
            r.goal,
            r.status,
        )
        for i, r in enumerate(rows, 1)
    ]
    if markdown:
        out = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
    else:
        widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(HEADER)]
        line = lambda c: "  ".join(x.ljust(wd) for x, wd in zip(c, widths)).rstrip()  # noqa: E731
        out = [line(HEADER), line(["-" * wd for wd in widths])] + [line(c) for c in cells]
    notes = [(i, r.note) for i, r in enumerate(rows, 1) if r.note]
    if notes:
        out += ["", "Notes:" if not markdown else "**Notes**", ""] if markdown else ["", "Notes:"]
        out += [f"{'- ' if markdown else '  '}[{i}] {n}" for i, n in notes]
    return out


def environment() -> dict:
    import polars as pl

    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "polars": pl.__version__,
        "sqlite": sqlite3.sqlite_version,
        "llama_threads": THREADS,
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
    }
    try:
        import llama_cpp

        env["llama_cpp"] = llama_cpp.__version__
    except ImportError:
        env["llama_cpp"] = None
    try:
        env["load_avg"] = os.getloadavg()
    except OSError:
        pass
    return env


def write_results(out: Path, mode: str, started: str, seconds: float, args: argparse.Namespace) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    stamp = started.replace(":", "").replace("-", "")
    data = {
        "mode": mode,
        "started": started,
        "seconds": round(seconds, 1),
        "argv": sys.argv[1:],
        "environment": environment(),
        "rows": [asdict(r) for r in ROWS],
    }
    md = [
        f"# qmdlab benchmarks ({mode})",
        "",
        f"{started} UTC, {seconds:.0f} s, {data['environment']['cpus']} CPUs, load {data['environment'].get('load_avg')}",
        "",
        "Medians after warm-up; stage and baseline alternated in the same process.",
        "",
    ]
    md += table_lines(ROWS, markdown=True)
    jp, mp = out / f"bench-{mode}-{stamp}.json", out / f"bench-{mode}-{stamp}.md"
    jp.write_text(json.dumps(data, indent=2, default=str))
    mp.write_text("\n".join(md) + "\n")
    shutil.copyfile(jp, out / "latest.json")
    shutil.copyfile(mp, out / "latest.md")
    return jp, mp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a few minutes)")
    ap.add_argument("--smoke", action="store_true", help="minimal sizes: only proves the script runs")
    ap.add_argument("--only", default="", help=f"comma-separated groups: {','.join(GROUPS)}")
    ap.add_argument("--skip", default="", help="comma-separated groups to leave out")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per row (default per mode)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"), help="results directory")
    ap.add_argument("--keep", action="store_true", help="keep the temporary corpora and indexes")
    args = ap.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    sz = dict(SIZES[mode])
    if args.repeats:
        sz["repeats"] = args.repeats
    only = [g for g in args.only.split(",") if g] or list(GROUPS)
    bad = [g for g in only + [g for g in args.skip.split(",") if g] if g not in GROUPS]
    if bad:
        ap.error(f"unknown group(s) {bad}; choose from {', '.join(GROUPS)}")
    groups = [g for g in GROUPS if g in only and g not in args.skip.split(",")]
    os.environ.setdefault("QMDLAB_THREADS", str(THREADS))
    started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    t_start = time.perf_counter()
    print(f"qmdlab bench ({mode}): {', '.join(groups)}", flush=True)
    w = Work(keep=args.keep)
    models_ok = model_status() if {"embed", "rerank", "expand", "query"} & set(groups) else (False, "", {})
    runners: dict[str, Callable[[], None]] = {
        "bm25": lambda: bench_bm25(w, sz),
        "bm25s": lambda: bench_bm25s(w, sz),
        "vector": lambda: bench_vector(w, sz),
        "retune": lambda: bench_retune(w, sz),
        "update": lambda: bench_update(w, sz),
        "build": lambda: bench_build(w, sz),
        "embed": lambda: bench_embed(w, sz, models_ok),
        "rerank": lambda: bench_rerank(w, sz, models_ok),
        "expand": lambda: bench_expand(w, sz, models_ok),
        "query": lambda: bench_query(w, sz, models_ok),
        "cli": lambda: bench_cli(w, sz, models_ok),
        "memory": lambda: bench_memory(w, sz),
    }
    failed = 0
    try:
        for g in groups:
            t0 = time.perf_counter()
            try:
                runners[g]()
            except Exception as err:  # one broken row must not hide the others
                failed += 1
                import traceback

                traceback.print_exc()
                add(Row(g, f"{g} rows", "-", status="error", goal="-", note=f"{type(err).__name__}: {err}"[:300]))
            print(f"[{g}] {time.perf_counter() - t0:.1f} s", flush=True)
    finally:
        w.close()
    seconds = time.perf_counter() - t_start
    print()
    print("\n".join(table_lines(ROWS)))
    jp, mp = write_results(Path(args.out), mode, started, seconds, args)
    print(f"\n{seconds:.0f} s; wrote {jp} and {mp}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

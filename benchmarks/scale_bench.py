"""Bigger collections on one machine: build, update, BM25, exact and HNSW vector
query time and memory at N synthetic one-chunk documents, with vectors stored directly (no embedder);
and the ANN library comparison that chose FAISS.

    nice -n 10 .venv/bin/python benchmarks/scale_bench.py --sizes 1000 10000 100000 --out results/scale
    nice -n 10 .venv/bin/python benchmarks/scale_bench.py --sizes --ann 10000 100000 \
        --ann-vectors random clustered cisi --queries 50      # needs qmdlab[ann,ann-bench]
    .venv/bin/python benchmarks/scale_bench.py --sizes --plot-only --png docs/results/scale/scale.png

Per size it writes N markdown files (Zipf-distributed synthetic words, ~80 per document, so one
chunk each) under ``--work``, then measures in this process:

- ``build_s``: ``Index.update`` of the new collection (scan, parse, chunk, FTS5 insert);
- ``update_changed_s``: ``update`` after rewriting 1% of the files; ``update_unchanged_s``: nothing changed;
- ``bm25_ms``: median of ``--queries`` three-word ``bm25_search`` calls (after one warm-up);
- ``store_vectors_s``: 384-d float32 vectors of ``--vectors`` (default clustered, see
  :func:`ann_vectors`) written with ``store_vectors`` (10k per transaction);
- ``vector_load_s``: the first ``vector_search`` (loads and normalises the matrix);
- ``vector_ms``: median exact ``vector_search`` after that (the matrix is in memory);
- every time also as ``*_cpu_*``: CPU seconds of this process (all threads), what a loaded shared
  machine distorts least;
- ``ann_build_s``, ``ann_ms``, ``ann_recall``: the first ``vector_search(ann=...)`` (builds and saves
  the FAISS graph), then its median wall time and recall@10 against exact over the queries (``--no-ann``
  skips it);
- ``rss_mb``: peak resident memory of the process after the size's phases; ``db_mb``: index file size.

``--ann N``: :func:`bench_ann` over in-memory vectors, one row per library and ``ef`` (``ann.json``).

The machine this was run on is shared: every row records the 1-minute load average at its start
and end; compare rows of one run, not absolute numbers across runs. Results: ``<out>/scale.json``
and ``<out>/scale.png``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

DIM = 384
FINGERPRINT = "bench:random#000000000000"


@dataclass
class BenchConfig:
    """What :func:`main` runs."""

    sizes: list[int] = field(default_factory=lambda: [10_000, 100_000])
    out: Path = Path("results/scale")
    work: Path = Path(tempfile.gettempdir()) / "qmdlab-scale-bench"
    queries: int = 20
    vocab: int = 20_000
    words_per_doc: int = 80
    seed: int = 0
    keep: bool = False
    vectors: str = "clustered"
    ann: bool = True


def _load() -> float:
    return os.getloadavg()[0]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _vocabulary(n: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = set()
    while len(words) < n:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))))
    return sorted(words)


def _doc(i: int, words: list[str], cum_weights: list[float], n_words: int, rng: random.Random) -> str:
    # cumulative weights, computed once: ``choices(weights=...)`` re-accumulates the whole
    # vocabulary on every call (it made writing 100k notes take 20 min); same draws either way
    body = rng.choices(words, cum_weights=cum_weights, k=n_words)
    lines = [" ".join(body[j : j + 16]) for j in range(0, n_words, 16)]
    return f"# Note {i} {body[0]}\n\n" + "\n".join(lines) + "\n"


def write_corpus(root: Path, n: int, cfg: BenchConfig, rng: random.Random) -> tuple[list[str], list[float]]:
    """``n`` one-chunk markdown files in folders of 1,000; returns the vocabulary and its cumulative weights."""
    words = _vocabulary(cfg.vocab, rng)
    weights = list(itertools.accumulate(1.0 / (r + 1) for r in range(len(words))))  # Zipf, s = 1, cumulative
    shutil.rmtree(root, ignore_errors=True)
    for i in range(n):
        d = root / f"f{i // 1000:04d}"
        if i % 1000 == 0:
            d.mkdir(parents=True, exist_ok=True)
        (d / f"n{i:07d}.md").write_text(_doc(i, words, weights, cfg.words_per_doc, rng), encoding="utf-8")
    return words, weights


def _median_ms(fn, args_list) -> tuple[float, float]:
    """Median wall and median CPU (this process, all threads) milliseconds per call."""
    fn(*args_list[0])  # warm-up
    wall, cpu = [], []
    for args in args_list:
        t0, c0 = time.perf_counter(), time.process_time()
        fn(*args)
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return statistics.median(wall), statistics.median(cpu)


class _Timer:
    """Wall and CPU seconds of a block (CPU time is what a busy shared machine distorts least)."""

    def __enter__(self):
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.t0, time.process_time() - self.c0


def bench_size(n: int, cfg: BenchConfig) -> dict:
    from qmdlab.search import bm25_search
    from qmdlab.search.vector import vector_search
    from qmdlab.store import Index, limits

    # The documents cap (250,000 by default, docs/RELIABILITY.md) would index only the first 250k
    # notes of a 1M-note corpus and time that instead; a user with that many notes raises it the
    # same way (the chunk and vector-byte caps are already above the sizes measured here).
    if n > limits.limit("documents"):
        os.environ[limits.ENV["documents"]] = str(n)
    rng = random.Random(cfg.seed + n)
    row: dict = {"n": n, "load_start": _load()}
    root, index_dir = cfg.work / f"corpus-{n}", cfg.work / f"index-{n}"
    t0 = time.perf_counter()
    words, weights = write_corpus(root, n, cfg, rng)
    row["write_files_s"] = time.perf_counter() - t0
    shutil.rmtree(index_dir, ignore_errors=True)
    idx = Index.open(index_dir)
    idx.add_collection("bench", root)
    with _Timer() as t:
        idx.update(["bench"])
    row["build_s"], row["build_cpu_s"] = t.wall, t.cpu
    row["chunks"] = idx.status()["chunks"]
    if row["chunks"] != n:  # a capacity limit or a skipped file: the row would time another size
        raise SystemExit(f"[{n}] indexed {row['chunks']} chunks, not {n}: see `qmdlab status` of {index_dir}")
    print(f"[{n}] build {row['build_s']:.1f} s, {row['chunks']} chunks", file=sys.stderr, flush=True)

    changed = rng.sample(range(n), max(1, n // 100))
    for i in changed:
        (root / f"f{i // 1000:04d}" / f"n{i:07d}.md").write_text(_doc(i, words, weights, cfg.words_per_doc, rng))
    with _Timer() as t:
        idx.update(["bench"])
    row["update_changed_s"], row["update_changed_cpu_s"] = t.wall, t.cpu
    with _Timer() as t:
        idx.update(["bench"])
    row["update_unchanged_s"], row["update_unchanged_cpu_s"] = t.wall, t.cpu
    print(
        f"[{n}] update 1%: {row['update_changed_s']:.1f} s, unchanged: {row['update_unchanged_s']:.2f} s",
        file=sys.stderr,
        flush=True,
    )

    mid = words[200:5000]  # neither stop-word-frequent nor unseen
    queries = [(idx, " ".join(rng.sample(mid, 3))) for _ in range(cfg.queries)]
    row["bm25_ms"], row["bm25_cpu_ms"] = _median_ms(lambda i, q: bm25_search(i, q, limit=10), queries)

    todo = idx.chunks_needing_vectors(FINGERPRINT)
    ids = todo["chunk_id"].to_list()
    vecs, qmat = ann_vectors(cfg.vectors, len(ids), cfg.queries, cfg.seed)
    row["vectors"] = cfg.vectors
    with _Timer() as t:
        for s in range(0, len(ids), 10_000):
            idx.store_vectors(ids[s : s + 10_000], vecs[s : s + 10_000], FINGERPRINT)
    row["store_vectors_s"], row["store_vectors_cpu_s"] = t.wall, t.cpu
    del vecs
    qvecs = [(idx, q) for q in qmat]
    with _Timer() as t:
        vector_search(idx, qvecs[0][1], fingerprint=FINGERPRINT, limit=10)
    row["vector_load_s"], row["vector_load_cpu_s"] = t.wall, t.cpu
    row["vector_ms"], row["vector_cpu_ms"] = _median_ms(
        lambda i, q: vector_search(i, q, fingerprint=FINGERPRINT, limit=10), qvecs
    )
    if cfg.ann:  # the shipped ANN path: vector_search(ann=...) with PipelineConfig(vector_index="hnsw")'s defaults
        from qmdlab.pipeline.config import PipelineConfig

        ann = PipelineConfig(vector_index="hnsw").ann()
        with _Timer() as t:  # builds the graph and saves it next to the index
            vector_search(idx, qvecs[0][1], fingerprint=FINGERPRINT, limit=10, ann=ann)
        row["ann_build_s"], row["ann_build_cpu_s"] = t.wall, t.cpu
        row["ann_file_mb"] = sum(p.stat().st_size for p in (index_dir / "ann").glob("*.faiss")) / 2**20
        walls = []
        rec = []
        for _, q in qvecs:
            want = {h.docno for h in vector_search(idx, q, fingerprint=FINGERPRINT, limit=10)}
            t0 = time.perf_counter()
            got = vector_search(idx, q, fingerprint=FINGERPRINT, limit=10, ann=ann)
            walls.append((time.perf_counter() - t0) * 1000)
            rec.append(len(want & {h.docno for h in got}) / 10)
        row["ann_ms"], row["ann_ms_min"] = statistics.median(walls), min(walls)
        row["ann_recall"] = statistics.fmean(rec)
        print(
            f"[{n}] ann build {row['ann_build_s']:.1f} s, query {row['ann_ms']:.2f} ms, "
            f"recall@10 {row['ann_recall']:.3f}",
            file=sys.stderr,
            flush=True,
        )
    print(
        f"[{n}] bm25 {row['bm25_ms']:.1f} ms, vector {row['vector_ms']:.1f} ms "
        f"(matrix load {row['vector_load_s']:.1f} s)",
        file=sys.stderr,
        flush=True,
    )
    row["rss_mb"] = _rss_mb()
    row["db_mb"] = sum(p.stat().st_size for p in index_dir.glob("index.sqlite*")) / 2**20
    row["load_end"] = _load()
    idx.close()
    if not cfg.keep:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(index_dir, ignore_errors=True)
    return row


class _MatrixOnly:
    """Just enough of an :class:`~qmdlab.store.Index` for :func:`~qmdlab.search.vector.vector_search`
    without collection filters: its in-memory matrix (what a loaded index holds after the first query)."""

    def __init__(self, vm):
        self._vm = vm

    def vector_matrix(self, fingerprint: str):
        return self._vm


def bench_vectors_only(n: int, cfg: BenchConfig) -> dict:
    """Exact ``vector_search`` over ``n`` random one-chunk documents held in memory (no SQLite):
    the query side at sizes whose index build does not fit the session."""
    from qmdlab.search.vector import vector_search
    from qmdlab.store.index import VectorMatrix

    row: dict = {"n": n, "load_start": _load(), "vectors_only": True}
    rng = np.random.default_rng(cfg.seed)
    with _Timer() as t:
        mat = rng.standard_normal((n, DIM), dtype=np.float32)
        mat /= np.linalg.norm(mat, axis=1, keepdims=True)
        vm = VectorMatrix(np.arange(n, dtype=np.int64), [f"bench/f{i // 1000:04d}/n{i:07d}.md" for i in range(n)], mat)
    row["matrix_build_s"], row["matrix_build_cpu_s"] = t.wall, t.cpu
    idx = _MatrixOnly(vm)
    qvecs = [(idx, rng.standard_normal(DIM, dtype=np.float32)) for _ in range(cfg.queries)]
    row["vector_ms"], row["vector_cpu_ms"] = _median_ms(
        lambda i, q: vector_search(i, q, fingerprint=FINGERPRINT, limit=10), qvecs
    )
    row["matrix_mb"] = mat.nbytes / 2**20
    row["rss_mb"] = _rss_mb()
    row["load_end"] = _load()
    print(
        f"[{n}] vectors only: exact vector {row['vector_ms']:.1f} ms wall, {row['vector_cpu_ms']:.1f} ms CPU",
        file=sys.stderr,
        flush=True,
    )
    return row


ANN_LIBS = ("hnswlib", "usearch", "faiss")
ANN_EFS = (16, 32, 64, 128, 256)
ANN_M, ANN_EF_CONSTRUCTION = 16, 100
CISI_INDEX = Path.home() / ".cache/qmdlab/eval/cisi/index/index.sqlite"


def _rss_now_mb() -> float:
    """Current (not peak) resident memory of this process."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _cisi_gaussian(cisi: Path) -> tuple[np.ndarray, np.ndarray]:
    """Mean and a square root of the covariance of the real MiniLM chunk vectors of a CISI index."""
    import sqlite3

    con = sqlite3.connect(f"file:{cisi}?mode=ro", uri=True)
    rows = con.execute("SELECT blob FROM vectors WHERE fingerprint LIKE '%minilm%'").fetchall()
    con.close()
    if not rows:
        raise SystemExit(f"{cisi}: no MiniLM vectors (run `qmdlab eval cisi` with the default embedder first)")
    real = _unit(np.frombuffer(b"".join(r[0] for r in rows), dtype=np.float32).reshape(len(rows), -1))
    w, v = np.linalg.eigh(np.cov(real, rowvar=False))
    return real.mean(axis=0), v * np.sqrt(np.clip(w, 0, None))


def ann_vectors(kind: str, n: int, n_queries: int, seed: int, cisi: Path = CISI_INDEX) -> tuple[np.ndarray, np.ndarray]:
    """``n`` unit vectors and ``n_queries`` query vectors (384-d) of one kind.

    - ``random``: isotropic Gaussian, the worst case for ANN recall (no structure to exploit);
    - ``clustered``: ``n // 100`` random centres, each point its centre plus isotropic noise of the
      same norm (cosine to its centre ~0.7, to a same-cluster point ~0.5, the range of related
      passages under MiniLM); queries drawn the same way;
    - ``cisi``: a Gaussian with the mean and covariance of the 1,460 real all-MiniLM-L6-v2 CISI
      vectors (their anisotropic spectrum, no cluster structure added); needs ``cisi``.
    """
    rng = np.random.default_rng(seed + n)
    m = n + n_queries
    if kind == "random":
        x = rng.standard_normal((m, DIM), dtype=np.float32)
    elif kind == "clustered":
        centres = _unit(rng.standard_normal((max(10, n // 100), DIM), dtype=np.float32))
        noise = _unit(rng.standard_normal((m, DIM), dtype=np.float32))
        x = centres[rng.integers(0, len(centres), m)] + noise
    elif kind == "cisi":
        mean, root = _cisi_gaussian(cisi)
        x = mean + (rng.standard_normal((m, DIM), dtype=np.float32) @ root.T).astype(np.float32)
    else:
        raise SystemExit(f"unknown vector set {kind!r}; choose random, clustered or cisi")
    x = _unit(x)
    return x[:n], x[n:]


class _Ann:
    """One library's HNSW index behind a common build / set_ef / query interface (1 thread)."""

    def __init__(self, lib: str, dim: int):
        self.lib = lib
        if lib == "hnswlib":
            import hnswlib

            self.ix = hnswlib.Index(space="ip", dim=dim)
        elif lib == "usearch":
            from usearch.index import Index

            self.ix = Index(ndim=dim, metric="ip", dtype="f32", connectivity=ANN_M, expansion_add=ANN_EF_CONSTRUCTION)
        elif lib == "faiss":
            import faiss

            faiss.omp_set_num_threads(1)
            self.ix = faiss.IndexHNSWFlat(dim, ANN_M, faiss.METRIC_INNER_PRODUCT)
            self.ix.hnsw.efConstruction = ANN_EF_CONSTRUCTION
        else:
            raise SystemExit(f"unknown ANN library {lib!r}; choose from {', '.join(ANN_LIBS)}")

    def build(self, x: np.ndarray) -> None:
        if self.lib == "hnswlib":
            self.ix.init_index(max_elements=len(x), M=ANN_M, ef_construction=ANN_EF_CONSTRUCTION, random_seed=0)
            self.ix.set_num_threads(1)
            self.ix.add_items(x, np.arange(len(x)), num_threads=1)
        elif self.lib == "usearch":
            self.ix.add(np.arange(len(x)), x, threads=1)
        else:
            self.ix.add(x)

    def set_ef(self, ef: int) -> None:
        if self.lib == "hnswlib":
            self.ix.set_ef(ef)
        elif self.lib == "usearch":
            self.ix.expansion_search = ef
        else:
            self.ix.hnsw.efSearch = ef

    def query(self, q: np.ndarray, k: int) -> np.ndarray:
        if self.lib == "hnswlib":
            return self.ix.knn_query(q[None, :], k=k, num_threads=1)[0][0]
        if self.lib == "usearch":
            return self.ix.search(q, k, threads=1).keys
        return self.ix.search(q[None, :], k)[1][0]

    def size_mb(self, tmp: Path) -> float:
        path = tmp / f"ann.{self.lib}"
        if self.lib == "hnswlib":
            self.ix.save_index(str(path))
        elif self.lib == "usearch":
            self.ix.save(str(path))
        else:
            import faiss

            faiss.write_index(self.ix, str(path))
        size = path.stat().st_size / 2**20
        path.unlink()
        return size


def bench_ann(n: int, kind: str, libs: list[str], cfg: BenchConfig, efs=ANN_EFS, k: int = 10) -> list[dict]:
    """Exact vs ANN top-``k`` over ``n`` in-memory vectors of one kind: one row for exact search and
    one per (library, ef): build wall/CPU seconds, resident-memory growth and file size of the
    index, min/median query latency over ``cfg.queries`` single queries (1 thread), recall@k
    against exact top-``k`` (mean over the queries)."""
    import gc

    x, qs = ann_vectors(kind, n, cfg.queries, cfg.seed)
    truth = []
    wall, cpu = [], []
    for q in qs:  # exact: what vector_search does for one query (matrix-vector product + top-k)
        t0, c0 = time.perf_counter(), time.process_time()
        s = x @ q
        top = np.argpartition(-s, k)[:k]
        truth.append(set(top[np.argsort(-s[top])].tolist()))
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    base = {"n": n, "vectors": kind, "queries": len(qs)}
    rows = [
        {
            **base,
            "method": "exact",
            "ef": None,
            "build_s": 0.0,
            "build_cpu_s": 0.0,
            "mem_mb": x.nbytes / 2**20,
            "file_mb": None,
            "query_ms_min": min(wall),
            "query_ms_median": statistics.median(wall),
            "query_cpu_ms_median": statistics.median(cpu),
            "recall": 1.0,
            "load": _load(),
        }
    ]
    print(f"[ann {kind} {n}] exact {rows[0]['query_ms_median']:.2f} ms", file=sys.stderr, flush=True)
    for lib in libs:
        gc.collect()
        rss0 = _rss_now_mb()
        ann = _Ann(lib, DIM)
        load0 = _load()
        with _Timer() as t:
            ann.build(x)
        mem = _rss_now_mb() - rss0
        file_mb = ann.size_mb(cfg.work)
        print(
            f"[ann {kind} {n}] {lib} build {t.wall:.1f} s ({t.cpu:.1f} s CPU), +{mem:.0f} MB",
            file=sys.stderr,
            flush=True,
        )
        for ef in efs:
            ann.set_ef(max(ef, k))
            ann.query(qs[0], k)  # warm-up
            wall, cpu, rec = [], [], []
            for q, want in zip(qs, truth):
                t0, c0 = time.perf_counter(), time.process_time()
                got = ann.query(q, k)
                wall.append((time.perf_counter() - t0) * 1000)
                cpu.append((time.process_time() - c0) * 1000)
                rec.append(len(want & {int(i) for i in got}) / k)
            rows.append(
                {
                    **base,
                    "method": lib,
                    "ef": ef,
                    "build_s": t.wall,
                    "build_cpu_s": t.cpu,
                    "mem_mb": mem,
                    "file_mb": file_mb,
                    "query_ms_min": min(wall),
                    "query_ms_median": statistics.median(wall),
                    "query_cpu_ms_median": statistics.median(cpu),
                    "recall": statistics.fmean(rec),
                    "load": (load0 + _load()) / 2,
                }
            )
            print(
                f"[ann {kind} {n}] {lib} ef={ef}: {rows[-1]['query_ms_median']:.3f} ms, "
                f"recall@{k} {rows[-1]['recall']:.3f}",
                file=sys.stderr,
                flush=True,
            )
        del ann
    return rows


def plot(rows: list[dict], path: Path, vec_rows: list[dict] = (), ann_rows: list[dict] = (), cpu: bool = False) -> None:
    """Three panels: index work and query latency against collection size, and (when ``ann_rows``
    are given) recall@10 against query latency of every ANN library and ``ef`` at the largest size.

    ``cpu``: plot the CPU seconds of the process (the ``*_cpu_*`` keys) instead of wall time — what
    a shared, loaded machine distorts least; the HNSW query has wall time only and says so."""

    def key_of(k: str) -> str:
        if not cpu or k == "ann_ms":
            return k
        return k[:-3] + "_cpu_ms" if k.endswith("_ms") else k[:-2] + "_cpu_s"

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 3 if ann_rows else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4.2))
    a, b = axes[0], axes[1]
    ns = [r["n"] for r in rows]
    for key, label in (
        ("build_s", "build (s)"),
        ("update_changed_s", "update, 1% changed (s)"),
        ("update_unchanged_s", "update, unchanged (s)"),
        ("store_vectors_s", "store vectors (s)"),
        ("vector_load_s", "vector matrix load (s)"),
        ("ann_build_s", "HNSW graph build (s)"),
    ):
        pts = [(r["n"], r[key_of(key)]) for r in rows if r.get(key_of(key)) is not None]
        if pts:
            a.plot(*zip(*pts), marker="o", label=label)
    for key, label in (
        ("bm25_ms", "BM25 query"),
        ("vector_ms", "exact vector query"),
        ("ann_ms", "HNSW vector query (ef 512)"),
    ):
        pts = [(r["n"], r[key_of(key)]) for r in rows if r.get(key_of(key)) is not None]
        if pts:
            b.plot(*zip(*pts), marker="o", label=label + (" (wall)" if cpu and key == "ann_ms" else ""))
    if vec_rows:
        b.plot(
            [r["n"] for r in vec_rows],
            [r["vector_cpu_ms"] for r in vec_rows],
            marker="s",
            linestyle="--",
            label="exact vector query, in memory (CPU ms)",
        )
    b.axhline(100, color="grey", linestyle=":", label="100 ms (interactive)")
    clock = "CPU of the process" if cpu else "wall"
    for ax, title, unit in ((a, f"index work ({clock})", "seconds"), (b, f"query latency (median, {clock})", "ms")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("chunks")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    if ann_rows:
        c = axes[2]
        n_max = max(r["n"] for r in ann_rows)
        for (lib, kind), marker in zip(
            sorted({(r["method"], r["vectors"]) for r in ann_rows if r["n"] == n_max and r["method"] != "exact"}),
            "ov^sD<>pP*x+",
        ):
            pts = sorted(
                (r["query_ms_median"], r["recall"])
                for r in ann_rows
                if r["n"] == n_max and r["method"] == lib and r["vectors"] == kind
            )
            c.plot(*zip(*pts), marker=marker, label=f"{lib}, {kind}")
        for r in ann_rows:
            if r["n"] == n_max and r["method"] == "exact":
                c.axvline(r["query_ms_median"], color="grey", linestyle="--", linewidth=0.8)
        c.axhline(0.95, color="grey", linestyle=":", label="recall@10 0.95")
        c.set_xscale("log")
        c.set_xlabel("query ms (median, 1 thread); dashed: exact")
        c.set_ylabel("recall@10 vs exact")
        c.set_title(f"HNSW at {n_max:,} vectors (M 16, ef 32-512)", fontsize=9)
        c.legend(fontsize=6)
    loads = ", ".join(f"{r['n']}: {r['load_start']:.1f}-{r['load_end']:.1f}" for r in rows)
    fig.suptitle(f"qmdlab on one shared 2-core machine (1-min load per size {loads})", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="*", default=BenchConfig().sizes)
    p.add_argument("--out", type=Path, default=BenchConfig.out)
    p.add_argument("--work", type=Path, default=BenchConfig.work)
    p.add_argument("--queries", type=int, default=BenchConfig.queries)
    p.add_argument("--no-plot", action="store_true", help="Skip the matplotlib figure.")
    p.add_argument(
        "--plot-only",
        action="store_true",
        help="Only draw the figure from <out>/scale.json, scale-vectors.json and ann.json.",
    )
    p.add_argument("--png", type=Path, default=None, help="Where the figure goes (default <out>/scale.png).")
    p.add_argument("--cpu", action="store_true", help="Plot CPU seconds of the process instead of wall time.")
    p.add_argument("--keep", action="store_true", help="Keep the corpora and indexes under --work.")
    p.add_argument("--append", action="store_true", help="Add to the rows already in <out>/scale.json.")
    p.add_argument(
        "--vectors-only",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="Also time exact vector_search over N in-memory random vectors (no index build).",
    )
    p.add_argument(
        "--vectors",
        default=BenchConfig.vectors,
        choices=["random", "clustered", "cisi"],
        help="Vectors stored in the --sizes indexes (see ann_vectors).",
    )
    p.add_argument("--no-ann", action="store_true", help="--sizes: skip the vector_search(ann=...) timing.")
    p.add_argument(
        "--ann",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="Exact vs ANN (build, memory, latency, recall@10) over N in-memory vectors per --ann-vectors.",
    )
    p.add_argument(
        "--ann-vectors",
        nargs="*",
        default=["random", "clustered"],
        metavar="KIND",
        help="Vector sets for --ann: random (worst case), clustered, cisi (MiniLM spectrum; needs the "
        "CISI eval index).",
    )
    p.add_argument(
        "--ann-libs",
        nargs="*",
        default=list(ANN_LIBS),
        metavar="LIB",
        help=f"ANN libraries for --ann (of {', '.join(ANN_LIBS)}).",
    )
    p.add_argument(
        "--ann-efs",
        type=int,
        nargs="*",
        default=list(ANN_EFS),
        metavar="EF",
        help="Search breadths (ef) swept for each ANN index.",
    )
    a = p.parse_args(argv)
    cfg = BenchConfig(
        sizes=a.sizes, out=a.out, work=a.work, queries=a.queries, keep=a.keep, vectors=a.vectors, ann=not a.no_ann
    )
    cfg.out.mkdir(parents=True, exist_ok=True)
    rows = json.loads((cfg.out / "scale.json").read_text())["rows"] if a.append else []
    for n in cfg.sizes:
        rows.append(bench_size(n, cfg))
        (cfg.out / "scale.json").write_text(
            json.dumps({"config": {**asdict(cfg), "out": str(cfg.out), "work": str(cfg.work)}, "rows": rows}, indent=1)
        )
    vec_rows = []
    for n in a.vectors_only:
        vec_rows.append(bench_vectors_only(n, cfg))
        (cfg.out / "scale-vectors.json").write_text(json.dumps({"rows": vec_rows}, indent=1))
    ann_rows = []
    for n in a.ann:
        for kind in a.ann_vectors:
            ann_rows.extend(bench_ann(n, kind, a.ann_libs, cfg, efs=a.ann_efs))
            (cfg.out / "ann.json").write_text(
                json.dumps({"rows": ann_rows, "m": ANN_M, "ef_construction": ANN_EF_CONSTRUCTION}, indent=1)
            )
    rows.sort(key=lambda r: r["n"])
    if a.plot_only:
        rows = json.loads((cfg.out / "scale.json").read_text())["rows"]
        for name in ("scale-vectors.json", "ann.json"):
            if (cfg.out / name).exists():
                (vec_rows if name.startswith("scale") else ann_rows).extend(
                    json.loads((cfg.out / name).read_text())["rows"]
                )
    if rows and not a.no_plot:
        plot(sorted(rows, key=lambda r: r["n"]), a.png or cfg.out / "scale.png", vec_rows, ann_rows, cpu=a.cpu)
    rows = rows + vec_rows + ann_rows
    for r in rows:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

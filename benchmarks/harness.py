"""The benchmark harness: sizes, timing (alternated A B B A repeats), rows, the shared synthetic data.

Used by the row modules (`rows_search.py`, `rows_retune.py`, `rows_store.py`, `rows_models.py`, `rows_query.py`) and `bench.py`; all import each other through the `benchmarks` package.
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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
if str(ROOT) not in sys.path:  # run as a script: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_data  # noqa: E402

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

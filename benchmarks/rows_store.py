"""Benchmark rows: unchanged and changed `update`, index builds and peak memory."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

# On a machine whose cores are already busy, OpenBLAS's (and llama.cpp's OpenMP) worker threads
# spin-wait for each other: a 2-thread matvec or decode then runs several times slower, and
# erratically. One BLAS thread and passive OpenMP waiting keep the timings stable; the stage and
# its raw baseline always run under the same setting. Export the variables to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


from benchmarks.harness import (
    LAST_MINS,
    ROOT,
    Row,
    Work,
    add,
    bench_data,
    paired,
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

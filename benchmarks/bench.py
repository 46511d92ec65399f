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
offline models are absent (``qmdlab pull --preset offline``). Rows without a goal
are ``info``. The table is printed and written as JSON and markdown under ``--out``
(default ``results/bench``; ``latest.json``/``latest.md`` are the newest run).

Groups (``--only``/``--skip``): bm25, bm25s, vector, retune, update, build, embed, rerank,
expand, query, cli, memory — one module per kind: ``search.py`` (bm25, bm25s, vector),
``retune.py``, ``store.py`` (update, build, memory), ``models.py`` (embed, rerank, expand) and
``query.py`` (query, cli), on the timing and data of ``harness.py``. Absolute times are noisy on a shared machine; the ratios are the result.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

# On a machine whose cores are already busy, OpenBLAS's (and llama.cpp's OpenMP) worker threads
# spin-wait for each other: a 2-thread matvec or decode then runs several times slower, and
# erratically. One BLAS thread and passive OpenMP waiting keep the timings stable; the stage and
# its raw baseline always run under the same setting. Export the variables to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run as a script: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(HERE.parent))

from benchmarks.harness import GROUPS, ROOT, ROWS, SIZES, THREADS, Row, Work, add, fmt, model_status  # noqa: E402
from benchmarks.rows_models import bench_embed, bench_expand, bench_rerank  # noqa: E402
from benchmarks.rows_query import bench_cli, bench_query  # noqa: E402
from benchmarks.rows_retune import bench_retune  # noqa: E402
from benchmarks.rows_search import bench_bm25, bench_bm25s, bench_vector  # noqa: E402
from benchmarks.rows_store import bench_build, bench_memory, bench_update  # noqa: E402

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
        from qmdlab.models._llama import import_llama_cpp

        llama_cpp = import_llama_cpp()  # loads llama.cpp's CPU backend (run-time dispatch)

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

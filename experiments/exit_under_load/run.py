"""Does ``qmdlab query`` ever end by a signal on a loaded machine?

Usage::

    .venv/bin/python experiments/exit_under_load/run.py [--runs 20] [--busy 2] [--out DIR]

Indexes the bundled corpus as a new user would (``qmdlab collection add data/corpus --name notes``,
``qmdlab embed``) in a fresh ``QMDLAB_HOME``, starts ``--busy`` CPU-bound processes beside it, and
runs ``qmdlab query "how do I restore the database from a backup"`` ``--runs`` times in each mode:

- ``default``: the offline preset's default stages;
- ``expand+rerank, budget 2 s``: ``--expand --rerank`` with ``stage_budget_s: 2`` in a config file,
  so the budget stops the expander and the reranker mid-call — the path that once ended in SIGSEGV.

Prints one row per mode (exit statuses, signals, wall seconds min/median/max, the first stderr line of
the last run) and the 1-minute load, and writes ``runs.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUERY = "how do I restore the database from a backup"


def _spin() -> None:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        pass


def _qmdlab() -> str:
    exe = Path(sys.executable).with_name("qmdlab")
    return str(exe) if exe.exists() else "qmdlab"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--busy", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="qmdlab-exit-"))
    out = args.out or work
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QMDLAB_")}
    env["QMDLAB_HOME"] = str(work / "home")
    q = _qmdlab()
    subprocess.run(
        [q, "collection", "add", str(ROOT / "data" / "corpus"), "--name", "notes"],
        env=env,
        check=True,
        capture_output=True,
    )
    subprocess.run([q, "embed"], env=env, check=True, capture_output=True)
    budget_cfg = work / "budget.yaml"
    budget_cfg.write_text("stage_budget_s: 2\n")
    modes = {
        "default": [q, "query", QUERY],
        "expand+rerank, budget 2 s": [q, "query", QUERY, "--expand", "--rerank", "--config", str(budget_cfg)],
    }
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    rows = {}
    try:
        for name, cmd in modes.items():
            runs = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                r = subprocess.run(cmd, env=env, capture_output=True, text=True)
                runs.append(
                    {
                        "status": r.returncode,
                        "wall_s": round(time.perf_counter() - t0, 3),
                        "results": sum(1 for line in r.stdout.splitlines() if "score" in line),
                        "stderr_first": (r.stderr.strip().splitlines() or [""])[0],
                        "load1": os.getloadavg()[0],
                    }
                )
            rows[name] = runs
            walls = [x["wall_s"] for x in runs]
            codes = sorted({x["status"] for x in runs})
            print(
                f"{name:28s} runs {len(runs)}  exit statuses {codes}  signals {sum(x['status'] < 0 for x in runs)}  "
                f"no results {sum(x['results'] == 0 for x in runs)}  wall s min/median/max "
                f"{min(walls):.2f}/{statistics.median(walls):.2f}/{max(walls):.2f}  load {runs[-1]['load1']:.1f}"
            )
            print(f"{'':28s} stderr: {runs[-1]['stderr_first']}")
    finally:
        for p in busy:
            p.terminate()
    (out / "runs.json").write_text(json.dumps({"busy": args.busy, "modes": rows}, indent=2) + "\n")
    return 0 if all(x["status"] == 0 for runs in rows.values() for x in runs) else 1


if __name__ == "__main__":
    sys.exit(main())

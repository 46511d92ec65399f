"""Do two ``qmdlab eval --out`` directories hold the same results? (the "no behaviour change" check)

Used for refactors: each refactor commit C and its parent evaluated the same suite in
separate ``QMDLAB_HOME``s (so no trace cache is shared), e.g. ::

    git worktree add ../wt-old C^ && git worktree add ../wt-new C
    for wt in ../wt-old ../wt-new; do (cd $wt && PYTHONPATH=$wt QMDLAB_HOME=$wt.home \\
        python -m qmdlab.cli eval default --preset fake --ablate --out $wt.out --no-progress); done
    python scripts/compare_runs.py ../wt-old.out ../wt-new.out --tol 1e-9

Compared: every TREC run file (the main run and each ablation row: same (qid, docno) pairs, same
ranks, scores within ``--tol``; the files carry 9 decimals), every number in ``metrics.json``
except timings, and every per-query metric in ``per_query.parquet`` (full float64). Exit status 1
when anything differs, so a script can chain it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TIMING_KEYS = ("_s", "time", "seconds", "wall")


def load_trec(path: Path) -> dict[tuple[str, str], tuple[int, float]]:
    """``{(qid, docno): (rank, score)}`` of a TREC run file."""
    out = {}
    for line in path.read_text().splitlines():
        qid, _, docno, rank, score, _name = line.split()
        out[(qid, docno)] = (int(rank), float(score))
    return out


def numbers(d, prefix: str = ""):
    """``(path, value)`` of every number in a JSON document (booleans excluded).

    >>> dict(numbers({"a": {"ndcg@10": 0.5, "ok": True}, "b": [1]}))
    {'/a/ndcg@10': 0.5}
    """
    if isinstance(d, dict):
        for k, v in d.items():
            yield from numbers(v, f"{prefix}/{k}")
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        yield prefix, float(d)


def compare(a: Path, b: Path, tol: float) -> list[str]:
    """Lines describing the comparison; a line starting with ``DIFF`` is a difference."""
    import polars as pl

    lines, worst, rows = [], 0.0, 0
    files = sorted(f.name for f in a.glob("*.trec"))
    for name in files:
        if not (b / name).exists():
            lines.append(f"DIFF {name}: missing in {b}")
            continue
        x, y = load_trec(a / name), load_trec(b / name)
        if x.keys() != y.keys() or any(x[k][0] != y[k][0] for k in x):
            lines.append(f"DIFF {name}: other documents or ranks")
            continue
        worst = max([worst, *(abs(x[k][1] - y[k][1]) for k in x)])
        rows += len(x)
    lines.append(f"{len(files)} run files, {rows} (qid, docno) rows, max |score diff| {worst:.3g}")
    if worst > tol:
        lines.append(f"DIFF run scores differ by {worst:.3g} > {tol:g}")
    ma = dict(numbers(json.loads((a / "metrics.json").read_text())))
    mb = dict(numbers(json.loads((b / "metrics.json").read_text())))
    keys = [k for k in ma.keys() & mb.keys() if not any(t in k for t in TIMING_KEYS)]
    mw = max((abs(ma[k] - mb[k]) for k in keys), default=0.0)
    lines.append(f"metrics.json: {len(keys)} numbers, max |diff| {mw:.3g}")
    if mw > tol or set(ma) != set(mb):
        lines.append(f"DIFF metrics.json (max |diff| {mw:.3g}, keys only in one: {sorted(set(ma) ^ set(mb))[:5]})")
    pa, pb = pl.read_parquet(a / "per_query.parquet"), pl.read_parquet(b / "per_query.parquet")
    num = [c for c, t in pa.schema.items() if t.is_numeric() and c in pb.columns]
    keys = [c for c in pa.columns if c not in num]
    joined = pa.join(pb, on=keys, suffix="_b")
    pw = max((float((joined[c] - joined[f"{c}_b"]).abs().max() or 0.0) for c in num), default=0.0)
    lines.append(f"per_query: {joined.height} of {pa.height} / {pb.height} rows joined, max |diff| {pw:.3g}")
    if joined.height != pa.height or pa.height != pb.height or pw > tol:
        lines.append("DIFF per-query metrics")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="an eval --out directory")
    ap.add_argument("b", type=Path, help="the other one")
    ap.add_argument("--tol", type=float, default=1e-9, help="largest allowed absolute difference")
    args = ap.parse_args(argv)
    for d in (args.a, args.b):
        if not (d / "metrics.json").exists():
            ap.error(f"{d} has no metrics.json: give the --out directory of a finished `qmdlab eval`")
    lines = compare(args.a, args.b, args.tol)
    print(f"{args.a} vs {args.b}:")
    print("\n".join(f"  {line}" for line in lines))
    return 1 if any(line.startswith("DIFF") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())

"""qmd's bench measures on qmdlab's rankings, so a qmd bench fixture scores the same way in both.

For one query with expected files ``E`` and qmd's ``expected_in_top_k`` = ``k``, over the
result list cut at ``max(k, 10)`` (the depth ``qmd bench`` asks each backend for):

- ``hits@k``: expected files matched (:func:`qmdlab.eval.loaders.qmdbench.paths_match`) by a result
  within the top ``k``;
- ``P@k`` = ``hits@k / min(k, |E|)`` — qmd's "hit within k" (1.0: every expected file that
  fits in ``k`` places is there);
- ``R@1``, ``R@3``, ``R@5``: share of ``E`` found within the top 1/3/5; ``recall``: share of
  ``E`` anywhere in the list;
- ``MRR``: 1 / rank of the first result that matches any expected file (0 when none);
- ``F1``: harmonic mean of ``P@k`` and ``recall``.

Means are plain averages over queries, per ``type`` and overall, as ``qmd bench`` prints its
summary. nDCG@10/MRR@10 with ranx come from the ordinary suite evaluation beside it
(:func:`qmdlab.eval.runner.run_suite`).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from .loaders.qmdbench import BenchFixture, BenchQuery, paths_match

MEASURES = ("P@k", "R@1", "R@3", "R@5", "MRR", "F1")
_COLUMNS = {
    "P@k": "precision_at_k",
    "R@1": "recall_at_1",
    "R@3": "recall_at_3",
    "R@5": "recall_at_5",
    "MRR": "mrr",
    "F1": "f1",
}


def _hits(results: list[str], expected: tuple[str, ...], k: int) -> int:
    top = results[:k]
    return sum(any(paths_match(r, e) for r in top) for e in expected)


def score_query(results: list[str], query: BenchQuery) -> dict[str, float]:
    """qmd's measures of one ranked list of collection-relative paths (see the module notes).

    >>> from qmdlab.eval.loaders.qmdbench import BenchQuery
    >>> q = BenchQuery("q", "x", "exact", "", ("a.md", "b.md", "c.md"), 2)
    >>> s = score_query(["z.md", "a.md", "c.md"], q)
    >>> s["hits_at_k"], s["precision_at_k"], s["recall_at_1"], round(s["recall_at_3"], 4), s["mrr"]
    (1, 0.5, 0.0, 0.6667, 0.5)
    """
    results = results[: max(query.k, 10)]
    n = len(query.expected_files)
    hits = _hits(results, query.expected_files, query.k)
    matched = sum(any(paths_match(r, e) for r in results) for e in query.expected_files)
    mrr = next((1.0 / i for i, r in enumerate(results, 1) if any(paths_match(r, e) for e in query.expected_files)), 0.0)
    p = hits / min(query.k, n)
    recall = matched / n
    return {
        "hits_at_k": hits,
        "total_expected": n,
        "precision_at_k": p,
        "recall": recall,
        "recall_at_1": _hits(results, query.expected_files, 1) / n,
        "recall_at_3": _hits(results, query.expected_files, 3) / n,
        "recall_at_5": _hits(results, query.expected_files, 5) / n,
        "mrr": mrr,
        "f1": 2 * p * recall / (p + recall) if p + recall > 0 else 0.0,
    }


def rankings_from_final(final: pl.DataFrame, docid) -> dict[str, list[str]]:
    """``{qid: [collection-relative path, …]}`` in rank order from a trace's ``final`` table;
    ``docid`` maps a qmdlab docno to the collection's id (:meth:`qmdlab.eval.suites.Suite.docid`)."""
    out: dict[str, list[str]] = {}
    for qid, docno in final.sort(["qid", "final_rank"]).select("qid", "docno").iter_rows():
        out.setdefault(qid, []).append(docid(docno))
    return out


def read_trec_rankings(path: str | Path) -> dict[str, list[str]]:
    """``{qid: [docid, …]}`` in rank order from a TREC run file (``qid Q0 docid rank score run``)."""
    rows: dict[str, list[tuple[int, str]]] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 4:
            rows.setdefault(parts[0], []).append((int(parts[3]), parts[2]))
    return {q: [d for _, d in sorted(v)] for q, v in rows.items()}


def per_query(fixture: BenchFixture, rankings: dict[str, list[str]], run: str = "qmdlab") -> pl.DataFrame:
    """One row per fixture query: ``run, qid, type, query`` and qmd's measures (a query with
    no results scores 0 everywhere)."""
    rows = []
    for q in fixture.queries:
        rows.append(
            {
                "run": run,
                "qid": q.id,
                "type": q.type or "(none)",
                "query": q.query,
                "k": q.k,
                **score_query(rankings.get(q.id, []), q),
            }
        )
    return pl.DataFrame(rows)


def summary(table: pl.DataFrame) -> pl.DataFrame:
    """Means of :func:`per_query` rows per ``run`` and ``type``, plus an ``all`` row per run.

    Columns: ``run, type, queries, hits, expected`` (sums of ``hits@k`` and ``min(k, |E|)``)
    and the mean of each of :data:`MEASURES`.
    """
    aggs = [
        pl.len().alias("queries"),
        pl.col("hits_at_k").sum().alias("hits"),
        pl.min_horizontal("k", "total_expected").sum().alias("expected"),
        *[pl.col(c).mean().alias(m) for m, c in _COLUMNS.items()],
    ]
    by_type = table.group_by("run", "type", maintain_order=True).agg(aggs)
    overall = table.group_by("run", maintain_order=True).agg(aggs).with_columns(pl.lit("all").alias("type"))
    return pl.concat([by_type, overall.select(by_type.columns)]).sort(
        pl.col("run").cast(pl.Enum(table["run"].unique(maintain_order=True).to_list())), pl.col("type") == "all", "type"
    )


def format_summary(summ: pl.DataFrame) -> str:
    """The summary the way ``qmd bench`` prints it (``P@k=… R@1=… R@3=… R@5=… MRR=… F1=…``), one
    line per run and query type, the type ``all`` last."""
    lines = ["qmd bench measures (hit within expected_in_top_k = P@k):", "-" * 70]
    for r in summ.iter_rows(named=True):
        vals = " ".join(f"{m}={r[m]:6.3f}" for m in MEASURES)
        lines.append(
            f"  {r['run']:<24} {r['type']:<12} {vals}  hits {r['hits']}/{r['expected']} in {r['queries']} queries"
        )
    return "\n".join(lines)


def bench_report(fixture: BenchFixture, runs: dict[str, dict[str, list[str]]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(per_query, summary)`` of several runs (``{run: {qid: [path, …]}}``), runs in the given order."""
    table = pl.concat([per_query(fixture, rk, run) for run, rk in runs.items()])
    return table, summary(table)


def runs_in(out_dir: str | Path, main: str) -> dict[str, dict[str, list[str]]]:
    """The rankings of every ``<run>.trec`` file of a results directory, ``main`` first."""
    out_dir = Path(out_dir)
    files = sorted(out_dir.glob("*.trec"), key=lambda p: (p.stem != main, p.stem))
    return {p.stem: read_trec_rankings(p) for p in files}


def write_report(out_dir: str | Path, table: pl.DataFrame, summ: pl.DataFrame) -> Path:
    """``qmd-bench.json`` (summary rows and per-query rows) in the results directory."""
    path = Path(out_dir) / "qmd-bench.json"
    path.write_text(json.dumps({"summary": summ.to_dicts(), "per_query": table.to_dicts()}, indent=1), encoding="utf-8")
    return path


def print_bench(suite, res, echo=print, warn=None) -> Path:
    """After ``qmdlab eval FIXTURE --format qmd-bench``: qmd's measures for the main run (per type
    and overall) and, with ``--ablate``, one ``all`` line per ablation row, from the run files of
    the results directory; ``warn`` gets a line about expected files no corpus file matches;
    writes ``qmd-bench.json`` and returns its path."""
    from .loaders.qmdbench import corpus_files, read_fixture, unmatched_expected
    from .runfiles import file_safe

    fixture = read_fixture(suite.path)
    main_name = file_safe(res.name)
    table, summ = bench_report(fixture, runs_in(res.out_dir, main_name))
    main = summ.filter(pl.col("run") == main_name)
    others = summ.filter((pl.col("run") != main_name) & (pl.col("type") == "all"))
    echo("")
    echo(format_summary(pl.concat([main, others])))
    missing = unmatched_expected(fixture, corpus_files(suite.corpus_dir(), suite.mask, suite.ignore))
    if missing:
        (warn or echo)(
            f"warning: {len(missing)} expected file(s) match no file of {suite.corpus_dir()} and count "
            "as misses: " + ", ".join(f"{q}: {f}" for q, f in missing[:5])
        )
    return write_report(res.out_dir, table, summ)

"""Where does qmdlab's BM25 lose to a plain SQLite FTS5 baseline on CISI?  One factor at a time.

Two parts:

A. **Raw FTS5 factor table** (CISI). The reference is the plainest FTS5 setup: a table over
   ``title, body`` (title + abstract only), ``porter unicode61``, every query word quoted and
   OR-ed, ``bm25(t, 4, 1)``, no prefix, no stopword list; words of one character are left
   out (that detail reproduces the issue's 0.371; keeping them gives 0.3635). "qmdlab (emulated)" rebuilds what
   qmdlab's store indexes for a SMART suite — a ``filepath`` column (``cisi/17.md``), the title,
   and a body that repeats the title as a ``# heading`` line — queried the way qmdlab's builder
   did before the query-term-frequency change (prefix terms, stopwords dropped, duplicate words once, weights 1.5/4/1).
   Each row changes exactly one factor, either added to the reference or removed from the
   emulation, and is scored with :mod:`qmdlab.eval.metrics` (ranx definitions) with paired t /
   Fisher p-values against its starting point.

C. **Choosing the defaults** (``--part c``): every combination of the boolean knobs and a few
   column weights ranked on the default corpus only; each one's CISI score printed beside it
   (held-out: not used to choose).

B. **The real knobs** (``PipelineConfig`` lexical fields through :func:`qmdlab.search.bm25_search`
   on each suite's real index), one knob at a time from the defaults, on the default corpus
   (``data/corpus`` + ``data/queries.jsonl``: where the defaults are chosen) and on CISI
   (reported held-out: nothing here is chosen by it).

Usage::

    .venv/bin/python experiments/cisi_bm25_factors/run.py [--part a|b|ab] [--out FILE.md]

The CISI index is the eval suite's own (``$QMDLAB_HOME/eval/cisi/index``, built on first use,
no embedding needed).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from qmdlab.eval.metrics import per_query  # noqa: E402
from qmdlab.eval.significance import paired_pvalues  # noqa: E402
from qmdlab.terms import WORD  # noqa: E402 — the project's one word pattern


class Variant(NamedTuple):
    """One raw-FTS5 setup: what goes in each column, the tokenizer, the query builder, weights."""

    filepath: bool = False
    title_in_body: bool = False
    authors: bool = False
    xrefs: bool = False
    tokenizer: str = "porter unicode61"
    prefix: bool = False
    stopwords: bool = False
    dedupe: bool = False
    min_chars: int = 2
    w_filepath: float = 0.0
    w_title: float = 4.0
    w_body: float = 1.0


REFERENCE = Variant()
EMULATED = Variant(
    filepath=True, title_in_body=True, prefix=True, stopwords=True, dedupe=True, w_filepath=1.5, min_chars=1
)


def _stopwords() -> frozenset[str]:
    """The list qmdlab's BM25 builder drops (``bm25_stopwords``), so part A measures the real one."""
    from qmdlab.terms import BM25_STOPWORDS

    return frozenset(BM25_STOPWORDS)


def build_table(docs: list[tuple[str, dict[str, str]]], v: Variant) -> sqlite3.Connection:
    """An in-memory FTS5 table ``t(filepath, title, body)`` for variant ``v`` (rowid = CISI id)."""
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(filepath, title, body, tokenize = '{v.tokenizer}')")
    rows = []
    for rid, f in docs:
        title, text = f.get("T", ""), f.get("W", "")
        body_parts = []
        if v.title_in_body and title:
            body_parts.append(f"# {title}")
        body_parts.append(text)
        if v.authors and f.get("A"):
            body_parts.append(f["A"])
        if v.xrefs and f.get("X"):
            body_parts.append(f["X"])
        rows.append((int(rid), f"cisi/{rid}.md" if v.filepath else "", title, "\n\n".join(body_parts)))
    conn.executemany("INSERT INTO t(rowid, filepath, title, body) VALUES (?, ?, ?, ?)", rows)
    return conn


def build_query(text: str, v: Variant, stop: frozenset[str]) -> str | None:
    """Quoted words OR-ed (with the variant's prefix / stopword / dedupe choices)."""
    words = [w.lower() for w in WORD.findall(text) if len(w.strip("_")) >= v.min_chars]
    if v.stopwords:
        kept = [w for w in words if w not in stop]
        words = kept or words
    if v.dedupe:
        words = list(dict.fromkeys(words))
    if not words:
        return None
    star = "*" if v.prefix else ""
    return " OR ".join(f'"{w}"{star}' for w in words)


def run_variant(docs, queries: dict[str, str], v: Variant, stop, depth: int = 100) -> pl.DataFrame:
    conn = build_table(docs, v)
    out = []
    for qid, text in queries.items():
        q = build_query(text, v, stop)
        if q is None:
            continue
        rows = conn.execute(
            f"SELECT rowid, bm25(t, {v.w_filepath}, {v.w_title}, {v.w_body}) AS s FROM t "
            "WHERE t MATCH ? ORDER BY s, rowid LIMIT ?",
            (q, depth),
        ).fetchall()
        out += [(qid, str(rid), rank) for rank, (rid, _) in enumerate(rows, 1)]
    return pl.DataFrame(out, schema={"qid": pl.Utf8, "docno": pl.Utf8, "rank": pl.Int64}, orient="row")


def score(run: pl.DataFrame, qrels: pl.DataFrame) -> pl.DataFrame:
    return per_query(run, qrels, ["ndcg@10"])


class Row(NamedTuple):
    name: str
    start: str
    ndcg: float
    delta: float
    p_t: float
    p_f: float


def _row(name: str, start: str, table: pl.DataFrame, base: pl.DataFrame) -> Row:
    a, b = base["ndcg@10"].to_numpy(), table["ndcg@10"].to_numpy()
    p_t, p_f = paired_pvalues(a, b) if not np.allclose(a, b) else (1.0, 1.0)
    return Row(name, start, float(b.mean()), float(b.mean() - a.mean()), p_t, p_f)


def part_a(log: Callable[[str], None]) -> list[Row]:
    from qmdlab.eval.loaders.smart import read_records
    from qmdlab.eval.suites import get_suite

    suite = get_suite("cisi")
    suite.check()
    data = suite.data()
    all_path = next(p for p in suite.path.iterdir() if p.suffix.upper() == ".ALL")
    docs = read_records(all_path)
    judged = set(data.qrels["qid"].unique().to_list())
    queries = {q: t for q, t in data.queries.select("qid", "query").iter_rows() if q in judged}
    qrels = data.qrels.rename({"docid": "docno"}).filter(pl.col("qid").is_in(list(judged)))
    stop = _stopwords()
    log(f"CISI: {len(docs)} documents, {len(queries)} judged queries")
    ref = score(run_variant(docs, queries, REFERENCE, stop), qrels)
    emu = score(run_variant(docs, queries, EMULATED, stop), qrels)
    rows = [
        _row("reference (plain FTS5: title+abstract, 4/1, quoted OR)", "-", ref, ref),
        _row("qmdlab without query tf (emulated)", "reference", emu, ref),
    ]
    factors: list[tuple[str, dict, dict]] = [
        ("filepath column, weight 1.5", dict(filepath=True, w_filepath=1.5), dict(filepath=False, w_filepath=0.0)),
        ("filepath weight 0 (column kept)", dict(filepath=True, w_filepath=0.0), dict(w_filepath=0.0)),
        ("title repeated in body (# heading)", dict(title_in_body=True), dict(title_in_body=False)),
        ('prefix terms "w"*', dict(prefix=True), dict(prefix=False)),
        ("stopword list", dict(stopwords=True), dict(stopwords=False)),
        ("duplicate query words once", dict(dedupe=True), dict(dedupe=False)),
        ("one-character words kept", dict(min_chars=1), dict(min_chars=2)),
        ("authors (.A) in body", dict(authors=True), None),
        ("cross-references (.X) in body", dict(xrefs=True), None),
        ("tokenizer unicode61 (no porter)", dict(tokenizer="unicode61"), dict(tokenizer="unicode61")),
        ("title weight 1 (not 4)", dict(w_title=1.0), dict(w_title=1.0)),
        ("title weight 8", dict(w_title=8.0), dict(w_title=8.0)),
    ]
    for name, add, remove in factors:
        t = score(run_variant(docs, queries, REFERENCE._replace(**add), stop), qrels)
        rows.append(_row(f"+ {name}", "reference", t, ref))
        if remove is not None:
            t = score(run_variant(docs, queries, EMULATED._replace(**remove), stop), qrels)
            rows.append(_row(f"− {name}" if remove != add else f"~ {name}", "emulated", t, emu))
        log(f"  {name}: done")
    return rows


def _suite_runner(suite_name: str, log):
    """``run(config) -> (per-query ndcg@10 table, ms per query)``: the real bm25_search on a suite's index."""
    from qmdlab.eval.record import prepare_index
    from qmdlab.eval.suites import get_suite
    from qmdlab.search import bm25_search

    suite = get_suite(suite_name)
    suite.check()
    idx = prepare_index(suite, None, progress=False, log=log)
    queries = suite.data().judged_queries().sort("qid")
    qrels = suite.qrels_docnos().join(queries.select("qid"), on="qid", how="semi")

    def run(cfg) -> tuple[pl.DataFrame, float]:
        t0 = time.perf_counter()
        out = []
        for qid, text in queries.select("qid", "query").iter_rows():
            for h in bm25_search(idx, text, limit=100, **cfg.lexical()):
                out.append((qid, h.docno, h.rank))
        ms = (time.perf_counter() - t0) * 1000 / max(queries.height, 1)
        return score(
            pl.DataFrame(out, schema={"qid": pl.Utf8, "docno": pl.Utf8, "rank": pl.Int64}, orient="row"), qrels
        ), ms

    return run


def _knob_rows(suite_name: str, log) -> list[Row]:
    """Part B on one suite: the real bm25_search with each lexical knob changed from the defaults."""
    from qmdlab.pipeline.config import PipelineConfig

    run = _suite_runner(suite_name, log)
    default = PipelineConfig()
    base, ms = run(default)
    rows = [_row(f"{suite_name}: defaults ({ms:.2f} ms/query)", "-", base, base)]
    knobs = [
        dict(bm25_weight_filepath=0.0),
        dict(bm25_weight_filepath=1.5),
        dict(bm25_weight_title=1.0),
        dict(bm25_weight_title=8.0),
        dict(bm25_weight_body=2.0),
        dict(bm25_prefix=not default.bm25_prefix),
        dict(bm25_stopwords=not default.bm25_stopwords),
        dict(bm25_query_tf=not default.bm25_query_tf),
        dict(bm25_mode="and"),
        dict(bm25_mode="msm", bm25_min_match=2.0),
        dict(bm25_mode="msm", bm25_min_match=0.3),
        dict(
            bm25_weight_filepath=1.5,
            bm25_prefix=True,
            bm25_stopwords=True,  # the defaults before query-term frequency
            bm25_query_tf=False,
        ),
    ]
    for k in knobs:
        cfg = default.replace(**k)
        if cfg == default:
            continue
        t, ms = run(cfg)
        rows.append(
            _row(
                f"{suite_name}: " + ", ".join(f"{a}={b}" for a, b in k.items()) + f" ({ms:.2f} ms/q)",
                "defaults",
                t,
                base,
            )
        )
    return rows


def part_b(log) -> list[Row]:
    return _knob_rows("default", log) + _knob_rows("cisi", log)


def part_c(log) -> str:
    """Rank every knob combination on the default corpus; CISI beside it (held-out, not used)."""
    import itertools

    from qmdlab.pipeline.config import PipelineConfig

    dflt, cisi = _suite_runner("default", log), _suite_runner("cisi", log)
    grid = []
    for prefix, stop, qtf, wf, wt in itertools.product(
        [False, True], [False, True], [False, True], [0.0, 1.5], [1.0, 4.0, 8.0]
    ):
        cfg = PipelineConfig(
            bm25_prefix=prefix, bm25_stopwords=stop, bm25_query_tf=qtf, bm25_weight_filepath=wf, bm25_weight_title=wt
        )
        table, _ = dflt(cfg)
        grid.append((float(table["ndcg@10"].mean()), cfg))
    grid.sort(key=lambda x: -x[0])
    lines = [
        "| rank | prefix | stopwords | query_tf | w filepath | w title | default corpus nDCG@10 | CISI nDCG@10 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, (v, cfg) in enumerate(grid, 1):
        c, _ = cisi(cfg)
        lines.append(
            f"| {i} | {cfg.bm25_prefix} | {cfg.bm25_stopwords} | {cfg.bm25_query_tf} | "
            f"{cfg.bm25_weight_filepath} | {cfg.bm25_weight_title} | {v:.4f} | {float(c['ndcg@10'].mean()):.4f} |"
        )
    return "\n".join(lines)


def format_rows(rows: list[Row]) -> str:
    lines = ["| setup | vs | nDCG@10 | Δ | p (t) | p (Fisher) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.name} | {r.start} | {r.ndcg:.4f} | {r.delta:+.4f} | {r.p_t:.3g} | {r.p_f:.3g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="ab", choices=["a", "b", "c", "ab", "abc"])
    ap.add_argument("--out", default=None, help="also write the markdown table here")
    args = ap.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    text = []
    if "a" in args.part:
        text.append("### A. Raw FTS5, one factor at a time (CISI, 76 judged queries)\n\n" + format_rows(part_a(log)))
    if "b" in args.part:
        text.append("### B. qmdlab lexical knobs, one at a time from the defaults\n\n" + format_rows(part_b(log)))
    if "c" in args.part:
        text.append(
            "### C. Every knob combination on the default corpus (selection), CISI beside it "
            "(held-out, not used to choose)\n\n" + part_c(log)
        )
    out = "\n\n".join(text)
    print(out)
    if args.out:
        Path(args.out).write_text(out + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

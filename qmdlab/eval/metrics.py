"""Ranking metrics, vectorised with polars, defined exactly as ranx defines them.

The slider path (re-scoring hundreds of queries on every notebook tweak) cannot wait for
ranx's numba kernels to compile, so the metrics are re-implemented here as polars
expressions and checked against ``ranx.evaluate`` on random runs in the tests.
Definitions (relevant = grade ≥ 1; position = 1-based position in the run):

- ``ndcg@k``: Järvelin gains (ranx ``ndcg``): ``Σ_{pos≤k} grade/log2(pos+1)`` divided by
  the same sum over the judgments sorted by grade (0 when nothing is relevant);
- ``ndcg_burges@k``: as ``ndcg`` with gain ``2^grade − 1`` (ranx ``ndcg_burges``);
- ``mrr@k``: ``1/pos`` of the first relevant document within the top k, else 0;
- ``recall@k``: relevant documents in the top k / relevant documents judged;
- ``p@k`` (alias ``precision@k``): relevant documents in the top k / k.

``k`` omitted means the whole run (for ``p``, the run's length). Every query in the qrels
is scored — one missing from the run scores 0 — and queries only in the run are ignored
(ranx's ``make_comparable``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import NamedTuple, cast

import polars as pl

from qmdlab.errors import import_extra

DEFAULT_METRICS = ("ndcg@10", "mrr@10", "recall@10", "recall@100", "p@5")
HEADLINE = "ndcg@10"
_KINDS = {"ndcg": "ndcg", "ndcg_burges": "ndcg_burges", "mrr": "mrr", "recall": "recall", "p": "p", "precision": "p"}
_NAME = re.compile(r"^([a-z_]+)(?:@(\d+))?$")


class Metric(NamedTuple):
    """A parsed metric name: ``kind`` (ndcg, ndcg_burges, mrr, recall, p) and cut-off ``k`` (0 = all)."""

    name: str
    kind: str
    k: int


def parse_metric(name: str) -> Metric:
    """Parse ``"ndcg@10"`` style names.

    >>> parse_metric("precision@5")
    Metric(name='precision@5', kind='p', k=5)
    >>> parse_metric("mrr")
    Metric(name='mrr', kind='mrr', k=0)
    """
    m = _NAME.match(name.strip().lower())
    if not m or m.group(1) not in _KINDS:
        raise ValueError(f"unknown metric {name!r}; use ndcg@k, ndcg_burges@k, mrr@k, recall@k or p@k")
    k = int(m.group(2) or 0)
    if m.group(2) is not None and k < 1:
        raise ValueError(f"metric {name!r}: k must be ≥ 1")
    return Metric(name, _KINDS[m.group(1)], k)


def _positions(run: pl.DataFrame, doc_col: str) -> pl.DataFrame:
    """Rows ``qid, docno, pos``: 1-based positions by ascending ``rank`` (ties keep row order)."""
    frame = run.select(pl.col("qid").cast(pl.Utf8), pl.col(doc_col).cast(pl.Utf8).alias("docno"), pl.col("rank"))
    return (
        frame.with_row_index("_row")
        .sort(["qid", "rank", "_row"])
        .with_columns(pl.int_range(1, pl.len() + 1).over("qid").alias("pos"))
        .select("qid", "docno", "pos")
    )


def per_query(
    run: pl.DataFrame,
    qrels: pl.DataFrame,
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    doc_col: str = "docno",
    qrels_doc_col: str = "docno",
) -> pl.DataFrame:
    """Score every judged query.

    Parameters
    ----------
    run : pl.DataFrame
        ``qid, <doc_col>, rank`` (1-based rank; lower is better).
    qrels : pl.DataFrame
        ``qid, <qrels_doc_col>, grade``.
    metrics : sequence of str
        Metric names (see the module notes).

    Returns
    -------
    pl.DataFrame
        ``qid`` plus one Float64 column per metric, one row per query of ``qrels``, sorted by qid.

    Examples
    --------
    >>> run = pl.DataFrame({"qid": ["1", "1", "1"], "docno": ["a", "b", "c"], "rank": [1, 2, 3]})
    >>> qrels = pl.DataFrame({"qid": ["1", "1"], "docno": ["b", "z"], "grade": [1, 1]})
    >>> per_query(run, qrels, ["mrr@10", "recall@10", "p@2"]).row(0)
    ('1', 0.5, 0.5, 0.5)
    >>> round(per_query(run, qrels, ["ndcg@3"])["ndcg@3"][0], 6)  # (1/log2 3) / (1 + 1/log2 3)
    0.386853
    """
    return Scorer(qrels, metrics, doc_col=qrels_doc_col).score(run, doc_col=doc_col)


class Scorer:
    """:func:`per_query` with the qrels-side work (relevant set, ideal DCG) done once.

    The tuning loop scores hundreds of runs against the same qrels; build one ``Scorer``
    and call :meth:`score` per run.

    >>> s = Scorer(pl.DataFrame({"qid": ["1"], "docno": ["b"], "grade": [2]}), ["mrr@10"])
    >>> s.score(pl.DataFrame({"qid": ["1", "1"], "docno": ["a", "b"], "rank": [1, 2]})).row(0)
    ('1', 0.5)
    """

    def __init__(self, qrels: pl.DataFrame, metrics: Sequence[str] = DEFAULT_METRICS, *, doc_col: str = "docno"):
        self.metrics = [parse_metric(m) for m in metrics]
        judged = qrels.select(
            pl.col("qid").cast(pl.Utf8), pl.col(doc_col).cast(pl.Utf8).alias("docno"), pl.col("grade").cast(pl.Float64)
        )
        self.qids = judged.select("qid").unique().sort("qid")
        self.rel = judged.filter(pl.col("grade") >= 1)
        self.max_k = 0 if any(m.k == 0 for m in self.metrics) else max(m.k for m in self.metrics)
        ideal = self.rel.sort(["qid", "grade"], descending=[False, True]).with_columns(
            pl.int_range(1, pl.len() + 1).over("qid").alias("pos")
        )
        aggs = [pl.len().alias("_nrel")]
        for i, m in enumerate(self.metrics):
            if m.kind in ("ndcg", "ndcg_burges"):
                cut = (pl.col("pos") <= m.k) if m.k else pl.lit(True)
                aggs.append(self._gain(m).filter(cut).sum().alias(f"_i{i}"))
        self.ideal = self.qids.join(ideal.group_by("qid").agg(aggs), on="qid", how="left").fill_null(0)

    @staticmethod
    def _gain(m: Metric) -> pl.Expr:
        gain = pl.col("grade") if m.kind == "ndcg" else (2.0 ** pl.col("grade") - 1.0)
        return gain / (pl.col("pos") + 1).cast(pl.Float64).log(2)

    def score(self, run: pl.DataFrame, *, doc_col: str = "docno") -> pl.DataFrame:
        """Per-query metrics of ``run`` (``qid, <doc_col>, rank``); see :func:`per_query`."""
        pos = _positions(run, doc_col)
        if self.max_k:
            pos = pos.filter(pl.col("pos") <= self.max_k)
        hits = pos.join(self.rel, on=["qid", "docno"], how="inner")
        run_aggs, finals = [pl.len().alias("_nhit")], []
        for i, m in enumerate(self.metrics):
            cut = (pl.col("pos") <= m.k) if m.k else (pl.col("pos") >= 1)  # a literal would sum to 1, not the hit count
            if m.kind in ("ndcg", "ndcg_burges"):
                run_aggs.append(self._gain(m).filter(cut).sum().alias(f"_d{i}"))
                finals.append(
                    pl.when(pl.col(f"_i{i}") > 0).then(pl.col(f"_d{i}") / pl.col(f"_i{i}")).otherwise(0.0).alias(m.name)
                )
            elif m.kind == "mrr":
                run_aggs.append((1.0 / pl.col("pos")).filter(cut).max().alias(f"_d{i}"))
                finals.append(pl.col(f"_d{i}").alias(m.name))
            elif m.kind == "recall":
                run_aggs.append(cut.sum().cast(pl.Float64).alias(f"_d{i}"))
                finals.append(
                    pl.when(pl.col("_nrel") > 0).then(pl.col(f"_d{i}") / pl.col("_nrel")).otherwise(0.0).alias(m.name)
                )
            else:  # precision: hits / k, or hits / run length when k is 0
                run_aggs.append(cut.sum().cast(pl.Float64).alias(f"_d{i}"))
                finals.append(pl.col(f"_d{i}").alias(m.name))
        table = self.ideal.join(hits.group_by("qid").agg(run_aggs), on="qid", how="left")
        if any(m.kind == "p" and not m.k for m in self.metrics):
            lengths = _positions(run, doc_col).group_by("qid").agg(pl.len().alias("_n"))
            table = table.join(lengths, on="qid", how="left")
        table = table.with_columns([pl.col(c).fill_null(0) for c in table.columns if c.startswith("_")])
        out = []
        for i, (m, expr) in enumerate(zip(self.metrics, finals)):
            if m.kind == "p":
                denom = pl.lit(float(m.k)) if m.k else pl.col("_n").cast(pl.Float64)
                expr = pl.when(denom > 0).then(pl.col(f"_d{i}") / denom).otherwise(0.0).alias(m.name)
            out.append(expr.cast(pl.Float64))
        return table.select(["qid", *out])


def mean_scores(table: pl.DataFrame) -> dict[str, float]:
    """Mean of every metric column of a :func:`per_query` table (0.0 for an empty table).

    >>> mean_scores(pl.DataFrame({"qid": ["1", "2"], "mrr@10": [1.0, 0.5]}))
    {'mrr@10': 0.75}
    """
    cols = [c for c in table.columns if c != "qid"]
    if table.height == 0:
        return {c: 0.0 for c in cols}
    return {c: float(cast(float, table[c].mean())) for c in cols}


def qrels_dict(qrels: pl.DataFrame, *, doc_col: str = "docno") -> dict[str, dict[str, int]]:
    """``{qid: {doc: grade}}`` from a ``qid, <doc_col>, grade`` frame (the shape ranx, the GRPO reward
    and the training evaluation take).

    >>> qrels_dict(pl.DataFrame({"qid": ["1", "1", "2"], "docno": ["a", "b", "a"], "grade": [2, 0, 1]}))
    {'1': {'a': 2, 'b': 0}, '2': {'a': 1}}
    """
    out: dict[str, dict[str, int]] = {}
    for qid, doc, grade in qrels.select("qid", doc_col, "grade").iter_rows():
        out.setdefault(str(qid), {})[str(doc)] = int(grade)
    return out


def ranx_qrels(qrels: pl.DataFrame, *, doc_col: str = "docno"):
    """A ``ranx.Qrels`` from a ``qid, <doc_col>, grade`` frame."""
    Qrels = import_extra("ranx", "eval").Qrels

    return Qrels(qrels_dict(qrels, doc_col=doc_col))


def ranx_run(run: pl.DataFrame, name: str | None = None, *, doc_col: str = "docno"):
    """A ``ranx.Run`` from a ``qid, <doc_col>, rank`` frame; the score is ``-position`` so ranx
    orders exactly as the run does (ties in the pipeline's scores cannot reorder it)."""
    Run = import_extra("ranx", "eval").Run

    out: dict[str, dict[str, float]] = {}
    for qid, doc, pos in _positions(run, doc_col).iter_rows():
        out.setdefault(qid, {})[doc] = -float(pos)
    return Run(out, name=name)


def ideal_dcg(grades: Sequence[float], k: int) -> float:
    """IDCG@k with Järvelin gains (a helper for closed-form checks).

    >>> round(ideal_dcg([1, 2], 2), 6)  # 2/log2(2) + 1/log2(3)
    2.63093
    """
    g = sorted((x for x in grades if x >= 1), reverse=True)[: k or None]
    return sum(x / math.log2(i + 2) for i, x in enumerate(g))

"""The metrics of :mod:`qmdlab.eval.metrics` on the stage functions' arrays (:mod:`qmdlab.pipeline.coded`).

:class:`CodedScorer` maps the qrels onto the coded lists' (query, document) pair codes once; scoring
a :class:`~qmdlab.pipeline.coded.Final` result is then a few numpy reductions (no join on
strings). The definitions are :class:`qmdlab.eval.metrics.Scorer`'s (ranx's): the ideal DCG and the count
of relevant documents are taken from a ``Scorer`` of the same qrels, and
``tests/eval/test_fastmetrics.py`` checks every metric against ``Scorer`` and ``ranx.evaluate``.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from qmdlab.pipeline.coded import CodedLists, Final

from .metrics import Scorer


class CodedScorer:
    """A :class:`~qmdlab.eval.metrics.Scorer` for the pair codes of one :class:`~qmdlab.pipeline.coded.CodedLists`.

    Parameters
    ----------
    scorer : Scorer
        The qrels side (relevant set, ideal DCG per judged query, metrics).
    fast : CodedLists
        The coded lists whose :func:`~qmdlab.pipeline.finish.finish` results will be scored.

    ``reason`` is set (and :meth:`per_query` must not be used) when the qrels judge one
    (query, document) pair twice.
    """

    def __init__(self, scorer: Scorer, fast: CodedLists):
        self.scorer = scorer
        self.metrics = scorer.metrics
        self.reason: str | None = None
        qids = scorer.qids["qid"]
        self.qids = qids
        ideal = scorer.ideal  # one row per judged qid, sorted by qid
        self.nrel = ideal["_nrel"].to_numpy().astype(np.float64)
        self.ideal = {
            i: ideal[f"_i{i}"].to_numpy().astype(np.float64)
            for i, m in enumerate(self.metrics)
            if m.kind in ("ndcg", "ndcg_burges")
        }
        rel = scorer.rel
        if rel.select(pl.struct("qid", "docno").is_duplicated().any()).item():
            self.reason = "the qrels judge one (query, document) pair twice"
        # judged index of each of fast's query codes (-1: not judged)
        jmap = pl.DataFrame({"qid": qids, "_j": np.arange(qids.len())})
        qframe = pl.DataFrame({"qid": fast.qids.series}).join(jmap, on="qid", how="left", maintain_order="left")
        self.judged_of_query = qframe["_j"].fill_null(-1).to_numpy().astype(np.int64)
        # grade of each pair (0: not relevant)
        self.grade = np.zeros(fast.n_pairs)
        if fast.n_pairs and rel.height:
            got = fast.pairs_frame().join(rel.select("qid", "docno", "grade"), on=["qid", "docno"], how="inner")
            self.grade[got["_p"].to_numpy()] = got["grade"].to_numpy()

    def values(self, r: Final) -> dict[str, np.ndarray]:
        """Per judged query (in ``qids`` order) the value of every metric."""
        nq = self.qids.len()
        j = self.judged_of_query[r.query]
        ok = j >= 0
        j, pos, grade = j[ok], r.final_rank[ok], self.grade[r.pair[ok]]
        run_len = np.bincount(j, minlength=nq).astype(np.float64)
        rel = grade >= 1
        out: dict[str, np.ndarray] = {}
        logs = np.log2(pos + 1.0)
        for i, m in enumerate(self.metrics):
            cut = rel & (pos <= m.k) if m.k else rel
            if m.kind in ("ndcg", "ndcg_burges"):
                gain = grade if m.kind == "ndcg" else 2.0**grade - 1.0
                dcg = np.bincount(j[cut], weights=gain[cut] / logs[cut], minlength=nq)
                ideal = self.ideal[i]
                with np.errstate(divide="ignore", invalid="ignore"):
                    out[m.name] = np.where(ideal > 0, dcg / ideal, 0.0)
            elif m.kind == "mrr":
                best = np.zeros(nq)
                np.maximum.at(best, j[cut], 1.0 / pos[cut])
                out[m.name] = best
            elif m.kind == "recall":
                hits = np.bincount(j[cut], minlength=nq).astype(np.float64)
                with np.errstate(divide="ignore", invalid="ignore"):
                    out[m.name] = np.where(self.nrel > 0, hits / self.nrel, 0.0)
            else:  # precision: hits / k, or hits / run length when k is 0
                hits = np.bincount(j[cut], minlength=nq).astype(np.float64)
                denom = np.full(nq, float(m.k)) if m.k else run_len
                with np.errstate(divide="ignore", invalid="ignore"):
                    out[m.name] = np.where(denom > 0, hits / denom, 0.0)
        return out

    def per_query(self, r: Final) -> pl.DataFrame:
        """``qid`` plus one column per metric, as :meth:`Scorer.score` returns it."""
        vals = self.values(r)
        return pl.DataFrame(
            {"qid": self.qids, **{m.name: vals[m.name] for m in self.metrics}},
            schema={"qid": pl.String, **{m.name: pl.Float64 for m in self.metrics}},
        )

    def mean(self, r: Final, metric: str) -> float:
        """The mean of one metric over the judged queries (0.0 when none is judged)."""
        v = self.values(r)[metric]
        return float(v.mean()) if len(v) else 0.0


__all__ = ["CodedScorer"]

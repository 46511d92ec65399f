"""What the tune notebook shows below its headline numbers, computed outside the notebook.

The notebook (``notebooks/tune.py``) re-scores every labelled query on each control change; the
headline nDCG@10 comes straight from :meth:`qmdlab.eval.study.Study.evaluate`. This module holds
the rest of what a change updates, so that it is cheap and tested:

- :func:`per_query_delta` — nDCG@10 per query now against the baseline, worst first;
- :func:`delta_counts` — how many queries got better, worse, or stayed the same;
- :class:`DeltaFigure` — the two per-query plots (current against baseline, distribution of the
  gains), drawn once per study and then only given new data: a control change moves the points
  and the bar heights instead of building axes again, and the fixed margins spare matplotlib the
  layout pass that measures every tick label before each draw.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TIE = 1e-12
"""Per-query changes at most this large count as unchanged (float noise of the re-blend)."""

HIST_BINS = 21
"""Bins of the gain histogram over [-1, 1] (the width of one bin is 2/21 of nDCG@10)."""


def per_query_delta(
    baseline: pl.DataFrame, current: pl.DataFrame, queries: pl.DataFrame, metric: str = "ndcg@10"
) -> pl.DataFrame:
    """One row per query scored in both tables: ``qid, query, ndcg_default, ndcg_now, delta``.

    Parameters
    ----------
    baseline, current : polars.DataFrame
        Per-query scores (``qid`` plus a ``metric`` column; ``Evaluation.per_query``).
    queries : polars.DataFrame
        ``qid, query`` (the query text; a query missing here gets a null text).
    metric : str
        The column compared.

    Returns
    -------
    polars.DataFrame
        Sorted by ``delta`` (the worst change first), ties by ``qid``.

    Examples
    --------
    >>> base = pl.DataFrame({"qid": ["1", "2"], "ndcg@10": [0.5, 1.0]})
    >>> now = pl.DataFrame({"qid": ["1", "2"], "ndcg@10": [0.75, 0.5]})
    >>> per_query_delta(base, now, pl.DataFrame({"qid": ["1"], "query": ["a"]}))["delta"].to_list()
    [-0.5, 0.25]
    """
    return (
        baseline.select("qid", pl.col(metric).alias("ndcg_default"))
        .join(current.select("qid", pl.col(metric).alias("ndcg_now")), on="qid")
        .with_columns((pl.col("ndcg_now") - pl.col("ndcg_default")).alias("delta"))
        .join(queries.select("qid", "query"), on="qid", how="left")
        .select("qid", "query", "ndcg_default", "ndcg_now", "delta")
        .sort("delta", "qid")
    )


def changed(table: pl.DataFrame) -> pl.DataFrame:
    """The rows of :func:`per_query_delta` whose ``delta`` is more than :data:`TIE` away from 0."""
    return table.filter(pl.col("delta").abs() > TIE)


def delta_counts(table: pl.DataFrame) -> tuple[int, int, int]:
    """``(better, worse, unchanged)`` query counts of a :func:`per_query_delta` table."""
    delta = table["delta"].to_numpy()
    better = int((delta > TIE).sum())
    worse = int((delta < -TIE).sum())
    return better, worse, len(delta) - better - worse


class DeltaFigure:
    """The per-query scatter (current against baseline) and the histogram of gains.

    Parameters
    ----------
    baseline_label : str
        What the deltas are against (``defaults``, ``fused order``), used in the axis labels.
    dpi : int
        Resolution of the PNG the notebook shows.

    Examples
    --------
    >>> fig = DeltaFigure("defaults")
    >>> t = pl.DataFrame({"ndcg_default": [0.5, 1.0], "ndcg_now": [0.75, 0.5], "delta": [0.25, -0.5]})
    >>> [int(b.get_height()) for b in fig.update(t).axes[1].patches if b.get_height()]
    [1, 1]
    """

    def __init__(self, baseline_label: str = "defaults", dpi: int = 100):
        from matplotlib.figure import Figure  # the notebooks extra; the tables above need no plotting library

        self.figure = Figure(figsize=(10, 3.6), dpi=dpi)
        # Fixed margins (no constrained/tight layout): the layout would measure every tick label
        # on each draw, which is most of the draw time of two small axes.
        self.figure.subplots_adjust(left=0.07, right=0.98, bottom=0.15, top=0.9, wspace=0.22)
        self.scatter_axes, self.hist_axes = self.figure.subplots(1, 2)
        ax = self.scatter_axes
        self.points = ax.scatter([], [], s=14, alpha=0.7)
        ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--")
        ax.set(
            xlabel=f"nDCG@10, {baseline_label}",
            ylabel="nDCG@10, current",
            title="per query (above the line = better)",
            xlim=(-0.02, 1.02),
            ylim=(-0.02, 1.02),
        )
        self.edges = np.linspace(-1.0, 1.0, HIST_BINS + 1)
        _, _, self.bars = self.hist_axes.hist([], bins=self.edges, color="tab:green")
        self.hist_axes.axvline(0, color="grey", lw=1)
        self.hist_axes.set(xlabel="nDCG@10 gain", ylabel="queries", title="distribution of gains", xlim=(-1, 1))

    def update(self, table: pl.DataFrame) -> Figure:
        """Show ``table`` (``ndcg_default``, ``ndcg_now``, ``delta`` columns) and return the figure."""
        self.points.set_offsets(np.column_stack([table["ndcg_default"].to_numpy(), table["ndcg_now"].to_numpy()]))
        # clip: a gain of exactly +1 belongs to the last bin, as in numpy.histogram
        counts, _ = np.histogram(np.clip(table["delta"].to_numpy(), -1.0, 1.0), bins=self.edges)
        for bar, count in zip(self.bars, counts, strict=True):
            bar.set_height(count)
        self.hist_axes.set_ylim(0, max(1, int(counts.max()) if counts.size else 1) * 1.05)
        return self.figure

    @property
    def width_px(self) -> int:
        """Display width in CSS pixels (100 per inch, the scale marimo shows figures at)."""
        return round(self.figure.get_figwidth() * 100)

    def png(self, dpi: float | None = None) -> bytes:
        """The figure as PNG bytes, drawn once at ``dpi`` (default: the figure's own)."""
        buf = io.BytesIO()
        # compress_level 1: a third less encoding time than the default 6 for a few per cent more bytes
        self.figure.savefig(buf, format="png", dpi=dpi or self.figure.dpi, pil_kwargs={"compress_level": 1})
        return buf.getvalue()

    def counts(self) -> list[int]:
        """The histogram's bar heights as shown (one per bin, lowest gain first)."""
        return [int(b.get_height()) for b in self.bars]


__all__ = ["DeltaFigure", "HIST_BINS", "TIE", "changed", "delta_counts", "per_query_delta"]

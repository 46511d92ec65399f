"""Fusion: the ``lists`` table → the ``fused`` table, for many queries at once.

Every method is a pure, vectorised polars function ``method(lists, config)`` with
the same output columns (``qid, docno, rrf_base, best_rank, bonus, fused_score,
fused_rank, n_lists``). ``rrf_base`` is the method's score before the top-rank
bonus (for the score-based methods it is their weighted sum); only ``qmd_rrf``
has a non-zero ``bonus``. Ties in ``fused_score`` are broken by the better
``best_rank``, then by ``docno``, so rankings are deterministic.

Each formula lives in exactly one function:

=============== ===========================================================
``rrf_term``     ``weight / (k + rank)`` (1-based rank)
``rank_bonus``   +``bonus_rank1`` at best rank 1, +``bonus_rank23`` at 2–3
``max_norm``     ``score / max(score of the list)``
``channel_norm`` ``norm_sum``'s per-row score: BM25 ``max_norm``; vector: the cosine itself, floored at 0
``min_max``      ``(score − min) / max(max − min, 1e-9)`` (ranx's min-max)
``gate``         vector hits with ``score >= top1 − margin``, at most ``max_take``
=============== ===========================================================
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.ranking import SMALL_ROWS, rank_fused, ranks_within_qid
from qmdlab.pipeline.trace import Columns, as_frame, empty

LIST_KEY = ["qid", "list_id"]
DOC_KEY = ["qid", "docno"]


# -- formulas (one function each) ------------------------------------------------------
def rrf_term(k: float, weight: pl.Expr | float = pl.col("weight"), rank: pl.Expr = pl.col("rank")) -> pl.Expr:
    """Reciprocal-rank contribution ``weight / (k + rank)`` of one list entry.

    >>> df = pl.DataFrame({"weight": [2.0, 1.0], "rank": [1, 3]})
    >>> df.select(rrf_term(60).alias("c"))["c"].to_list() == [2.0 / 61, 1.0 / 63]
    True
    """
    return weight / (k + rank.cast(pl.Float64))


def rank_bonus(best_rank: pl.Expr, bonus_rank1: float, bonus_rank23: float) -> pl.Expr:
    """qmd's top-rank bonus: ``bonus_rank1`` if best rank is 1, ``bonus_rank23`` if 2–3, else 0.

    >>> df = pl.DataFrame({"r": [1, 2, 3, 4]})
    >>> df.select(rank_bonus(pl.col("r"), 0.05, 0.02).alias("b"))["b"].to_list()
    [0.05, 0.02, 0.02, 0.0]
    """
    return (
        pl.when(best_rank == 1)
        .then(pl.lit(float(bonus_rank1)))
        .when(best_rank <= 3)
        .then(pl.lit(float(bonus_rank23)))
        .otherwise(pl.lit(0.0))
    )


def max_norm(score: pl.Expr = pl.col("score")) -> pl.Expr:
    """``score / max(score)`` within each list (0 when the list's best is 0).

    >>> df = pl.DataFrame({"qid": ["q"] * 2, "list_id": [0, 0], "score": [0.8, 0.2]})
    >>> df.select(max_norm().alias("n"))["n"].to_list()
    [1.0, 0.25]
    """
    top = score.max().over(LIST_KEY)
    return pl.when(top > 0).then(score / top).otherwise(pl.lit(0.0))


def min_max(score: pl.Expr = pl.col("score")) -> pl.Expr:
    """ranx's min-max normalisation within each list: ``(s − min) / max(max − min, 1e-9)``.

    >>> df = pl.DataFrame({"qid": ["q"] * 3, "list_id": [0] * 3, "score": [0.9, 0.5, 0.1]})
    >>> [round(x, 12) for x in df.select(min_max().alias("n"))["n"].to_list()]
    [1.0, 0.5, 0.0]
    """
    lo = score.min().over(LIST_KEY)
    hi = score.max().over(LIST_KEY)
    return (score - lo) / pl.max_horizontal(hi - lo, pl.lit(1e-9))


def channel_norm(score: pl.Expr = pl.col("score")) -> pl.Expr:
    """``norm_sum``'s normalised score: a BM25 row is divided by its list's best (:func:`max_norm`),
    a vector row keeps its cosine (floored at 0). Dividing the cosine by the list's best would give
    the nearest chunk 1.0 even when nothing is close; the raw cosine keeps "nothing here is close" low.

    >>> df = pl.DataFrame({"qid": ["q"] * 4, "list_id": [0, 0, 1, 1], "source": ["fts", "fts", "vec", "vec"],
    ...                    "score": [0.8, 0.2, 0.12, -0.05]})
    >>> df.select(channel_norm().alias("n"))["n"].to_list()
    [1.0, 0.25, 0.12, 0.0]
    """
    return pl.when(pl.col("source") == "vec").then(pl.max_horizontal(score, pl.lit(0.0))).otherwise(max_norm(score))


def channel_weight(config: PipelineConfig) -> pl.Expr:
    """``norm_sum`` channel weight of each row from its ``source`` (vec | fts)."""
    return (
        pl.when(pl.col("source") == "vec")
        .then(pl.lit(float(config.norm_weight_vec)))
        .otherwise(pl.lit(float(config.norm_weight_fts)))
    )


def gate(lists: pl.DataFrame, margin: float, max_take: int) -> pl.DataFrame:
    """The semantic admission gate of gated memory recall: keep a vector hit only if its cosine is
    ``>= top1 − margin`` of its list, at most ``max_take`` per list; BM25 lists pass.

    >>> df = pl.DataFrame({"qid": ["q"] * 3, "list_id": [0] * 3, "source": ["vec"] * 3,
    ...                    "rank": [1, 2, 3], "score": [0.9, 0.85, 0.5]})
    >>> gate(df, 0.1, 10)["rank"].to_list()
    [1, 2]
    """
    top = pl.col("score").max().over(LIST_KEY)
    admitted = (pl.col("score") >= top - margin) & (
        pl.col("score").rank("ordinal", descending=True).over(LIST_KEY) <= max_take
    )
    return lists.filter((pl.col("source") != "vec") | admitted)


# -- shared assembly ----------------------------------------------------------------
def _aggregate(
    lists: pl.DataFrame,
    base: pl.Expr,
    *,
    bonus: Callable[[pl.Expr], pl.Expr] | None = None,
    multiply_by_n: bool = False,
) -> pl.DataFrame:
    """Group per (qid, docno): ``rrf_base = Σ base``; add bonus; rank within qid."""
    if lists.height == 0:
        return empty("fused")
    if lists.height <= SMALL_ROWS:
        small = _aggregate_small(lists, base, bonus, multiply_by_n)
        if small is not None:
            return small
    # Within a (qid, docno) group every entry comes from a different list, so sorting by
    # list_id alone fixes the order in which each group's floats are summed: the result
    # does not depend on the row order of `lists` (polars' float sum is not a plain
    # left fold, so closed-form checks of 3+ terms need a last-bit tolerance).
    ordered = lists.with_row_index("_row").sort("list_id")
    g = (
        ordered.with_columns(_c=base)
        .group_by(DOC_KEY)
        .agg(
            rrf_base=pl.col("_c").sum(),
            best_rank=pl.col("rank").min().cast(pl.Int64),
            n_lists=pl.col("list_id").n_unique().cast(pl.Int64),
            _first=pl.col("_row").min(),
        )
    )
    if multiply_by_n:
        g = g.with_columns(rrf_base=pl.col("rrf_base") * pl.col("n_lists").cast(pl.Float64))
    b = bonus(pl.col("best_rank")) if bonus is not None else pl.lit(0.0)
    g = g.with_columns(bonus=b).with_columns(fused_score=pl.col("rrf_base") + pl.col("bonus"))
    return rank_fused(g.with_columns(_qo=pl.col("_first").min().over("qid")))


def _aggregate_small(
    lists: pl.DataFrame, base: pl.Expr, bonus: Callable[[pl.Expr], pl.Expr] | None, multiply_by_n: bool
) -> pl.DataFrame | None:
    """:func:`_aggregate` in plain Python (:func:`_aggregate_rows`), the same floats."""
    cols = lists.select("qid", "docno", "list_id", "rank", base.alias("_c"))
    qids, docs, lids, ranks, terms = (cols.get_column(c).to_list() for c in cols.columns)
    out = _aggregate_rows(qids, docs, lids, ranks, terms, bonus, multiply_by_n)
    return None if out is None else out.frame("fused")


def _aggregate_rows(
    qids: list, docs: list, lids: list, ranks: list, terms: list, bonus: Any, multiply_by_n: bool
) -> Columns | None:
    """The ``fused`` columns of list entries given as plain columns (``terms``: each entry's base
    contribution). A pair's terms are added in ``list_id`` order with Kahan compensation (polars'
    float group sum). ``None`` (use polars) when a list holds a document twice (polars' order of
    those terms is not defined) or a term is null."""
    order: dict[str, int] = {}
    groups: dict[tuple[str, str], list[tuple[int, int, float]]] = {}
    for q, d, lid, r, c in zip(qids, docs, lids, ranks, terms):
        if c is None or r is None:
            return None
        order.setdefault(q, len(order))
        groups.setdefault((q, d), []).append((lid, r, c))
    rows = []
    for (q, d), entries in groups.items():
        if len(entries) > 1:
            entries.sort(key=itemgetter(0))
            if len({e[0] for e in entries}) != len(entries):
                return None
        total = comp = 0.0
        for _, _, v in entries:
            y = v - comp
            t = total + y
            comp = (t - total) - y
            total = t
        n = len(entries)
        if multiply_by_n:
            total = total * float(n)
        rows.append((q, d, total, min(e[1] for e in entries), n))
    value = getattr(bonus, "value", None)  # the bonus as a plain function (qmd_rrf's rank bonus)
    if value is not None:
        bonuses = [value(r[3]) for r in rows]
    elif bonus is not None:
        best = pl.DataFrame({"b": [r[3] for r in rows]}, schema={"b": pl.Int64})
        bonuses = best.select(bonus(pl.col("b")).cast(pl.Float64)).to_series().to_list()
    else:
        bonuses = [0.0] * len(rows)
    scored = [(q, d, base_, best_, b, base_ + b, n) for (q, d, base_, best_, n), b in zip(rows, bonuses)]
    scored.sort(key=lambda r: (order[r[0]], -r[5], r[3], r[1]))
    return Columns(
        {
            "qid": [r[0] for r in scored],
            "docno": [r[1] for r in scored],
            "rrf_base": [r[2] for r in scored],
            "best_rank": [r[3] for r in scored],
            "bonus": [r[4] for r in scored],
            "fused_score": [r[5] for r in scored],
            "fused_rank": ranks_within_qid(r[0] for r in scored),
            "n_lists": [r[6] for r in scored],
        }
    )


def fuse_columns(lists: Columns, config: PipelineConfig) -> Columns | None:
    """:func:`fuse` of ``lists`` given as plain columns (one query of :meth:`qmdlab.Lab.query`),
    for the rank-only methods ``qmd_rrf`` and ``rrf``: the same rows and floats
    (``tests/pipeline/test_small_paths.py``). ``None`` for the other methods, more than
    :data:`SMALL_ROWS` rows, or rows the plain path leaves to polars: call :func:`fuse`."""
    n = len(lists["qid"])
    if config.fusion not in ("qmd_rrf", "rrf") or n > SMALL_ROWS:
        return None
    if n == 0:
        return Columns.empty("fused")
    k = config.rrf_k
    ranks = lists["rank"]
    if any(r is None for r in ranks):
        return None
    if config.fusion == "qmd_rrf":  # rrf_term: weight / (k + rank), the same float operations
        terms = [None if w is None else w / (k + float(r)) for w, r in zip(lists["weight"], ranks)]
        bonus: Any = _RankBonus(config.bonus_rank1, config.bonus_rank23)
    else:
        terms = [1.0 / (k + float(r)) for r in ranks]
        bonus = None
    return _aggregate_rows(lists["qid"], lists["docno"], lists["list_id"], ranks, terms, bonus, False)


# -- the methods ----------------------------------------------------------------------
def qmd_rrf(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """qmd's weighted RRF: ``Σ weight/(k+rank)`` plus the top-rank bonus."""
    return _aggregate(lists, rrf_term(config.rrf_k), bonus=_RankBonus(config.bonus_rank1, config.bonus_rank23))


class _RankBonus:
    """:func:`rank_bonus` as the polars expression (called) and, for the plain-Python path, as
    the value of one best rank (:meth:`value`; the differential tests hold the two equal)."""

    def __init__(self, bonus_rank1: float, bonus_rank23: float):
        self.b1, self.b23 = float(bonus_rank1), float(bonus_rank23)

    def __call__(self, best_rank: pl.Expr) -> pl.Expr:
        return rank_bonus(best_rank, self.b1, self.b23)

    def value(self, best_rank: int) -> float:
        return self.b1 if best_rank == 1 else (self.b23 if best_rank <= 3 else 0.0)


def rrf(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """Plain rank-only RRF ``Σ 1/(k+rank)`` (ranks only); list weights are ignored."""
    return _aggregate(lists, rrf_term(config.rrf_k, weight=pl.lit(1.0)))


def norm_sum(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """Channel score sum: per-channel scores (:func:`channel_norm`: BM25 over its list's best, vector cosine as
    is) times the channel weight, summed."""
    return _aggregate(lists, channel_weight(config) * channel_norm())


def gated_rrf(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """Gated memory recall: :func:`gate` the vector lists, then plain RRF."""
    return rrf(gate(lists, config.gate_margin, config.gate_max_take), config)


def wsum_minmax(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """ranx ``wsum`` with min-max norm: ``Σ weight · min_max(score)``."""
    return _aggregate(lists, pl.col("weight") * min_max())


def combmnz(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """ranx ``mnz`` with min-max norm: ``n_lists · Σ min_max(score)`` (unweighted)."""
    return _aggregate(lists, min_max(), multiply_by_n=True)


METHODS: dict[str, Callable[[pl.DataFrame, PipelineConfig], pl.DataFrame]] = {
    "qmd_rrf": qmd_rrf,
    "rrf": rrf,
    "norm_sum": norm_sum,
    "gated_rrf": gated_rrf,
    "wsum_minmax": wsum_minmax,
    "combmnz": combmnz,
}


def fuse(lists: pl.DataFrame, config: PipelineConfig, docs: pl.DataFrame | None = None) -> pl.DataFrame:
    """Fuse with ``config.fusion``; the entry point of the stage.

    ``docs`` (:func:`qmdlab.pipeline.learned.doc_features`) is needed by ``fusion=learned``
    only: a LightGBM lambdarank model over trace features (:mod:`qmdlab.pipeline.learned`).

    >>> lists = pl.DataFrame({"qid": ["q"] * 3, "list_id": [0, 0, 1], "source": ["fts", "fts", "vec"],
    ...     "docno": ["a", "b", "b"], "rank": [1, 2, 1], "score": [0.9, 0.8, 0.7], "weight": [2.0, 2.0, 1.0]})
    >>> fuse(lists, PipelineConfig())["docno"].to_list()
    ['b', 'a']
    """
    if config.fusion == "learned":
        from qmdlab.pipeline.learned import learned

        return learned(lists, config, docs)
    try:
        method = METHODS[config.fusion]
    except KeyError:
        raise ConfigError(f"unknown fusion method {config.fusion!r}; choose one of: {', '.join(METHODS)}") from None
    return method(lists, config)


def contributions(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """Per list entry, what it added to its document's ``rrf_base`` under ``config``
    (``contribution`` column; 0 for entries the gate of ``gated_rrf`` rejects).
    Used by ``--explain``.
    """
    if lists.height == 0:
        return lists.with_columns(contribution=pl.lit(0.0))
    method = config.fusion
    if method == "learned":  # a tree model has no per-list share; see learned.contributions (per feature)
        return lists.with_columns(contribution=pl.lit(None, dtype=pl.Float64))
    if method == "qmd_rrf":
        c = rrf_term(config.rrf_k)
    elif method == "rrf":
        c = rrf_term(config.rrf_k, weight=pl.lit(1.0))
    elif method == "norm_sum":
        c = channel_weight(config) * channel_norm()
    elif method == "gated_rrf":
        kept = (
            gate(lists, config.gate_margin, config.gate_max_take)
            .select("qid", "list_id", "rank")
            .with_columns(_kept=pl.lit(True))
        )
        out = lists.join(kept, on=["qid", "list_id", "rank"], how="left")
        return out.with_columns(
            contribution=pl.when(pl.col("_kept"))
            .then(rrf_term(config.rrf_k, weight=pl.lit(1.0)))
            .otherwise(pl.lit(0.0))
        ).drop("_kept")
    elif method == "wsum_minmax":
        c = pl.col("weight") * min_max()
    else:  # combmnz: each entry's share of n_lists · Σ min_max
        c = min_max() * pl.col("list_id").n_unique().over(DOC_KEY).cast(pl.Float64)
    return lists.with_columns(contribution=c)


def run_fuse(
    lists: Columns | pl.DataFrame, config: PipelineConfig, docs: Callable[[pl.DataFrame], Any] | None = None
) -> tuple[Columns | pl.DataFrame, Columns | pl.DataFrame, Columns | pl.DataFrame]:
    """Fusion and the candidate cut as a query runs them: ``(lists, fused, candidates)``, each plain
    columns while :func:`fuse_columns` / :func:`candidates_columns` apply, else polars frames (``lists``
    too: the trace then holds the frame fusion read). ``docs(lists)`` gives the learned fuser its
    document table (called only on the polars path)."""
    fused: Columns | pl.DataFrame | None = fuse_columns(lists, config) if isinstance(lists, Columns) else None
    if fused is None:
        lists = as_frame("lists", lists)
        fused = fuse(lists, config, docs=docs(lists) if docs is not None else None)
    cands: Columns | pl.DataFrame | None = (
        candidates_columns(fused, config.candidate_limit) if isinstance(fused, Columns) else None
    )
    if cands is None:
        cands = candidates(as_frame("fused", fused), config.candidate_limit)
    return lists, fused, cands


__all__ = [
    "run_fuse",
    "fuse",
    "METHODS",
    "qmd_rrf",
    "rrf",
    "norm_sum",
    "gated_rrf",
    "wsum_minmax",
    "combmnz",
    "rrf_term",
    "rank_bonus",
    "channel_weight",
    "channel_norm",
    "max_norm",
    "min_max",
    "gate",
    "contributions",
    "candidates",
    "candidates_columns",
    "fuse_columns",
]


def candidates(fused: pl.DataFrame, limit: int) -> pl.DataFrame:
    """The top ``limit`` fused documents of every query (``fused_rank <= limit``)."""
    qid = fused["qid"]
    if qid.len() < 2 or qid.n_unique() == 1:  # one query, rows in fused_rank order (rank_fused): a slice
        ranks = fused["fused_rank"]
        n = ranks.len()
        if n == 0 or (ranks[0] == 1 and ranks[n - 1] == n and ranks.is_sorted() and ranks.n_unique() == n):
            return fused.head(max(int(limit), 0))
    return fused.filter(pl.col("fused_rank") <= limit)


def candidates_columns(fused: Columns, limit: int) -> Columns:
    """:func:`candidates` of ``fused`` given as plain columns: the rows with ``fused_rank <= limit``."""
    keep = [i for i, r in enumerate(fused["fused_rank"]) if r is not None and r <= limit]
    if len(keep) == len(fused["fused_rank"]):
        return fused
    return Columns({c: [v[i] for i in keep] for c, v in fused.items()})

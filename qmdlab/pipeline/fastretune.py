"""The slider path of :func:`qmdlab.retune`: fuse → candidates → blend → finish on integer codes.

:class:`FastRetune` takes the recorded ``lists`` of many queries (and their rerank scores) once,
gives every query, document and (query, document) pair an integer code, and then re-runs the
cheap stages under any supported :class:`~qmdlab.pipeline.config.PipelineConfig` with numpy over
all queries at once — no polars group-by/sort on string keys and no Python loop per query. It is
the engine of :meth:`qmdlab.eval.study.Study.final`/:meth:`~qmdlab.eval.study.Study.score`, i.e. of a tuning
slider move and of every optimiser trial.

It reproduces the polars stages exactly, not approximately: the same float operations in the same
order (a pair's contributions are added in ``list_id`` order with Kahan compensation, which is what
polars' group ``sum`` does), the same tie-breaks (``fused_score`` desc, ``best_rank``, ``docno``;
then ``final_score`` desc, ``fused_rank``), so :meth:`FastRetune.final` equals
``blend_finish(fuse_candidates(lists, config)[2], scores, config)`` frame for frame
(``tests/pipeline/test_fastretune.py`` checks it on random traces built to have ties).

What it does not do (:meth:`FastRetune.unsupported` says which, and callers fall back to the
polars path): ``fusion=learned`` (a tree model), the tag lift and content dedupe (they need the
index's ``doc_tags``), recorded lists holding one document twice in a list, and rerank tables
with two scores for one (query, document) pair.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.config import BLEND_METHODS, FUSION_METHODS, PipelineConfig
from qmdlab.pipeline.trace import SCHEMAS


class Ranked(NamedTuple):
    """The ``final`` table of every query as arrays (one entry per kept row, in output order).

    ``pair`` indexes :attr:`FastRetune.pair_qid`/:attr:`FastRetune.pair_doc`; ``query`` is the
    query code (``FastRetune.qids[query]``); ``has_rerank`` is False where ``rerank_score`` is null.
    """

    pair: np.ndarray
    query: np.ndarray
    fused_rank: np.ndarray
    position_score: np.ndarray
    blend_weight: np.ndarray
    rerank_score: np.ndarray
    has_rerank: np.ndarray
    final_score: np.ndarray
    final_rank: np.ndarray


_ORIGINAL, _HYDE = "original", "hyde"


class FastRetune:
    """Integer-coded recorded lists, re-fused and re-blended with numpy.

    Parameters
    ----------
    lists : polars.DataFrame
        The recorded ``lists`` table of any number of queries (:data:`~qmdlab.pipeline.trace.SCHEMAS`).
    scores : polars.DataFrame, optional
        ``qid, docno, rerank_score`` (:func:`qmdlab.pipeline.retune.rerank_scores_of`); used when
        ``config.rerank`` is on.

    Examples
    --------
    >>> lists = pl.DataFrame({"qid": ["q"] * 3, "list_id": [0, 0, 1], "source": ["fts", "fts", "vec"],
    ...     "query_type": ["original"] * 3, "subquery": ["x"] * 3, "docno": ["a", "b", "b"], "chunk_id": [1, 2, 2],
    ...     "rank": [1, 2, 1], "backend_score": [1.0, 0.5, 0.9], "score": [0.9, 0.8, 0.7], "weight": [2.0] * 3})
    >>> FastRetune(lists).final(PipelineConfig(rerank=False))["docno"].to_list()
    ['b', 'a']
    """

    def __init__(self, lists: pl.DataFrame, scores: pl.DataFrame | None = None):
        lists = lists.select(list(SCHEMAS["lists"]))
        self.reason: str | None = None
        n = lists.height
        self.n_rows = n
        self.qids = lists["qid"].unique(maintain_order=True)
        self.docnos = lists["docno"].unique().sort()  # code order = polars' docno sort order
        q = (
            lists["qid"]
            .replace_strict(self.qids, pl.int_range(self.qids.len(), eager=True), return_dtype=pl.Int64)
            .to_numpy()
            if n
            else np.zeros(0, np.int64)
        )
        d = (
            lists["docno"]
            .replace_strict(self.docnos, pl.int_range(self.docnos.len(), eager=True), return_dtype=pl.Int64)
            .to_numpy()
            if n
            else np.zeros(0, np.int64)
        )
        list_id = lists["list_id"].to_numpy().astype(np.int64)
        key = q * max(self.docnos.len(), 1) + d
        pair_key, pair = np.unique(key, return_inverse=True)
        self.n_pairs = len(pair_key)
        self.pair_query = (pair_key // max(self.docnos.len(), 1)).astype(np.int64)
        self.pair_doc = (pair_key % max(self.docnos.len(), 1)).astype(np.int64)
        # rows pair-major, then by list_id: the order polars sums a pair's contributions in
        order = np.lexsort((list_id, pair))
        self._row = order  # position in the recorded frame (query order: first-seen rows)
        self._pair = pair[order]
        self._query = q[order]
        self._list_id = list_id[order]
        self._rank = lists["rank"].to_numpy()[order].astype(np.int64)
        self._rankf = self._rank.astype(np.float64)
        self._score = lists["score"].to_numpy()[order].astype(np.float64)
        source = lists["source"].to_numpy()[order]
        qtype = lists["query_type"].to_numpy()[order]
        self._vec = source == "vec"
        self._original = qtype == _ORIGINAL
        self._hyde = qtype == _HYDE
        kinds = lists.select("source", "query_type").unique().sort(["source", "query_type"]).rows()
        self._kinds = kinds
        kind_code = {k: i for i, k in enumerate(kinds)}
        self._kind = (
            np.array([kind_code[(s, t)] for s, t in zip(source, qtype)], dtype=np.int64) if n else np.zeros(0, np.int64)
        )
        # one code per (query, list): list-wise statistics (max, min) of norm_sum, gate, min-max
        lkey = q[order] * (int(list_id.max()) + 1 if n else 1) + self._list_id
        _, self._list = np.unique(lkey, return_inverse=True)
        self._n_lists_total = int(self._list.max()) + 1 if n else 0
        # queries whose rows are contiguous keep their order under any row filter
        self._contiguous = bool(n == 0 or np.all(np.diff(q) >= 0) or _contiguous(q))
        if n and np.any((self._pair[1:] == self._pair[:-1]) & (self._list_id[1:] == self._list_id[:-1])):
            self.reason = "a recorded list holds the same document twice"
        # rerank scores per pair
        self._rr = np.zeros(self.n_pairs)
        self._has_rr = np.zeros(self.n_pairs, dtype=bool)
        self.has_scores = scores is not None
        if scores is not None and scores.height and self.n_pairs:
            s = scores.select(
                pl.col("qid").cast(pl.String), pl.col("docno").cast(pl.String), pl.col("rerank_score").cast(pl.Float64)
            ).drop_nulls("rerank_score")
            if s.select(pl.struct("qid", "docno").is_duplicated().any()).item():
                self.reason = self.reason or "two rerank scores for one (query, document) pair"
            pairs = pl.DataFrame(
                {
                    "qid": self.qids.gather(self.pair_query),
                    "docno": self.docnos.gather(self.pair_doc),
                    "_p": np.arange(self.n_pairs),
                }
            )
            got = pairs.join(s, on=["qid", "docno"], how="inner")
            idx = got["_p"].to_numpy()
            self._rr[idx] = got["rerank_score"].to_numpy()
            self._has_rr[idx] = True

    # -- what is covered ---------------------------------------------------------------------
    def unsupported(self, config: PipelineConfig, *, doc_tags: pl.DataFrame | None = None) -> str | None:
        """Why ``config`` needs the polars path (``None``: :meth:`final` reproduces it)."""
        if self.reason:
            return self.reason
        if config.fusion not in FUSION_METHODS:
            return f"fusion={config.fusion}"
        if config.blend not in BLEND_METHODS:
            return f"blend={config.blend}"
        if doc_tags is not None and (
            (config.tags and config.tag_lift > 0) or (config.dedupe_content and "hash" in doc_tags.columns)
        ):
            return "tag lift / content dedupe need doc_tags"
        return None

    # -- the stages ---------------------------------------------------------------------------
    def _active(self, config: PipelineConfig, keep: np.ndarray | None) -> np.ndarray:
        """``ablate`` (and an optional per-row filter, in recorded row order) as a row mask."""
        act = self._rank <= config.list_limit
        if not config.vector:
            act &= ~self._vec
        if not config.hyde:
            act &= ~self._hyde
        if not config.expand:
            act &= self._original
        if keep is not None:
            act &= np.asarray(keep, dtype=bool)[self._row]
        return act

    def _weights(self, config: PipelineConfig) -> np.ndarray:
        """``reweight``: each (source, query_type)'s list weight; 0 for a type without an option."""
        tab = np.empty(len(self._kinds))
        for i, (source, qt) in enumerate(self._kinds):
            try:
                tab[i] = config.list_weight(source, qt)
            except ConfigError:
                tab[i] = 0.0
        return tab[self._kind]

    def _list_max(self, idx: np.ndarray, values: np.ndarray) -> np.ndarray:
        out = np.full(self._n_lists_total, -np.inf)
        np.maximum.at(out, self._list[idx], values)
        return out[self._list[idx]]

    def _list_min(self, idx: np.ndarray, values: np.ndarray) -> np.ndarray:
        out = np.full(self._n_lists_total, np.inf)
        np.minimum.at(out, self._list[idx], values)
        return out[self._list[idx]]

    def _gate(self, idx: np.ndarray, config: PipelineConfig) -> np.ndarray:
        """:func:`~qmdlab.pipeline.fuse.gate` on the rows ``idx`` (returns the kept subset)."""
        score = self._score[idx]
        top = self._list_max(idx, score)
        lst = self._list[idx]
        # ordinal rank by score desc within each list, ties in recorded row order
        order = np.lexsort((self._row[idx], -score, lst))
        starts = np.r_[0, np.flatnonzero(np.diff(lst[order])) + 1]
        pos = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
        ordinal = np.empty(len(order), dtype=np.int64)
        ordinal[order] = pos + 1
        admitted = (score >= top - config.gate_margin) & (ordinal <= config.gate_max_take)
        return idx[~self._vec[idx] | admitted]

    def fused(self, config: PipelineConfig, keep: np.ndarray | None = None):
        """``(pair, fused_score, best_rank, query_key)`` of every fused document, in fused order
        (queries in first-seen order, then ``fused_rank``)."""
        idx = np.flatnonzero(self._active(config, keep))
        method = config.fusion
        if method == "gated_rrf":
            idx = self._gate(idx, config)
        k = float(config.rrf_k)
        if method == "qmd_rrf":
            c = self._weights(config)[idx] / (k + self._rankf[idx])
        elif method in ("rrf", "gated_rrf"):
            c = 1.0 / (k + self._rankf[idx])
        elif method == "norm_sum":
            score = self._score[idx]
            top = self._list_max(idx, score)
            vec = self._vec[idx]
            with np.errstate(divide="ignore", invalid="ignore"):
                norm = np.where(vec, np.maximum(score, 0.0), np.where(top > 0, score / top, 0.0))
            c = np.where(vec, float(config.norm_weight_vec), float(config.norm_weight_fts)) * norm
        else:  # wsum_minmax, combmnz
            score = self._score[idx]
            lo = self._list_min(idx, score)
            hi = self._list_max(idx, score)
            mm = (score - lo) / np.maximum(hi - lo, 1e-9)
            c = self._weights(config)[idx] * mm if method == "wsum_minmax" else mm
        pair = self._pair[idx]
        m = len(idx)
        if m == 0:
            e = np.zeros(0, np.int64)
            return e, np.zeros(0), e, e
        start = np.r_[True, pair[1:] != pair[:-1]]
        starts = np.flatnonzero(start)
        sizes = np.diff(np.r_[starts, m])
        pos = np.arange(m) - np.repeat(starts, sizes)
        # Kahan-compensated sum in list_id order (polars' float group sum), vectorised by position
        s = c[starts].copy()
        comp = np.zeros(len(starts))
        owner = np.repeat(np.arange(len(starts)), sizes)
        for j in range(1, int(sizes.max())):
            at = np.flatnonzero(pos == j)
            g = owner[at]
            y = c[at] - comp[g]
            t = s[g] + y
            comp[g] = (t - s[g]) - y
            s[g] = t
        fpair = pair[starts]
        best = np.minimum.reduceat(self._rank[idx], starts)
        if method == "combmnz":
            s = s * sizes.astype(np.float64)
        if method == "qmd_rrf":
            bonus = np.where(best == 1, float(config.bonus_rank1), np.where(best <= 3, float(config.bonus_rank23), 0.0))
            s = s + bonus
        else:
            s = s + 0.0
        fq = self.pair_query[fpair]
        qkey = self._query_key(idx, fq)
        # fused_score desc, best_rank, docno within each query; pairs are in (query, docno) order,
        # so their position breaks the last ties
        order = sort_order(qkey, s, best, int(best.max()) + 1)
        return fpair[order], s[order], best[order], qkey[order]

    def _query_key(self, idx: np.ndarray, fq: np.ndarray) -> np.ndarray:
        """Sort key of each query: the position of its first active row (first-seen order)."""
        if self._contiguous:
            return fq
        first = np.full(len(self.qids), self.n_rows, dtype=np.int64)
        np.minimum.at(first, self._query[idx], self._row[idx])
        return first[fq]

    def ranked(self, config: PipelineConfig, keep: np.ndarray | None = None) -> Ranked:
        """Fuse, take the top ``candidate_limit``, blend with the rerank scores, finish.

        ``keep``: an optional boolean mask over the rows of the recorded ``lists`` frame (the
        study's ``lists`` filter), applied with the ablation switches.
        """
        pair, fscore, _, qkey = self.fused(config, keep)
        n = len(pair)
        starts = np.flatnonzero(np.r_[True, qkey[1:] != qkey[:-1]]) if n else np.zeros(0, np.int64)
        sizes = np.diff(np.r_[starts, n])
        frank = np.arange(n) - np.repeat(starts, sizes) + 1
        cand = frank <= config.candidate_limit
        pair, fscore, qkey, frank = pair[cand], fscore[cand], qkey[cand], frank[cand]
        n = len(pair)
        if n == 0:
            e = np.zeros(0, np.int64)
            f = np.zeros(0)
            return Ranked(e, e, e, f, f, f, np.zeros(0, bool), f, e)
        starts = np.flatnonzero(np.r_[True, qkey[1:] != qkey[:-1]])
        sizes = np.diff(np.r_[starts, n])
        use_rr = config.rerank and self.has_scores
        has = self._has_rr[pair] if use_rr else np.zeros(n, dtype=bool)
        rr = self._rr[pair]
        rankf = frank.astype(np.float64)
        if config.blend == "score":
            top = np.repeat(np.maximum.reduceat(fscore, starts), sizes)
            with np.errstate(divide="ignore", invalid="ignore"):
                pos = np.where(top > 0, fscore / top, 0.0)
        else:
            pos = 1.0 / rankf
        if config.blend in ("position", "score"):
            b1, b2 = config.blend_bands
            w1, w2, w3 = (float(x) for x in config.blend_weights)
            w = np.where(frank <= b1, w1, np.where(frank <= b2, w2, w3))
        elif config.blend == "rerank_only":
            w = np.zeros(n)
        else:
            w = np.ones(n)
        w = np.where(has, w, 1.0)
        final = np.where(has, w * pos + (1.0 - w) * rr, pos)
        # rank_final: final_score desc, then fused_rank (the candidates' order: a stable sort)
        order = sort_order(qkey, final + 0.0)
        pair, qkey, frank, pos, w, rr, has, final = (a[order] for a in (pair, qkey, frank, pos, w, rr, has, final))
        # finish: min_score (with the fallback probe), renumber, limit
        passed = final >= config.min_score
        keep_rows = passed
        if config.min_score_fallback > 0 and config.fallback_max > 0:
            qany = np.logical_or.reduceat(passed, starts)
            if not qany.all():
                probe = final >= config.min_score - config.min_score_fallback
                empty_q = np.repeat(~qany, sizes)
                pc = np.cumsum(probe) - np.repeat(np.cumsum(probe)[starts] - probe[starts], sizes)
                keep_rows = np.where(empty_q, probe & (pc <= int(config.fallback_max)), passed)
        sel = np.flatnonzero(keep_rows)
        qk = qkey[sel]
        if len(sel):
            st = np.flatnonzero(np.r_[True, qk[1:] != qk[:-1]])
            frank_final = np.arange(len(sel)) - np.repeat(st, np.diff(np.r_[st, len(sel)])) + 1
        else:
            frank_final = np.zeros(0, np.int64)
        lim = frank_final <= config.limit
        sel = sel[lim]
        return Ranked(
            pair[sel],
            self.pair_query[pair[sel]],
            frank[sel],
            pos[sel],
            w[sel],
            rr[sel],
            has[sel],
            final[sel],
            frank_final[lim],
        )

    def frame(self, r: Ranked) -> pl.DataFrame:
        """The ``final`` table of :meth:`ranked`'s arrays."""
        return pl.DataFrame(
            {
                "qid": self.qids.gather(r.query) if len(r.query) else pl.Series([], dtype=pl.String),
                "docno": self.docnos.gather(self.pair_doc[r.pair]) if len(r.pair) else pl.Series([], dtype=pl.String),
                "fused_rank": r.fused_rank,
                "position_score": r.position_score,
                "blend_weight": r.blend_weight,
                "rerank_score": pl.Series(r.rerank_score).set(pl.Series(~r.has_rerank), None)
                if len(r.pair)
                else pl.Series([], dtype=pl.Float64),
                "final_score": r.final_score,
                "final_rank": r.final_rank,
            },
            schema=SCHEMAS["final"],
        )

    def final(self, config: PipelineConfig, keep: np.ndarray | None = None) -> pl.DataFrame:
        """``blend_finish(fuse_candidates(lists, config)[2], scores, config)``, computed with numpy."""
        why = self.unsupported(config)
        if why:
            raise ConfigError(f"FastRetune cannot reproduce this config ({why}); use qmdlab.retune")
        return self.frame(self.ranked(config, keep))


def sort_order(group: np.ndarray, score: np.ndarray, tie: np.ndarray | None = None, n_tie: int = 1) -> np.ndarray:
    """The permutation sorting by ``group`` ascending, ``score`` descending, ``tie`` ascending,
    then position — ``np.lexsort((arange, tie, -score, group))``, computed as one integer sort:
    scores become dense ranks (equal floats, ``-0.0`` and ``0.0`` included, share one) and the
    four keys one int64. Falls back to ``np.lexsort`` if the product of the key ranges
    does not fit in 63 bits.

    >>> sort_order(np.array([1, 0, 0, 0]), np.array([0.5, 0.2, 0.9, 0.2]), np.array([1, 2, 1, 2]), 3).tolist()
    [2, 1, 3, 0]
    """
    n = len(score)
    if n == 0:
        return np.zeros(0, np.int64)
    neg = -score
    o = np.argsort(neg)
    sv = neg[o]
    dense = np.cumsum(np.r_[True, sv[1:] != sv[:-1]]) - 1
    rank = np.empty(n, np.int64)
    rank[o] = dense
    n_rank = int(dense[-1]) + 1
    n_group = int(group.max()) + 1
    if n_group * n_rank * n_tie * n >= 2**63 or group.min() < 0 or (tie is not None and tie.min() < 0):
        keys = (np.arange(n), rank) if tie is None else (np.arange(n), tie, rank)
        return np.lexsort((*keys, group))
    key = group.astype(np.int64) * n_rank + rank
    if tie is not None:
        key = key * n_tie + tie
    key = np.sort(key * n + np.arange(n))
    return key % n


def _contiguous(q: np.ndarray) -> bool:
    """Whether every query's rows are one block (so a row filter keeps the query order)."""
    change = np.flatnonzero(np.diff(q)) + 1
    firsts = q[np.r_[0, change]]
    return len(np.unique(firsts)) == len(firsts)


__all__ = ["FastRetune", "Ranked", "sort_order"]

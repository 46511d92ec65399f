"""A :class:`Study`: the recorded traces of a suite plus its qrels, re-scored under any config.

The expensive stages (expansion, retrieval lists, rerank scores) were run once and saved;
:meth:`Study.evaluate` re-fuses and re-blends every query with the stage functions
:func:`qmdlab.retune` runs (on the study's lists, coded once: :mod:`qmdlab.pipeline.coded`) and
scores the result with the vectorised metrics of :mod:`qmdlab.eval.metrics` — no model call, no
index access — so a notebook slider or an optimiser can call it hundreds of times.

Two kinds of change are possible:

- a :class:`~qmdlab.pipeline.config.PipelineConfig` (weights, ``rrf_k``, bonuses, fusion and
  blend methods, bands, limits, and the switches ``expand``/``hyde``/``vector``/``rerank``,
  which drop recorded lists);
- a ``lists`` filter, a polars expression over the ``lists`` table (``source``,
  ``query_type``) applied before the retune, for the cuts no config switch makes (vector
  only: ``pl.col("source") == "vec"``; lex expansion only, …). See :mod:`qmdlab.eval.ablation`.

Candidates that a new config promotes into the top ``candidate_limit`` but that were never
reranked keep a null rerank score (the blend falls back to their position score);
:attr:`Evaluation.unscored` counts how many final results that affects, so a tuned config
that relies on them is visible.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.blend import blend
from qmdlab.pipeline.coded import CodedLists, Final
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.finish import finish
from qmdlab.pipeline.fuse import candidates, fuse
from qmdlab.pipeline.retune import blend_finish, fuse_candidates, rerank_scores_of, retune
from qmdlab.pipeline.trace import Trace

from .fastmetrics import CodedScorer
from .folds import Fold, kfold
from .metrics import DEFAULT_METRICS, HEADLINE, Scorer, mean_scores
from .record import EVAL_DEPTH, Recording, load_run_dir, record, suite_config
from .suites import OfficialSplit, Suite, get_suite


class Evaluation(NamedTuple):
    """The result of :meth:`Study.evaluate`.

    Attributes
    ----------
    metrics : dict
        Mean of each metric over the judged queries.
    per_query : pl.DataFrame
        ``qid`` plus one column per metric.
    final : pl.DataFrame
        The re-blended ``final`` table (run-like: ``qid, docno, final_rank, final_score``, …).
    unscored : int
        Final results (within ``limit``) that have no rerank score although rerank is on.
    """

    metrics: dict[str, float]
    per_query: pl.DataFrame
    final: pl.DataFrame
    unscored: int


class Study:
    """RecordingInfo traces + qrels, evaluated under new configs without models.

    Parameters
    ----------
    trace : Trace
        The concatenated trace of every query of the suite (usually of the full pipeline:
        expansion on, rerank on, so every cheaper configuration is a cut of it).
    qrels : pl.DataFrame
        ``qid, docno, grade`` with the trace's docnos (``collection/path``).
    metrics : sequence of str
        Metrics computed by :meth:`evaluate` (see :mod:`qmdlab.eval.metrics`).
    config : PipelineConfig, optional
        The configuration the trace was recorded with (defaults to the trace's own).
    rerank_fn : callable, optional
        ``qmdlab.Lab.rerank_fn(trace)``: when given, candidates a config newly promotes are
        reranked (a model call, cached by the lab) and their scores added to :attr:`trace`, so
        each is computed once. Without it (the default, and the slider path) no model is called.
    split : OfficialSplit, optional
        The collection's official train/test split (:attr:`qmdlab.eval.suites.Suite.split`):
        :meth:`folds` is then that one fold (fit on ``train``, report ``test``) instead of k-fold.

    Examples
    --------
    >>> lists = pl.DataFrame({"qid": ["1", "1"], "list_id": [0, 1], "source": ["fts", "vec"],
    ...     "query_type": ["original"] * 2, "subquery": ["q"] * 2, "docno": ["c/a.md", "c/b.md"],
    ...     "chunk_id": [1, 2], "rank": [1, 1], "backend_score": [-3.0, 0.9], "score": [0.75, 0.9],
    ...     "weight": [2.0, 2.0]})
    >>> study = Study(Trace(lists=lists), pl.DataFrame({"qid": ["1"], "docno": ["c/b.md"], "grade": [1]}))
    >>> study.evaluate(PipelineConfig(rerank=False)).metrics["mrr@10"]  # tie -> docno order: a first
    0.5
    >>> study.evaluate(PipelineConfig(rerank=False, weight_original_vec=3.0)).metrics["mrr@10"]
    1.0
    """

    def __init__(
        self,
        trace: Trace,
        qrels: pl.DataFrame,
        *,
        metrics: Sequence[str] = DEFAULT_METRICS,
        config: PipelineConfig | None = None,
        rerank_fn=None,
        docs: pl.DataFrame | None = None,
        split: OfficialSplit | None = None,
    ):
        qrels = qrels.select(pl.col("qid").cast(pl.Utf8), pl.col("docno").cast(pl.Utf8), pl.col("grade").cast(pl.Int64))
        self.qrels = qrels
        self.metrics = tuple(metrics)
        self.config = config or (PipelineConfig.from_dict(trace.config) if trace.config else PipelineConfig())
        judged = set(qrels["qid"].unique().to_list())
        self.trace = _restrict(trace, judged)
        self.qids = sorted(judged)
        self.scorer = Scorer(qrels, self.metrics)
        self.rerank_fn = rerank_fn
        self.docs = docs  # per-document features for fusion=learned (qmdlab.pipeline.learned.doc_features)
        self.split = split
        self._scores: pl.DataFrame | None = None
        self.fast = True  # False: every config through the frame functions of qmdlab.retune (coded anew each call)
        self._coded: _Coded | None = None

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_recording(cls, recording: Recording, *, complete_rerank: bool = False, **kwargs) -> Study:
        """The study of a :func:`qmdlab.eval.record.record` (or :func:`qmdlab.eval.record.load_recorded`) result.

        With ``complete_rerank`` (and a recording that has its lab and a reranker), candidates
        a config newly promotes are reranked (model calls, cached) instead of left unscored.
        """
        rfn = None
        lab = recording.lab
        if complete_rerank and lab is not None and getattr(lab, "reranker", None) is not None:
            rfn = lab.rerank_fn(recording.trace, recording.config)
        kwargs.setdefault("split", recording.suite.split)
        return cls(recording.trace, recording.qrels, config=recording.config, rerank_fn=rfn, **kwargs)

    @classmethod
    def from_run_dir(cls, directory: str | Path, **kwargs) -> Study:
        """Load a run directory written by :func:`qmdlab.eval.runner.run_suite` (``traces/`` + ``qrels.parquet``)."""
        trace, qrels, config = load_run_dir(directory)
        return cls(trace, qrels, config=config, **kwargs)

    @classmethod
    def for_suite(
        cls,
        suite: str | Suite = "default",
        models=None,
        config: PipelineConfig | None = None,
        *,
        depth: int = EVAL_DEPTH,
        limit: int | None = None,
        progress: bool = True,
        on_progress=None,
        log=print,
        **unused,
    ) -> Study:
        """Record (or load from the per-query trace cache) a suite and return its Study.

        ``models`` defaults to ``qmdlab.models.load_models()``, ``config`` to the suite's own; with the
        default models, the stages are those of the preset's default plan
        (:func:`qmdlab.pipeline.stages.plan_stages`: on the offline preset, no LLM stage unless the config
        turns one on). This is :func:`qmdlab.eval.record.record` (same cache as ``qmdlab eval``) without writing a
        results directory; ``limit`` keeps the first N judged queries.
        """
        if unused:
            from qmdlab.errors import QmdlabError

            raise QmdlabError(
                f"Study.for_suite: unknown option(s) {sorted(unused)}; valid: depth, limit, progress, on_progress, log"
            )
        s = suite if isinstance(suite, Suite) else get_suite(suite)
        if models is None:  # the default models run the stages the preset's default plan runs
            from qmdlab.models import load_models
            from qmdlab.pipeline.stages import model_roles, plan_stages

            config, _ = plan_stages(config or suite_config(s))
            models = load_models(**model_roles(config))
        return cls.from_recording(
            record(s, models, config, depth=depth, limit=limit, progress=progress, on_progress=on_progress, log=log)
        )

    def subset(self, qids: Iterable[str]) -> Study:
        """The same study restricted to some queries (cross-validation folds use this)."""
        keep = set(qids)
        return Study(
            self.trace,
            self.qrels.filter(pl.col("qid").is_in(list(keep))),
            metrics=self.metrics,
            config=self.config,
            rerank_fn=self.rerank_fn,
            docs=self.docs,
            split=self.split,
        )

    def folds(self, k: int, seed: int = 0) -> list[Fold]:
        """The folds every tuner and learner of this study uses: with an official split, the one
        fold ``train → test`` (restricted to the study's queries); otherwise :func:`kfold`.

        >>> qrels = pl.DataFrame({"qid": ["1", "2", "3"], "docno": ["c/a.md"] * 3, "grade": [1, 1, 1]})
        >>> Study(Trace(), qrels, split=OfficialSplit(("1", "2", "9"), ("3",))).folds(5)
        [Fold(train=('1', '2'), test=('3',))]
        """
        if self.split is None:
            return kfold(self.qids, k, seed)
        have = set(self.qids)
        train = tuple(q for q in self.split.train if q in have)
        test = tuple(q for q in self.split.test if q in have)
        if not train or not test:
            raise ConfigError(
                f"the official split needs queries on both sides; this study has {len(train)} training and "
                f"{len(test)} test queries (record the suite's training queries too)"
            )
        return [Fold(train, test)]

    # -- evaluation -----------------------------------------------------------------------
    def retuned(self, config: PipelineConfig | None = None, lists: pl.Expr | None = None) -> Trace:
        """The trace re-fused and re-blended under ``config`` (after the ``lists`` filter)."""
        cfg = config or self.config
        trace = self.trace
        if lists is not None:
            trace = dataclasses.replace(trace, lists=trace.lists.filter(lists))
        if self.rerank_fn is None or not cfg.rerank:
            return retune(trace, cfg, docs=self.docs)
        out = retune(trace, cfg, rerank_fn=self.rerank_fn, docs=self.docs)
        if out.rerank.height > self.trace.rerank.height:  # keep the new scores for later configs
            self.trace = dataclasses.replace(self.trace, rerank=out.rerank)
            self._scores = None
            self._coded = None
        return out

    def _fast_ranked(self, cfg: PipelineConfig, lists: pl.Expr | None) -> tuple[Final, _Coded] | None:
        """The slider path: the stage functions on the study's lists, coded once, or ``None`` when
        ``cfg`` needs :func:`qmdlab.retune` (learned fusion, a ``rerank_fn`` to call)."""
        if not self.fast or cfg.fusion == "learned" or (self.rerank_fn is not None and cfg.rerank):
            return None
        if self._coded is None:
            if self._scores is None:
                self._scores = rerank_scores_of(self.trace)
            coded = CodedLists(self.trace.lists)
            self._coded = _Coded(
                coded, *coded.pair_values(self._scores, "rerank_score"), CodedScorer(self.scorer, coded)
            )
        c = self._coded
        if c.scorer.reason:
            return None
        keep = None
        if lists is not None:
            keep = self.trace.lists.select(lists.fill_null(False)).to_series().to_numpy()
        active = c.lists.active(cfg, keep)
        cands = candidates(fuse(c.lists, cfg, active=active, weight=c.lists.weights(cfg)), cfg.candidate_limit)
        rr = (c.rerank[cands.pair], c.has_rerank[cands.pair]) if cfg.rerank else None
        return finish(blend(cands, rr, cfg), cfg), c

    def final(self, config: PipelineConfig | None = None, lists: pl.Expr | None = None) -> pl.DataFrame:
        """Only the re-blended ``final`` table — the slider path.

        Every formula fusion and blend method, limits, switches and min score run the stage
        functions (:mod:`qmdlab.pipeline.coded`: the numpy functions :func:`qmdlab.retune` and
        :meth:`qmdlab.Lab.query` run) on the study's lists, coded once, over all queries at once, with
        the recorded rerank scores kept between calls and without the trace bookkeeping retune also
        does (snippet join, notes, timings). ``study.fast = False`` codes the lists anew on every call
        (:func:`~qmdlab.pipeline.retune.fuse_candidates`, :func:`~qmdlab.pipeline.retune.blend_finish`);
        a test checks both equal ``retune(...).final``. Learned fusion, and studies with a
        ``rerank_fn``, go through :func:`qmdlab.retune` itself.
        """
        cfg = config or self.config
        got = self._fast_ranked(cfg, lists)
        if got is not None:
            return got[1].lists.final_table(got[0], frame=True)
        if self.rerank_fn is not None and cfg.rerank:
            return self.retuned(cfg, lists).final
        recorded = self.trace.lists if lists is None else self.trace.lists.filter(lists)
        _, _, cands = fuse_candidates(recorded, cfg, self.docs)
        if cfg.rerank and self._scores is None:
            self._scores = rerank_scores_of(self.trace)
        return blend_finish(cands, self._scores if cfg.rerank else None, cfg)

    def evaluate(self, config: PipelineConfig | None = None, lists: pl.Expr | None = None) -> Evaluation:
        """Re-score every judged query under ``config`` (default: the recorded config).

        Parameters
        ----------
        config : PipelineConfig, optional
        lists : pl.Expr, optional
            Keep only the recorded retrieval lists matching this expression.
        """
        cfg = config or self.config
        got = self._fast_ranked(cfg, lists)
        if got is not None:
            ranked, c = got
            final = c.lists.final_table(ranked, frame=True)
            table = c.scorer.per_query(ranked)
        else:
            final = self.final(cfg, lists)
            table = self.scorer.score(final.rename({"final_rank": "rank"}))
        unscored = 0
        if cfg.rerank and cfg.blend != "none":
            unscored = final.filter(pl.col("rerank_score").is_null()).height
        return Evaluation(mean_scores(table), table, final, unscored)

    def score(
        self, config: PipelineConfig | None = None, metric: str = HEADLINE, lists: pl.Expr | None = None
    ) -> float:
        """The mean of one metric under ``config`` (the optimisers' objective)."""
        cfg = config or self.config
        got = self._fast_ranked(cfg, lists)
        if got is not None and metric in (m.name for m in got[1].scorer.metrics):
            return got[1].scorer.mean(got[0], metric)
        return self.evaluate(cfg, lists).metrics[metric]


class _Coded(NamedTuple):
    """A study's lists coded once: the rerank score of each pair and the qrels on the pair codes."""

    lists: CodedLists
    rerank: np.ndarray
    has_rerank: np.ndarray
    scorer: CodedScorer


def _restrict(trace: Trace, qids: set[str]) -> Trace:
    """Keep only the rows of ``qids`` in every table of ``trace``."""
    keep = list(qids)
    tables = {
        name: getattr(trace, name).filter(pl.col("qid").is_in(keep))
        for name in ("queries", "expansions", "lists", "fused", "rerank", "final", "results", "notes")
    }
    return Trace(**tables, timings=trace.timings, config=trace.config)

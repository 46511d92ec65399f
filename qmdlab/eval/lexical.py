"""Evaluate the lexical knobs on recorded traces: a :class:`qmdlab.eval.study.Study` that re-runs BM25.

:class:`~qmdlab.eval.study.Study` re-fuses recorded lists and never touches the index, so the BM25
knobs (``bm25_weight_*``, ``bm25_prefix``, ``bm25_stopwords``, ``bm25_query_tf``, ``bm25_mode``,
``bm25_min_match``) cannot change anything there. :class:`LexicalStudy` wraps a study and the
suite's index: a config whose lexical knobs differ from the recorded ones gets its BM25 lists
re-run by :func:`qmdlab.pipeline.rerun_bm25.rerun_bm25` (once per knob setting, for every query; cached),
then the usual re-fusion. It has the interface the optimiser and the tune notebook use
(``qids``, ``config``, ``evaluate``, ``score``, ``subset``), so lexical knobs can be tuned with
the same cross-validation (:data:`LEXICAL_SPACE`).

Cost: one BM25 call per recorded BM25 list per new knob setting — measured by
``experiments/refuse_timing/run.py`` (CISI: about 15 ms per query on the shared 2-core machine, load
average ~11; the default corpus: about 2 ms).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import polars as pl

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.rerun_bm25 import Bm25RerunCache, lexical_key, rerun_bm25

from .optimise import Param
from .study import Evaluation, Study

LEXICAL_SPACE = (
    Param("bm25_weight_title", 0.0, 10.0),
    Param("bm25_weight_body", 0.25, 4.0),
    Param("bm25_weight_filepath", 0.0, 4.0),
)
"""The numeric lexical knobs ``qmdlab tune --lexical`` adds to the search space (the switches
``bm25_prefix``/``bm25_stopwords``/``bm25_query_tf`` are set by hand or in the notebook)."""
DOC_QUERY_SPACE = (Param("bm25_weight_doc_queries", 0.0, 4.0),)
"""The doc-queries column's weight, tuned too when the index has generated queries (:func:`lexical_space`)."""


def lexical_space(index: Any) -> tuple[Param, ...]:
    """:data:`LEXICAL_SPACE`, plus :data:`DOC_QUERY_SPACE` when ``index`` has expansions written
    (``qmdlab expand-docs``): tuning a weight of an empty column would only spend trials."""
    from qmdlab.store.doc_expansions import has_doc_expansions

    return LEXICAL_SPACE + (DOC_QUERY_SPACE if has_doc_expansions(index) else ())


class LexicalStudy:
    """A :class:`Study` plus the index its traces were recorded on.

    Parameters
    ----------
    study : Study
    index : qmdlab.store.Index
    cache : Bm25RerunCache, optional
        Shared between a study and its :meth:`subset` s (cross-validation folds).
    """

    def __init__(self, study: Study, index: Any, cache: Bm25RerunCache | None = None):
        self.study = study
        self.index = index
        self.cache = cache if cache is not None else Bm25RerunCache(maxsize=64)
        self._studies: dict[tuple, Study] = {}
        self._source: tuple[LexicalStudy, list[str]] | None = None  # (parent, qids) of a subset

    # the Study interface the optimiser and notebooks use
    @property
    def qids(self) -> list[str]:
        return self.study.qids

    @property
    def config(self) -> PipelineConfig:
        return self.study.config

    @property
    def trace(self):
        return self.study.trace

    @property
    def qrels(self) -> pl.DataFrame:
        return self.study.qrels

    def for_config(self, config: PipelineConfig) -> Study:
        """The study whose BM25 lists match ``config``'s lexical knobs (the recorded one if equal)."""
        key = lexical_key(config)
        if key == lexical_key(self.study.config):
            return self.study
        if key not in self._studies:
            if self._source is not None:  # a fold: the parent's re-run, restricted to the fold's queries
                parent, keep = self._source
                self._studies[key] = parent.for_config(config).subset(keep)
            else:
                lists = rerun_bm25(self.study.trace.lists, self.index, config, cache=self.cache)
                trace = dataclasses.replace(self.study.trace, lists=lists)
                self._studies[key] = Study(
                    trace, self.study.qrels, metrics=self.study.metrics, config=self.study.config, docs=self.study.docs
                )
        return self._studies[key]

    def evaluate(self, config: PipelineConfig | None = None, lists: pl.Expr | None = None) -> Evaluation:
        cfg = config or self.study.config
        return self.for_config(cfg).evaluate(cfg, lists)

    def score(
        self, config: PipelineConfig | None = None, metric: str = "ndcg@10", lists: pl.Expr | None = None
    ) -> float:
        return self.evaluate(config, lists).metrics[metric]

    def folds(self, k: int, seed: int = 0):
        """The wrapped study's folds (:meth:`qmdlab.eval.study.Study.folds`)."""
        return self.study.folds(k, seed)

    def subset(self, qids: Iterable[str]) -> LexicalStudy:
        """The same study on some queries; BM25 re-runs are shared with this one (they are per
        query, so a fold never sees another fold's judgments through them)."""
        keep = list(qids)
        sub = LexicalStudy(self.study.subset(keep), self.index, self.cache)
        sub._source = (self, keep)
        return sub


__all__ = ["LexicalStudy", "LEXICAL_SPACE", "DOC_QUERY_SPACE", "lexical_space"]

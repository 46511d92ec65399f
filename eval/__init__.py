"""Evaluation and tuning of the qmdlab pipeline on labelled query sets.

- :mod:`eval.suites` / :mod:`eval.loaders` — suites (default corpus, CISI, any SMART/TREC/BEIR/JSONL
  directory) and their loaders;
- :mod:`eval.metrics` — nDCG/MRR/recall/P@k as ranx defines them, vectorised (:class:`~eval.metrics.Scorer`);
- :mod:`eval.significance` — paired t-test and Fisher randomisation against a baseline;
- :mod:`eval.runner` — index, run and save a suite (TREC run files, parquet traces, metrics.json);
- :mod:`eval.study` — :class:`~eval.study.Study`: recorded traces re-scored under any config, no models;
- :mod:`eval.ablation` — the ablation matrix cut from one set of traces;
- :mod:`eval.optimise` — grid/random/coordinate/TPE search with k-fold cross-validation;
- :mod:`eval.distributions`, :mod:`eval.thresholds` — score distributions and min-score thresholds.
"""

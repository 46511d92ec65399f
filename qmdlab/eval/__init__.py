"""Evaluation and tuning of the qmdlab pipeline on labelled query sets.

- :mod:`qmdlab.eval.suites` / :mod:`qmdlab.eval.loaders` — suites (default corpus, CISI, any SMART/TREC/BEIR/JSONL
  directory) and their loaders;
- :mod:`qmdlab.eval.metrics` — nDCG/MRR/recall/P@k as ranx defines them, vectorised (:class:`~qmdlab.eval.metrics.Scorer`);
- :mod:`qmdlab.eval.significance` — paired t-test and Fisher randomisation against a baseline;
- :mod:`qmdlab.eval.runner` — index, run and save a suite (TREC run files, parquet traces, metrics.json);
- :mod:`qmdlab.eval.study` — :class:`~qmdlab.eval.study.Study`: recorded traces re-scored under any config, no models;
- :mod:`qmdlab.eval.ablation` — the ablation matrix cut from one set of traces;
- :mod:`qmdlab.eval.optimise` — grid/random/coordinate/TPE search with k-fold cross-validation;
- :mod:`qmdlab.eval.distributions`, :mod:`qmdlab.eval.thresholds` — score distributions and min-score thresholds.
"""

"""Folds over queries: which judged queries fit a tuner or learner and which check it.

Every held-out figure comes from a fold whose ``test`` queries its ``train`` side never saw:
k-fold over the suite's queries (:func:`kfold`), or a collection's official split as one fold
(:meth:`qmdlab.eval.study.Study.folds`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from qmdlab.errors import ConfigError


class Fold(NamedTuple):
    """Query ids used to tune (``train``) and to check (``test``) in one fold."""

    train: tuple[str, ...]
    test: tuple[str, ...]


def kfold(qids: Sequence[str], k: int = 5, seed: int = 0) -> list[Fold]:
    """Split query ids into ``k`` folds (shuffled with ``seed``; sizes differ by at most one).

    Every query is in exactly one test fold and never in its own fold's training set.

    >>> sorted(f.test for f in kfold(["a", "b", "c"], 3, seed=1))
    [('a',), ('b',), ('c',)]
    >>> sorted(len(f.test) for f in kfold([str(i) for i in range(10)], 3))
    [3, 3, 4]
    """
    qids = sorted(dict.fromkeys(str(q) for q in qids))
    if k < 2:
        raise ConfigError(f"cross-validation needs at least 2 folds, got {k}")
    if k > len(qids):
        raise ConfigError(f"{k} folds but only {len(qids)} judged queries; use --folds {max(2, len(qids))} or fewer")
    order = np.random.default_rng(seed).permutation(len(qids))
    parts = np.array_split(order, k)
    folds = []
    for part in parts:
        test = tuple(qids[i] for i in sorted(part))
        held = set(test)
        folds.append(Fold(tuple(q for q in qids if q not in held), test))
    return folds


def fitted_qids(folds: Sequence[Fold]) -> set[str]:
    """The queries some fold trains on: all of them under k-fold, only the training side of an official split.

    >>> sorted(fitted_qids(kfold(["a", "b", "c"], 3))), sorted(fitted_qids([Fold(("a", "b"), ("c",))]))
    (['a', 'b', 'c'], ['a', 'b'])
    """
    return set().union(*(f.train for f in folds))

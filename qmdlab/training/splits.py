"""Fixed-seed train / held-out splits of a suite's judged queries, and the guard that keeps them apart.

A split is drawn once per run and written to ``splits.json`` in the run directory; every stage
that touches labelled queries reads it back: GRPO's retrieval reward sees only ``train`` qids,
evaluation only ``heldout`` qids, and both call :func:`qmdlab.training.leakage.check_no_heldout` so
that a held-out query reaching training is an error, not a silently inflated number.

Queries are addressed across suites as ``"suite:qid"`` (:func:`tag`), because suites reuse qids
(CISI's ``"1"`` and another collection's ``"1"`` are different queries).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from qmdlab.errors import ConfigError
from qmdlab.training.leakage import check_no_heldout


class QuerySplit(NamedTuple):
    """One suite's split: sorted ``train`` and ``heldout`` qids, and how they were drawn."""

    suite: str
    train: tuple[str, ...]
    heldout: tuple[str, ...]
    seed: int
    heldout_fraction: float


def split_queries(suite: str, qids: Iterable[str], *, heldout_fraction: float = 0.5, seed: int = 0) -> QuerySplit:
    """Shuffle the sorted ``qids`` with ``seed`` and hold out ``round(n * heldout_fraction)`` (at least one).

    The result depends only on the set of qids, the fraction and the seed:

    >>> s = split_queries("cisi", ["3", "1", "2", "4"], heldout_fraction=0.5, seed=0)
    >>> len(s.train), len(s.heldout), set(s.train) | set(s.heldout) == {"1", "2", "3", "4"}
    (2, 2, True)
    >>> split_queries("cisi", ["4", "3", "2", "1"], heldout_fraction=0.5, seed=0) == s
    True
    >>> split_queries("x", ["1"], heldout_fraction=0.5)
    Traceback (most recent call last):
    ...
    qmdlab.errors.ConfigError: suite 'x' has 1 judged query; a train/held-out split needs at least 2
    """
    ids = sorted({str(q) for q in qids})
    if not 0.0 < heldout_fraction < 1.0:
        raise ConfigError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
    if len(ids) < 2:
        raise ConfigError(
            f"suite {suite!r} has {len(ids)} judged quer{'y' if len(ids) == 1 else 'ies'}; "
            "a train/held-out split needs at least 2"
        )
    shuffled = list(ids)
    random.Random(seed).shuffle(shuffled)
    n_held = min(max(1, round(len(ids) * heldout_fraction)), len(ids) - 1)
    return QuerySplit(suite, tuple(sorted(shuffled[n_held:])), tuple(sorted(shuffled[:n_held])), seed, heldout_fraction)


def suite_split(suite, qids: Iterable[str], *, heldout_fraction: float = 0.5, seed: int = 0) -> QuerySplit:
    """The split every trainer uses for ``suite``: its official train/test split when it has one
    (:attr:`qmdlab.eval.suites.Suite.split`, SciFact's; restricted to ``qids``; ``seed`` and the
    fraction are then only recorded), else :func:`split_queries`' seeded draw.

    >>> from pathlib import Path
    >>> from qmdlab.eval.loaders import OfficialSplit
    >>> class S: name, split = "sf", OfficialSplit(("1", "2"), ("3",))
    >>> suite_split(S(), ["1", "2", "3", "4"])
    QuerySplit(suite='sf', train=('1', '2'), heldout=('3',), seed=0, heldout_fraction=0.3333333333333333)
    """
    official = getattr(suite, "split", None)
    if official is None:
        return split_queries(suite.name, qids, heldout_fraction=heldout_fraction, seed=seed)
    have = {str(q) for q in qids}
    train = tuple(q for q in official.train if q in have)
    test = tuple(q for q in official.test if q in have)
    if not train or not test:
        raise ConfigError(
            f"suite {suite.name!r}: its official split leaves {len(train)} training and {len(test)} test queries here"
        )
    return QuerySplit(suite.name, train, test, seed, len(test) / (len(train) + len(test)))


def tag(suite: str, qid: str) -> str:
    """The cross-suite id of a query.

    >>> tag("cisi", "12")
    'cisi:12'
    """
    return f"{suite}:{qid}"


def untag(tagged: str) -> tuple[str, str]:
    """Inverse of :func:`tag`.

    >>> untag("cisi:12")
    ('cisi', '12')
    """
    suite, sep, qid = tagged.partition(":")
    if not sep:
        raise ValueError(f"not a suite-tagged qid: {tagged!r}")
    return suite, qid


def save_splits(splits: Sequence[QuerySplit], path: str | Path) -> Path:
    """Write ``{suite: {"train": [...], "heldout": [...], "seed": s, "heldout_fraction": f}}``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        s.suite: {
            "train": list(s.train),
            "heldout": list(s.heldout),
            "seed": s.seed,
            "heldout_fraction": s.heldout_fraction,
        }
        for s in splits
    }
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def load_splits(path: str | Path) -> dict[str, QuerySplit]:
    """Read :func:`save_splits`' file; a split whose two sides overlap is refused."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"split file {path} does not exist (the recipe's `split` step writes it)") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON ({err.msg}, line {err.lineno})") from None
    out = {}
    for suite, d in data.items():
        s = QuerySplit(
            suite, tuple(d["train"]), tuple(d["heldout"]), int(d.get("seed", 0)), float(d.get("heldout_fraction", 0.5))
        )
        check_no_heldout(s.train, s.heldout, where=f"the training side of {path} ({suite})")
        out[suite] = s
    return out


def heldout_tagged(splits: Mapping[str, QuerySplit]) -> set[str]:
    """Every held-out query of ``splits`` as ``suite:qid``."""
    return {tag(s.suite, q) for s in splits.values() for q in s.heldout}

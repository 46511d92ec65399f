"""Tuning pipeline knobs on labelled queries — always with a held-out check.

Search methods (all maximise ``objective(params) -> float`` over a :class:`Param` space and
start from the base configuration's values, so the best is never worse than the default on
the data it was tuned on):

- ``grid``: every combination of ``points`` values per parameter (small spaces only);
- ``random``: uniform samples (seeded);
- ``coordinate``: coordinate ascent — sweep one parameter over ``points`` values with the
  others fixed, keep the best, move on, repeat while it improves (deterministic, no extra
  dependency; the default);
- ``tpe``: Optuna's TPE sampler (``pip install 'qmdlab[tune]'``).

:func:`cross_validate` splits the judged queries into folds (:meth:`qmdlab.eval.study.Study.folds`:
k folds, or a collection's official split as one fold), tunes on the training folds, scores the held-out fold with the tuned and with the base config, and
reports the per-query held-out gain — the number that says whether tuning generalises or
only fits the queries it saw. The config it returns is tuned on all queries.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple, cast

import numpy as np
import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.config import EXPAND_GATES, PipelineConfig

from .folds import fitted_qids
from .metrics import HEADLINE
from .significance import held_out_pvalues

METHODS = ("coordinate", "random", "grid", "tpe")


class Param(NamedTuple):
    """One tunable knob: a :class:`PipelineConfig` field, or a blend tuple's item by its flat name
    (``blend_weight_1..3`` / ``blend_band_1..2``: :data:`qmdlab.pipeline.config.BLEND_ITEMS`); a
    ``choice`` knob takes one of ``choices`` (a string option: :meth:`choice`)."""

    name: str
    low: float
    high: float
    kind: str = "float"  # "float", "int" or "choice"
    choices: tuple = ()

    @classmethod
    def choice(cls, name: str, choices: Sequence) -> Param:
        """A knob taking one of ``choices`` (every one is a grid point).

        >>> Param.choice("expand_gate", ("off", "overlap")).grid(7)
        ['off', 'overlap']
        """
        return cls(name, 0, len(choices) - 1, "choice", tuple(choices))

    def grid(self, points: int) -> list:
        """``points`` evenly spaced values (distinct integers for int knobs; every choice).

        >>> Param("rrf_k", 1, 121, "int").grid(4)
        [1, 41, 81, 121]
        >>> Param("w", 0.0, 1.0).grid(3)
        [0.0, 0.5, 1.0]
        """
        if self.kind == "choice":
            return list(self.choices)
        values = np.linspace(self.low, self.high, max(points, 2))
        if self.kind == "int":
            return sorted({int(round(v)) for v in values})
        return [float(round(v, 6)) for v in values]

    def sample(self, rng: np.random.Generator):
        if self.kind == "choice":
            return self.choices[int(rng.integers(len(self.choices)))]
        if self.kind == "int":
            return int(rng.integers(int(self.low), int(self.high) + 1))
        return float(rng.uniform(self.low, self.high))


FUSION_SPACE = (
    Param("weight_original_fts", 0.0, 4.0),
    Param("weight_original_vec", 0.0, 4.0),
    Param("weight_lex", 0.0, 3.0),
    Param("weight_vec", 0.0, 3.0),
    Param("weight_hyde", 0.0, 3.0),
    Param("rrf_k", 1, 120, "int"),
    Param("bonus_rank1", 0.0, 0.1),
    Param("bonus_rank23", 0.0, 0.05),
)
EXPAND_TYPE_CHOICES = ("lex,vec,hyde", "lex", "lex,vec", "lex,hyde", "vec,hyde", "vec", "hyde")
"""Every ``expand_types`` value: each non-empty set of expansion types."""
EXPANSION_SPACE = (
    Param.choice("expand_types", EXPAND_TYPE_CHOICES),
    Param.choice("expand_gate", EXPAND_GATES),
    Param("expand_gate_min_overlap", 0.0, 1.0),
)
"""The expansion knobs (re-run on recorded lists): which expansion types are fused, and the gate
(its threshold is swept after the gate itself, so coordinate ascent tries the gate at the start's
threshold first)."""
BLEND_SPACE = (
    Param("blend_weight_1", 0.0, 1.0),
    Param("blend_weight_2", 0.0, 1.0),
    Param("blend_weight_3", 0.0, 1.0),
    Param("blend_band_1", 1, 5, "int"),
    Param("blend_band_2", 5, 20, "int"),
)


def default_space(config: PipelineConfig, *, rerank: bool | None = None) -> tuple[Param, ...]:
    """The knobs worth tuning for ``config``: fusion weights, ``rrf_k``, bonuses, with expansion on
    the expansion types fused and the expansion gate (:data:`EXPANSION_SPACE`), the candidate
    limit (up to the recorded one: beyond it no rerank scores exist) and, with rerank on,
    the blend bands and weights."""
    rerank = config.rerank if rerank is None else rerank
    space = list(FUSION_SPACE)
    if config.expand:  # the gate fuses each side by a formula: not under fusion=learned
        space += EXPANSION_SPACE if config.fusion != "learned" else EXPANSION_SPACE[:1]
    if config.candidate_limit > 10:
        space.append(Param("candidate_limit", 10, config.candidate_limit, "int"))
    if rerank and config.blend == "position":
        space += BLEND_SPACE
    return tuple(space)


def params_of(config: PipelineConfig, space: Sequence[Param]) -> dict:
    """The values of ``space``'s knobs in ``config``.

    >>> params_of(PipelineConfig(), [Param("rrf_k", 1, 100, "int"), Param("blend_weight_2", 0, 1)])
    {'rrf_k': 60, 'blend_weight_2': 0.6}
    """
    return {p.name: config.flat(p.name) for p in space}


def apply_params(config: PipelineConfig, params: dict) -> PipelineConfig:
    """``config`` with ``params`` set (tuple items assembled; band 2 kept ≥ band 1).

    >>> apply_params(PipelineConfig(), {"blend_band_1": 8, "blend_band_2": 5, "rrf_k": 10}).blend_bands
    (8, 8)
    """
    return config.replace_flat(**params)


class SearchResult(NamedTuple):
    """Best parameters found, their objective value, and every trial (``trial, value, <params>``)."""

    params: dict
    value: float
    history: pl.DataFrame


def search(
    objective: Callable[[dict], float],
    space: Sequence[Param],
    start: dict,
    *,
    method: str = "coordinate",
    trials: int = 200,
    points: int = 7,
    seed: int = 0,
) -> SearchResult:
    """Maximise ``objective`` over ``space`` starting from ``start`` (always evaluated first).

    ``trials`` bounds the objective calls (``grid`` refuses a grid larger than that).
    Ties keep the earlier trial, so the start wins unless something is strictly better.
    """
    if method not in METHODS:
        raise ConfigError(f"unknown search method {method!r}; choose one of {', '.join(METHODS)}")
    if trials < 1:
        raise ConfigError("trials must be at least 1")
    names = [p.name for p in space]
    history: list[dict] = []
    best: dict = {"params": dict(start), "value": -math.inf}
    cache: dict[tuple, float] = {}

    def run(params: dict) -> float:
        key = tuple(params[n] for n in names)
        if key not in cache:
            value = float(objective(dict(params)))
            cache[key] = value
            history.append({"trial": len(history), "value": value, **params})
            if value > best["value"]:
                best.update(params=dict(params), value=value)
        return cache[key]

    run(dict(start))
    if method == "grid":
        grids = [p.grid(points) for p in space]
        size = math.prod(len(g) for g in grids)
        if size > trials:
            raise ConfigError(
                f"a grid of {points} points over {len(space)} knobs has {size} combinations, "
                f"more than trials={trials}; use fewer knobs or points, or method 'coordinate'"
            )
        for combo in itertools.product(*grids):
            run(dict(zip(names, combo)))
    elif method == "random":
        rng = np.random.default_rng(seed)
        draws = 0  # a small discrete space (choices, few ints) may hold fewer than `trials` points
        while len(history) < trials and draws < 20 * trials:
            draws += 1
            run({p.name: p.sample(rng) for p in space})
    elif method == "coordinate":
        improved = True
        while improved and len(history) < trials:
            improved, before = False, best["value"]
            for p in space:
                for v in p.grid(points):
                    if len(history) >= trials:
                        break
                    run({**best["params"], p.name: v})
            improved = best["value"] > before
    else:
        _tpe(run, space, start, trials, seed, history)
    frame = pl.DataFrame(history) if history else pl.DataFrame()
    return SearchResult(best["params"], best["value"], frame)


def _tpe(
    run: Callable[[dict], float], space: Sequence[Param], start: dict, trials: int, seed: int, history: list
) -> None:
    try:
        import optuna
    except ImportError:
        raise ConfigError(
            "method 'tpe' needs Optuna: pip install 'qmdlab[tune]' (or use method 'coordinate')"
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.enqueue_trial({p.name: start[p.name] for p in space})

    def objective(trial):
        params = {
            p.name: (
                trial.suggest_categorical(p.name, list(p.choices))
                if p.kind == "choice"
                else trial.suggest_int(p.name, int(p.low), int(p.high))
                if p.kind == "int"
                else trial.suggest_float(p.name, p.low, p.high)
            )
            for p in space
        }
        return run(params)

    study.optimize(objective, n_trials=max(trials - len(history), 1))


# -- cross-validation -------------------------------------------------------------------------
class CVReport(NamedTuple):
    """What :func:`cross_validate` found.

    Attributes
    ----------
    config : PipelineConfig
        Tuned on *all* queries (what ``qmdlab tune`` writes).
    folds : pl.DataFrame
        ``fold, n_train, n_test, train_base, train_tuned, test_base, test_tuned``.
    held_out : pl.DataFrame
        ``qid, fold, base, tuned``: each query scored by the config tuned *without* it.
    gain : float
        Mean held-out gain (``tuned − base`` over all queries).
    p_ttest, p_fisher : float
        Paired tests of the held-out gain.
    in_sample_gain : float
        Gain of ``config`` on the queries it was tuned on (compare with ``gain``).
    seconds : float
    """

    config: PipelineConfig
    folds: pl.DataFrame
    held_out: pl.DataFrame
    gain: float
    p_ttest: float
    p_fisher: float
    in_sample_gain: float
    seconds: float

    def summary(self, metric: str = HEADLINE) -> str:
        base, tuned = cast(float, self.held_out["base"].mean()), cast(float, self.held_out["tuned"].mean())
        return (
            f"{metric}: base {base:.4f} -> cross-validated {tuned:.4f} (held-out gain {self.gain:+.4f}, "
            f"t-test p={self.p_ttest:.3g}, Fisher p={self.p_fisher:.3g}; in-sample gain "
            f"{self.in_sample_gain:+.4f} over {self.folds.height} folds)"
        )


def cross_validate(
    study,
    *,
    base: PipelineConfig | None = None,
    space: Sequence[Param] | None = None,
    method: str = "coordinate",
    trials: int = 200,
    folds: int = 5,
    points: int = 7,
    seed: int = 0,
    metric: str = HEADLINE,
    progress: Callable[[str], None] | None = None,
) -> CVReport:
    """k-fold cross-validated tuning of ``study`` (an :class:`qmdlab.eval.study.Study`)."""
    t0 = time.perf_counter()
    base = base or study.config
    space = tuple(space or default_space(base))
    start = params_of(base, space)

    def tune(sub) -> tuple[PipelineConfig, float]:
        res = search(
            lambda p: sub.score(apply_params(base, p), metric),
            space,
            start,
            method=method,
            trials=trials,
            points=points,
            seed=seed,
        )
        return apply_params(base, res.params), res.value

    rows, held = [], []
    splits = study.folds(folds, seed)
    for i, fold in enumerate(splits):
        train, test = study.subset(fold.train), study.subset(fold.test)
        tuned, train_value = tune(train)
        b = test.evaluate(base).per_query.select("qid", pl.col(metric).alias("base"))
        t = test.evaluate(tuned).per_query.select("qid", pl.col(metric).alias("tuned"))
        held.append(b.join(t, on="qid").with_columns(pl.lit(i).alias("fold")))
        rows.append(
            (
                i,
                len(fold.train),
                len(fold.test),
                train.score(base, metric),
                train_value,
                float(b["base"].mean()),
                float(t["tuned"].mean()),
            )
        )
        if progress:
            progress(
                f"fold {i + 1}/{len(splits)}: train {rows[-1][3]:.4f}->{train_value:.4f}, "
                f"held-out {rows[-1][5]:.4f}->{rows[-1][6]:.4f}"
            )
    held_out, p_t, p_f = held_out_pvalues(held, "tuned")
    # the written config is fitted on every query a fold trained on (its test queries are never fitted)
    fit_qids = fitted_qids(splits)
    fit_study = study if fit_qids >= set(study.qids) else study.subset(sorted(fit_qids))
    final, final_value = tune(fit_study)
    table = pl.DataFrame(
        rows, schema=["fold", "n_train", "n_test", "train_base", "train_tuned", "test_base", "test_tuned"], orient="row"
    )
    return CVReport(
        final,
        table,
        held_out,
        float(cast(float, (held_out["tuned"] - held_out["base"]).mean())),
        p_t,
        p_f,
        final_value - fit_study.score(base, metric),
        time.perf_counter() - t0,
    )


def write_config(config: PipelineConfig, path, *, header: str = "") -> None:
    """Write the options of ``config`` that differ from the defaults as YAML
    (``qmdlab query --config`` and ``PipelineConfig.from_yaml`` read it)."""
    from pathlib import Path

    import yaml

    defaults = PipelineConfig().to_dict()
    changed = {k: v for k, v in config.to_dict().items() if k not in defaults or v != defaults[k]}
    text = "".join(f"# {line}\n" for line in header.splitlines()) + yaml.safe_dump(changed or {}, sort_keys=False)
    Path(path).write_text(text, encoding="utf-8")

"""Choosing a configuration from the frontier: ``--pick best`` or ``--pick fastest-within D``, and
writing the choice as a query config (``qmdlab eval --frontier --write-config``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.config import PipelineConfig

from .frontier import Frontier, Point, format_seconds

PICKS = ("best", "fastest-within")
"""The ``--pick`` rules."""


def parse_pick(value: str, extra: Sequence[str] = ()) -> tuple[str, float]:
    """``--pick best`` / ``--pick fastest-within 0.005`` (also ``fastest-within=0.005``) → ``(rule, delta)``.

    >>> parse_pick("best"), parse_pick("fastest-within", ["0.005"]), parse_pick("fastest-within=0.01")
    (('best', 0.0), ('fastest-within', 0.005), ('fastest-within', 0.01))
    """
    rule, _, inline = value.replace(" ", "=").partition("=")
    if rule not in PICKS:
        raise ConfigError(f"--pick {value!r}: use --pick best or --pick fastest-within DELTA (e.g. 0.005)")
    if rule == "best":
        if inline or extra:
            raise ConfigError(f"--pick best takes no value (got {inline or ' '.join(extra)!r})")
        return rule, 0.0
    text = inline or (extra[0] if extra else "")
    try:
        delta = float(text)
    except ValueError:
        raise ConfigError(
            f"--pick fastest-within needs the nDCG@10 it may give up, e.g. --pick fastest-within 0.005 (got {text!r})"
        ) from None
    if not delta >= 0:
        raise ConfigError(f"--pick fastest-within {text}: the amount must be >= 0")
    return rule, delta


def _compare(a: Point, b: Point, metric: str) -> float:
    """``a``'s mean minus ``b``'s on the queries both stand on (0 when they share none)."""
    qids = sorted(set(a.per_query["qid"]) & set(b.per_query["qid"]))
    return a.mean(metric, qids) - b.mean(metric, qids) if qids else 0.0


def pick(result: Frontier, rule: str = "best", delta: float = 0.0) -> Point:
    """The chosen point among those a query config can express (``writable``) and that were timed:
    ``best`` (the highest held-out mean) or ``fastest-within`` (the fastest within ``delta`` of the best).
    Points are compared on the queries both stand on, so a row of the LLM recording (fewer queries) is
    judged against the others on its own queries."""
    import functools

    m = result.metric
    cands = [p for p in result.points if p.config is not None and p.seconds is not None and not math.isnan(p.mean(m))]
    if not cands:
        raise ConfigError("no configuration of the frontier can be written as a query config")

    def better(a: Point, b: Point) -> int:
        sa, sb = cast(float, a.seconds), cast(float, b.seconds)  # every candidate has a time
        return (_compare(a, b, m) > 0) - (_compare(a, b, m) < 0) or (sb > sa) - (sb < sa)

    order = sorted(cands, key=functools.cmp_to_key(better))
    best = order[-1]
    if rule == "best":
        return best
    close = [p for p in cands if _compare(best, p, m) <= delta + 1e-12]
    return min(close, key=lambda p: (p.seconds, _compare(best, p, m)))


def write_pick(result: Frontier, point: Point, path: str | Path, rule: str, delta: float) -> Path:
    """Write ``point``'s config (``qmdlab query --config PATH``), its measured figures in the header.

    ``point`` is one :func:`pick` chose: it has a config and a time."""
    from .optimise import write_config

    row = result.table.filter(pl.col("config") == point.name).row(0, named=True)
    how = "best" if rule == "best" else f"fastest within {delta:g} of the best"
    header = (
        f"qmdlab eval {result.suite} --frontier --pick {rule}{'' if rule == 'best' else f' {delta:g}'}: "
        f"{point.name} ({how})\n{result.metric} {row[result.metric]:.4f} held-out ({point.held_out}, "
        f"{point.n} queries), median {format_seconds(cast(float, point.seconds))} per query on the machine that measured it"
    )
    cfg = cast(PipelineConfig, point.config).replace(limit=PipelineConfig().limit)
    if cfg.fusion == "learned" and point.files.get("config"):
        cfg = cfg.replace(
            learned_model=str(Path(point.files["config"]).parent.resolve() / Path(cfg.learned_model).name)
        )
    path = Path(path)
    write_config(cfg, path, header=header)
    # the stage switches are written even at their default: the preset's default must not decide them
    text = path.read_text(encoding="utf-8")
    extra = "".join(
        f"{k}: {str(getattr(cfg, k)).lower()}\n" for k in ("expand", "rerank") if f"\n{k}:" not in "\n" + text
    )
    path.write_text(text.replace("{}\n", "") + extra, encoding="utf-8")
    return path


__all__ = ["PICKS", "parse_pick", "pick", "write_pick"]

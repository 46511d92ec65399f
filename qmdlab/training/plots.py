"""Plots of an expander run: GRPO reward curves and the held-out nDCG@10 table (matplotlib, PNG).

Both take what the run directory already holds (``metrics.jsonl``, the evaluation results), so the
train notebook and :mod:`qmdlab.training.cpu_run` draw the same figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from qmdlab.training import rundir

#: metrics.jsonl keys drawn by :func:`plot_rewards` (TRL logs one mean per reward function).
REWARD_KEYS = {
    "rewards/rule/mean": "rule score",
    "rewards/retrieval/mean": "ΔnDCG@10 (retrieval)",
    "reward": "total (weighted)",
}


#: What :func:`plot_rewards` draws for a ``reward: gain`` run (one that logged ``gain/delta``).
GAIN_KEYS = {
    "reward": "reward (Δ, harm × harm_weight)",
    "gain/delta": "ΔnDCG@10 vs no expansion",
    "gain/harmful": "share of completions with Δ < 0",
    "kl": "KL to the starting policy",
    "heldback/reward": "held-back queries' reward (greedy)",
}


def reward_series(run_dir: str | Path, keys: Mapping[str, str] = REWARD_KEYS) -> dict[str, list[tuple[int, float]]]:
    """``{metric: [(step, value), ...]}`` for ``keys`` (default :data:`REWARD_KEYS`) from a GRPO
    run's ``metrics.jsonl``.

    A step whose value is NaN (e.g. no labelled prompt in the batch) is left out.
    """
    import math

    series: dict[str, list[tuple[int, float]]] = {k: [] for k in keys}
    for m in rundir.read_metrics(run_dir):
        if m.get("stage") != "grpo" or "step" not in m:
            continue
        for k in keys:
            v = m.get(k)
            if isinstance(v, (int, float)) and not math.isnan(v):
                series[k].append((int(m["step"]), float(v)))
    return series


def _rolling(values: list[float], window: int) -> list[float]:
    """Trailing mean over ``window`` points.

    >>> _rolling([1.0, 3.0, 5.0], 2)
    [1.0, 2.0, 4.0]
    """
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def _save(fig, png: str | Path) -> Path:
    """Write ``fig`` to ``png`` (parents created) and release it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def plot_rewards(run_dir: str | Path, png: str | Path, *, window: int = 10) -> Path:
    """Per-step rewards (points) with a ``window``-step trailing mean (lines): the rule score, Δ and
    total of a ``reward: rule`` run; the reward, Δ, share of harmful completions, KL and held-back
    reward of a ``reward: gain`` run (:data:`GAIN_KEYS`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = reward_series(run_dir, {**REWARD_KEYS, **GAIN_KEYS})
    keys = GAIN_KEYS if series["gain/delta"] else REWARD_KEYS
    fig, axes = plt.subplots(1, len(keys), figsize=(4.3 * len(keys), 3.4))
    for ax, (key, label) in zip(axes, keys.items()):
        pts = series[key]
        if pts:
            steps, vals = zip(*pts)
            ax.plot(steps, vals, ".", alpha=0.35, color="tab:blue")
            ax.plot(steps, _rolling(list(vals), window), "-", color="tab:red", label=f"{window}-step mean")
            ax.legend(loc="best", fontsize=8)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        if key in ("rewards/retrieval/mean", "gain/delta", "reward"):
            ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_title(label)
        ax.set_xlabel("GRPO step")
    return _save(fig, png)


def plot_heldout(results: Mapping[str, Mapping[str, Mapping]], png: str | Path) -> Path:
    """Grouped bars of held-out nDCG@10 per suite and variant, p (t-test) against no expansion on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = list(results)
    variants = []
    for res in results.values():
        variants += [v for v in res if v not in variants]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(variants) * len(suites)), 3.8))
    width = 0.8 / max(len(variants), 1)
    for j, v in enumerate(variants):
        xs, ys = [], []
        for i, s in enumerate(suites):
            r = results[s].get(v)
            if r and r.get("ndcg@10") is not None:
                xs.append(i + j * width)
                ys.append(r["ndcg@10"])
                if "p_t" in r:
                    ax.text(i + j * width, r["ndcg@10"] + 0.01, f"p={r['p_t']:.2f}", ha="center", fontsize=7)
        ax.bar(xs, ys, width, label=v)
    ax.set_xticks([i + width * (len(variants) - 1) / 2 for i in range(len(suites))])
    ax.set_xticklabels(suites)
    ax.set_ylabel("nDCG@10 (held-out)")
    ax.legend(fontsize=8, ncol=min(len(variants), 5), loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return _save(fig, png)

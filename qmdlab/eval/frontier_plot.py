"""The frontier's picture: held-out quality against median seconds per query (log scale), the
Pareto front drawn and labelled. Drawn from a frontier table (:func:`qmdlab.eval.frontier.frontier`'s,
or ``frontier.csv`` read back, as the tune notebook does)."""

from __future__ import annotations

import polars as pl

from .metrics import HEADLINE


def figure(table: pl.DataFrame, metric: str = HEADLINE, *, title: str = ""):
    """The frontier plot of a frontier table (:func:`frontier`'s, or ``frontier.csv`` read back — the
    tune notebook draws it from there): a matplotlib ``Figure``, ``None`` when nothing was timed."""
    from matplotlib.figure import Figure

    rows = [r for r in table.iter_rows(named=True) if r["s_per_query"] is not None]
    if not rows:
        return None
    most = max(r["n"] for r in table.iter_rows(named=True))
    fig = Figure(figsize=(8, 5), dpi=110)
    ax = fig.subplots()
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        llm = r["n"] < most  # a row on fewer queries (the LLM recording, a trained reranker's folds)
        on = bool(r["pareto"])
        ax.scatter(
            [r["s_per_query"]],
            [r[metric]],
            s=60 if on else 30,
            marker="s" if llm else "o",
            color="tab:red" if on else "tab:gray",
            zorder=3,
        )
        if on:
            ax.annotate(
                r["config"] + (f" (n={r['n']})" if llm else ""),
                (r["s_per_query"], r[metric]),
                textcoords="offset points",
                xytext=(5, 4),
                fontsize=7,
                color="tab:red",
            )
        else:  # rows timed by the same run share an x: one label for them
            groups.setdefault((r["s_per_query"], llm), []).append(r)
    for (secs, llm), rs in groups.items():
        top = max(rs, key=lambda r: r[metric])
        heads = {r["config"].split()[0] for r in rs}
        label = (
            rs[0]["config"]
            if len(rs) == 1
            else f"{heads.pop()} ×{len(rs)}"
            if len(heads) == 1
            else f"{len(rs)} rows: " + ", ".join(r["config"] for r in rs)
        )
        label += f" (n={rs[0]['n']})" if llm else ""
        ax.annotate(label, (secs, top[metric]), textcoords="offset points", xytext=(5, -10), fontsize=7, color="0.35")
    front = sorted((r for r in rows if r["pareto"]), key=lambda r: r["s_per_query"])
    ax.plot(
        [r["s_per_query"] for r in front],
        [r[metric] for r in front],
        color="tab:red",
        lw=1,
        zorder=2,
        label="Pareto front",
    )
    ax.set_xscale("log")
    ax.set_xlabel("median seconds per query (this machine, log scale)")
    ax.set_ylabel(f"{metric} (held-out)")
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


__all__ = ["figure"]

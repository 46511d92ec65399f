"""qmdlab.eval.tune_view: the tune notebook's per-query table, counts and the plots updated in place."""

from __future__ import annotations

import io

import numpy as np
import polars as pl
import pytest

from qmdlab.eval import tune_view


def _tables(n=50, seed=0):
    rng = np.random.default_rng(seed)
    qids = [f"q{i:03d}" for i in range(n)]
    base = rng.random(n)
    now = np.clip(base + rng.choice([-0.3, 0.0, 0.2, 1.0], n), 0, 1)
    now[:3] = base[:3]  # some unchanged
    return (
        pl.DataFrame({"qid": qids, "ndcg@10": base}),
        pl.DataFrame({"qid": qids[::-1], "ndcg@10": now[::-1]}),  # another row order: the join aligns by qid
        pl.DataFrame({"qid": qids[1:], "query": [f"text {q}" for q in qids[1:]]}),
        base,
        now,
    )


def test_per_query_delta_joins_by_qid_and_sorts_worst_first():
    b, c, queries, base, now = _tables()
    t = tune_view.per_query_delta(b, c, queries)
    assert t.columns == ["qid", "query", "ndcg_default", "ndcg_now", "delta"]
    by_qid = {q: (d, n) for q, d, n in zip(t["qid"], t["ndcg_default"], t["ndcg_now"], strict=True)}
    for i in range(len(base)):
        assert by_qid[f"q{i:03d}"] == (base[i], now[i])
    assert t["delta"].to_list() == sorted((now - base).tolist())
    assert t.filter(pl.col("qid") == "q000")["query"].to_list() == [None]  # no text: null, row kept
    assert t["delta"].mean() == pytest.approx(float(np.mean(now - base)))


def test_counts_and_changed_agree_with_numpy():
    b, c, queries, base, now = _tables(seed=3)
    t = tune_view.per_query_delta(b, c, queries)
    d = now - base
    better, worse, same = tune_view.delta_counts(t)
    assert (better, worse, same) == (int((d > 1e-12).sum()), int((d < -1e-12).sum()), int((abs(d) <= 1e-12).sum()))
    assert tune_view.changed(t).height == better + worse
    assert same >= 3


@pytest.mark.extra("notebooks", "matplotlib")
def test_figure_updates_in_place_to_the_numpy_histogram_and_points():
    fig = tune_view.DeltaFigure("defaults")
    axes_before = list(fig.figure.axes)
    for seed in (1, 2):
        b, c, queries, base, now = _tables(seed=seed)
        t = tune_view.per_query_delta(b, c, queries)
        returned = fig.update(t)
        assert returned is fig.figure and list(fig.figure.axes) == axes_before  # no new axes
        expected, _ = np.histogram(t["delta"].to_numpy(), bins=tune_view.HIST_BINS, range=(-1, 1))
        assert fig.counts() == expected.tolist()
        assert np.array_equal(fig.points.get_offsets(), t.select("ndcg_default", "ndcg_now").to_numpy())


@pytest.mark.extra("notebooks", "matplotlib")
def test_a_gain_of_exactly_one_lands_in_the_last_bin():
    fig = tune_view.DeltaFigure()
    t = pl.DataFrame({"ndcg_default": [0.0, 1.0], "ndcg_now": [1.0, 0.0], "delta": [1.0, -1.0]})
    fig.update(t)
    assert fig.counts()[0] == 1 and fig.counts()[-1] == 1 and sum(fig.counts()) == 2


@pytest.mark.extra("notebooks", "matplotlib", "PIL")
def test_png_is_drawn_at_the_figure_size():
    fig = tune_view.DeltaFigure(dpi=50)
    b, c, queries, *_ = _tables()
    fig.update(tune_view.per_query_delta(b, c, queries))
    from PIL import Image

    img = Image.open(io.BytesIO(fig.png()))
    assert img.size == (500, 180)  # 10 x 3.6 inches at 50 dpi
    assert fig.width_px == 1000

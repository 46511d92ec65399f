"""qmdlab.eval.optimise: search methods find the known optimum of a toy suite; CV never leaks."""

from __future__ import annotations

import math

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qmdlab.errors import ConfigError
from qmdlab.eval.folds import Fold, kfold
from qmdlab.eval.optimise import (
    Param,
    apply_params,
    cross_validate,
    default_space,
    params_of,
    search,
    write_config,
)
from qmdlab.eval.study import Study
from qmdlab.pipeline.config import PipelineConfig

OPTIMUM = (20 * 1.0 + 10 / math.log2(3)) / 30
BASE = PipelineConfig(rerank=False)
SPACE = (Param("weight_original_fts", 0.0, 4.0), Param("weight_original_vec", 0.0, 4.0))


def test_toy_suite_baseline_is_the_tie(toy_suite):
    study = Study(*toy_suite, config=BASE)
    assert study.score(BASE) == pytest.approx(1 / math.log2(3), abs=1e-12)


@pytest.mark.parametrize(
    "method,trials",
    [("grid", 50), ("coordinate", 50), ("random", 40), pytest.param("tpe", 30, marks=pytest.mark.extra("tune"))],
)
def test_search_finds_known_best_weights(toy_suite, method, trials):
    study = Study(*toy_suite, config=BASE)
    res = search(
        lambda p: study.score(apply_params(BASE, p)),
        SPACE,
        params_of(BASE, SPACE),
        method=method,
        trials=trials,
        points=5,
        seed=3,
    )
    assert res.value == pytest.approx(OPTIMUM, abs=1e-12)
    assert res.params["weight_original_fts"] > res.params["weight_original_vec"]
    assert res.history.height <= trials and res.history["value"].max() == res.value
    assert res.history.row(0, named=True)["weight_original_fts"] == 2.0  # the start is trial 0


def test_grid_refuses_more_combinations_than_trials():
    with pytest.raises(ConfigError, match="combinations"):
        search(
            lambda p: 0.0,
            SPACE,
            {"weight_original_fts": 2.0, "weight_original_vec": 2.0},
            method="grid",
            points=5,
            trials=10,
        )
    with pytest.raises(ConfigError, match="unknown search method"):
        search(lambda p: 0.0, SPACE, {}, method="anneal")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 60), k=st.integers(2, 10), seed=st.integers(0, 10_000))
def test_kfold_never_leaks_a_query_into_its_own_training_fold(n, k, seed):
    qids = [f"q{i}" for i in range(n)]
    if k > n:
        with pytest.raises(ConfigError):
            kfold(qids, k, seed)
        return
    folds = kfold(qids, k, seed)
    assert len(folds) == k
    seen = []
    for f in folds:
        assert not set(f.train) & set(f.test)
        assert set(f.train) | set(f.test) == set(qids)
        seen += list(f.test)
    assert sorted(seen) == sorted(qids)  # each query is tested exactly once
    assert max(len(f.test) for f in folds) - min(len(f.test) for f in folds) <= 1


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_cross_validation_reports_exact_held_out_gain(toy_suite):
    study = Study(*toy_suite, config=BASE)
    report = cross_validate(study, base=BASE, space=SPACE, method="coordinate", trials=30, folds=5, points=5)
    # every training fold has more "A" than "B" queries, so every fold learns fts > vec
    assert report.gain == pytest.approx(20 / 30 * (1 - 1 / math.log2(3)), abs=1e-12)
    assert report.held_out.height == 30 and report.held_out["qid"].n_unique() == 30
    assert report.config.weight_original_fts > report.config.weight_original_vec
    assert report.p_ttest < 1e-6
    for row in report.folds.iter_rows(named=True):
        assert row["n_train"] + row["n_test"] == 30


def test_default_space_and_apply_roundtrip():
    cfg = PipelineConfig()
    space = default_space(cfg)
    names = [p.name for p in space]
    assert "blend_weight_1" in names and "candidate_limit" in names
    assert "blend_weight_1" not in [p.name for p in default_space(cfg.replace(rerank=False))]
    assert apply_params(cfg, params_of(cfg, space)) == cfg


def test_write_config_is_readable_by_pipeline_config(tmp_path):
    cfg = PipelineConfig(rrf_k=12, blend_weights=(0.9, 0.5, 0.1))
    write_config(cfg, tmp_path / "c.yaml", header="tuned on toy")
    text = (tmp_path / "c.yaml").read_text()
    assert text.startswith("# tuned on toy") and "rrf_k: 12" in text
    assert PipelineConfig.from_yaml(tmp_path / "c.yaml") == cfg


def _split_suite(trace_factory, prefer_vec: set[str]):
    """30 queries as in ``toy_suite``; the queries in ``prefer_vec`` have ``r`` first in the
    vector list (they prefer weight_original_vec > weight_original_fts), the rest in BM25."""
    entries, qrels = [], []
    for i in range(30):
        qid = f"q{i:02d}"
        r, d = f"c/{qid}/r.md", f"c/{qid}/d.md"
        fts_first, vec_first = (d, r) if qid in prefer_vec else (r, d)
        entries += [(qid, "fts", "original", fts_first, 1, 0.8), (qid, "vec", "original", vec_first, 1, 0.7)]
        qrels.append((qid, r, 1))
    return trace_factory(entries), pl.DataFrame(qrels, schema=["qid", "docno", "grade"], orient="row")


def _held_out_has_another_optimum(trace_factory):
    """Fold 0's held-out queries all prefer vec; its training queries (13 fts, 11 vec) prefer fts;
    all 30 together (13 fts, 17 vec) prefer vec. Tuning that saw fold 0 would pick vec."""
    qids = [f"q{i:02d}" for i in range(30)]
    folds = kfold(qids, 5, seed=0)
    rest = [q for q in qids if q not in folds[0].test]
    return folds, set(folds[0].test) | set(rest[:11])


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_cross_validation_held_out_fold_is_scored_by_a_config_tuned_without_it(trace_factory):
    folds, prefer_vec = _held_out_has_another_optimum(trace_factory)
    study = Study(*_split_suite(trace_factory, prefer_vec), config=BASE)
    # the premise: the training queries alone and all queries have different optima
    train_only = study.subset(folds[0].train)
    assert train_only.score(BASE.replace(weight_original_fts=3.0)) > train_only.score(
        BASE.replace(weight_original_vec=3.0)
    )
    assert study.score(BASE.replace(weight_original_vec=3.0)) > study.score(BASE.replace(weight_original_fts=3.0))
    report = cross_validate(study, base=BASE, space=SPACE, method="coordinate", trials=30, folds=5, points=5, seed=0)
    row = report.folds.row(0, named=True)
    tie = 1 / math.log2(3)
    assert row["n_test"] == 6 and row["train_tuned"] == pytest.approx((13 + 11 * tie) / 24, abs=1e-12)
    # tuned on fold 0's training queries (fts > vec): the held-out queries keep r second
    assert row["test_tuned"] == pytest.approx(tie, abs=1e-12) and row["test_base"] == pytest.approx(tie, abs=1e-12)
    held = report.held_out.filter(pl.col("fold") == 0)
    assert sorted(held["qid"].to_list()) == sorted(folds[0].test) and (held["tuned"] - tie).abs().max() < 1e-12
    # the final config is tuned on all queries and prefers vec: in-sample, not held-out
    assert report.config.weight_original_vec > report.config.weight_original_fts


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_a_tuner_that_sees_the_held_out_fold_fails_that_check(trace_factory, monkeypatch):
    """The check above can fail: leak fold 0's test queries into its training set and the
    held-out score becomes the leaked optimum's 1.0."""
    import qmdlab.eval.optimise as opt

    folds, prefer_vec = _held_out_has_another_optimum(trace_factory)
    study = Study(*_split_suite(trace_factory, prefer_vec), config=BASE)
    leaky = [Fold(tuple(sorted(set(f.train) | set(f.test))), f.test) for f in folds]
    monkeypatch.setattr(Study, "folds", lambda self, k=5, seed=0: leaky)
    report = opt.cross_validate(study, base=BASE, space=SPACE, method="coordinate", trials=30, folds=5, points=5)
    assert report.folds.row(0, named=True)["test_tuned"] == pytest.approx(1.0, abs=1e-12)

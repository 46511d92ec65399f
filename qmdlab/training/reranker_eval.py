"""Scoring a trained cross-encoder reranker: its scores over candidates, Platt calibration, blend
tuning, AUC, the held-out evaluation and its table; shared by :mod:`qmdlab.training.reranker`,
:mod:`qmdlab.training.reranker_synthetic` and :mod:`qmdlab.training.reranker_study`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from qmdlab.training.reranker import RerankerRunConfig
    from qmdlab.training.reranker_data import RerankCandidates


def platt(logits: np.ndarray, relevant: np.ndarray, iters: int = 50) -> tuple[float, float]:
    """Platt scaling: ``(a, b)`` maximising the likelihood of ``sigmoid(a·x + b)`` (Newton steps,
    a small ridge so a separable set stays finite); ``(1, 0)`` without both classes.

    Symmetric data give b = 0 and the likelihood equation 2·σ(a) = 4·σ(−2a), whose root is
    a = 0.4189 (the ridge moves it by < 1e-3):

    >>> a, b = platt(np.array([-2.0, -1.0, 1.0, 2.0]), np.array([0, 1, 0, 1]))
    >>> round(a, 3), round(b, 3)
    (0.419, 0.0)
    """
    x = np.asarray(logits, dtype=np.float64)
    y = np.asarray(relevant, dtype=np.float64)
    if x.size == 0 or y.min() == y.max():
        return 1.0, 0.0
    w = np.array([1.0, 0.0])
    X = np.stack([x, np.ones_like(x)], axis=1)
    ridge = 1e-3 * np.eye(2)
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        g = X.T @ (p - y) + ridge @ w
        H = (X * (p * (1 - p))[:, None]).T @ X + ridge
        step = np.linalg.solve(H, g)
        w = w - step
        if np.abs(step).max() < 1e-10:
            break
    return float(w[0]), float(w[1])


def score_table(
    model_dir: Path,
    table: pl.DataFrame,
    qids: Sequence[str],
    *,
    max_length: int,
    n_threads: int | None,
    calibration: tuple[float, float] = (1.0, 0.0),
) -> pl.DataFrame:
    """The served model's logits and calibrated scores for the candidates of ``qids``:
    ``qid, docno, chunk_id, logit, rerank_score`` (the serving backend computes them)."""
    from qmdlab.models.cross_encoder import CrossEncoderReranker, sigmoid

    sub = table.filter(pl.col("candidate") & pl.col("qid").is_in([str(q) for q in qids]))
    rr = CrossEncoderReranker(model_dir, max_length=max_length, n_threads=n_threads)
    logits = rr.logits_pairs(list(zip(sub["query"].to_list(), sub["text"].to_list())))
    rr.release()
    a, b = calibration
    return sub.select("qid", "docno", "chunk_id").with_columns(
        logit=pl.Series(logits, dtype=pl.Float64), rerank_score=pl.Series(sigmoid(a * logits + b), dtype=pl.Float64)
    )


def with_rerank(study, scores: pl.DataFrame, qids: Sequence[str]):
    """A Study over ``qids`` whose trace carries ``scores`` as its rerank table."""
    from qmdlab.eval.study import Study
    from qmdlab.pipeline.trace import SCHEMAS

    rr = scores.select(
        "qid", "docno", "chunk_id", pl.lit("").alias("chunk_hash"), "rerank_score", pl.lit(False).alias("cached")
    ).select([pl.col(c).cast(t) for c, t in SCHEMAS["rerank"].items()])
    trace = dataclasses.replace(study.trace, rerank=rr)
    keep = [str(q) for q in qids]
    return Study(trace, study.qrels.filter(pl.col("qid").is_in(keep)), metrics=study.metrics, config=study.config)


FIXED_BLENDS = ("position", "score", "rerank_only")


_GRID = (1.0, 0.8, 0.6, 0.4, 0.2, 0.0)


def tune_blend(study, base_config, metric: str = "ndcg@10"):
    """The best ``(blend, blend_weights)`` for ``study``'s queries by grid search (ties keep the
    earlier, more fusion-weighted setting); returns ``(config, score)``."""
    best, best_score = base_config.replace(rerank=True, blend="none"), -1.0
    for method in ("position", "score"):
        for w1 in _GRID:
            for w2 in _GRID:
                for w3 in _GRID:
                    c = base_config.replace(rerank=True, blend=method, blend_weights=(w1, w2, w3))
                    s = study.score(c, metric)
                    if s > best_score + 1e-12:
                        best, best_score = c, s
    s = study.score(base_config.replace(rerank=True, blend="rerank_only"), metric)
    if s > best_score + 1e-12:
        best, best_score = base_config.replace(rerank=True, blend="rerank_only"), s
    return best, best_score


def auc(scores: np.ndarray, relevant: np.ndarray) -> float | None:
    """Probability a relevant document outscores a non-relevant one (ties ½).

    >>> auc(np.array([0.9, 0.8, 0.3, 0.8]), np.array([True, True, False, False]))
    0.875
    """
    from scipy.stats import rankdata

    s, y = np.asarray(scores, dtype=np.float64), np.asarray(relevant, dtype=bool)
    n_p, n_n = int(y.sum()), int((~y).sum())
    if not n_p or not n_n:
        return None
    r = rankdata(s)
    return float((r[y].sum() - n_p * (n_p + 1) / 2) / (n_p * n_n))


def mean_query_auc(frame: pl.DataFrame, score_col: str) -> float | None:
    """Mean over queries (with both classes) of the per-query AUC of ``score_col``."""
    vals = []
    for _, part in frame.group_by("qid"):
        a = auc(part[score_col].to_numpy(), (part["grade"] >= 1).to_numpy())
        if a is not None:
            vals.append(a)
    return float(np.mean(vals)) if vals else None


def calibrate_and_blend(cfg: RerankerRunConfig, rec: RerankCandidates, model_dir: Path, qids: Sequence[str]):
    """The Platt calibration of ``model_dir``'s logits and the blend chosen on ``qids`` (never held-out
    queries): ``(calibration, blend options or None, its nDCG@10)``, the blend as :func:`blend_dict`
    writes it; ``((1, 0), None, None)`` without queries."""
    if not qids:
        return (1.0, 0.0), None, None
    from qmdlab.models.cross_encoder import sigmoid

    scores = score_table(model_dir, rec.table, qids, max_length=cfg.max_length, n_threads=cfg.n_threads)
    graded = scores.join(rec.table.select("qid", "docno", "grade"), on=["qid", "docno"], how="left")
    calib = platt(graded["logit"].to_numpy(), (graded["grade"].fill_null(0) >= 1).to_numpy())
    scores = scores.with_columns(rerank_score=pl.Series(sigmoid(calib[0] * scores["logit"].to_numpy() + calib[1])))
    blend_cfg, score = tune_blend(with_rerank(rec.study, scores, qids), rec.config)
    return calib, blend_dict(blend_cfg), score


def blend_dict(c) -> dict | None:
    if c is None:
        return None
    return {
        "blend": c.blend,
        "blend_bands": list(c.blend_bands),
        "blend_weights": list(c.blend_weights),
        "candidate_limit": c.candidate_limit,
    }


def config_with(base, blend: dict | None):
    if not blend:
        return base.replace(rerank=True)
    return base.replace(
        rerank=True,
        blend=blend["blend"],
        blend_bands=tuple(blend["blend_bands"]),
        blend_weights=tuple(blend["blend_weights"]),
    )


def write_blend(out: Path, base, blend: dict | None) -> None:
    """``<out>/blend.yaml``: the pipeline options that serve the trained model over ``base`` (its
    chosen ``blend``, else the position blend)."""
    import yaml

    (Path(out) / "blend.yaml").write_text(
        yaml.safe_dump(blend_dict(config_with(base, blend)) if blend else {"blend": "position"}, sort_keys=False),
        encoding="utf-8",
    )


class HeldOut(NamedTuple):
    """The held-out report: ``table`` (run, mean, delta, p_ttest, p_fisher, wins, ties, losses),
    ``metrics`` ({run: {metric: mean}}), ``auc`` and the per-query scores."""

    table: pl.DataFrame
    metrics: dict
    auc: dict
    per_query: pl.DataFrame


def evaluate_heldout(
    rec: RerankCandidates,
    scores: pl.DataFrame,
    fold_blends: dict[int, dict | None],
    fold_of: dict[str, int],
    out: Path,
    weak_scores: pl.DataFrame | None = None,
) -> HeldOut:
    """Score each held-out fold with its own model's scores and blends; write the TREC runs."""
    from qmdlab.eval.metrics import mean_scores
    from qmdlab.eval.runfiles import write_trec_run
    from qmdlab.eval.significance import compare_to_baseline

    qids = sorted(fold_of)
    study = with_rerank(rec.study, scores, qids)
    runs: dict[str, pl.DataFrame] = {}
    finals: dict[str, pl.DataFrame] = {}
    ev = study.evaluate(rec.config.replace(rerank=False))
    runs["fused"], finals["fused"] = ev.per_query, ev.final
    for b in FIXED_BLENDS:
        ev = study.evaluate(rec.config.replace(rerank=True, blend=b))
        runs[f"rerank-{b}"], finals[f"rerank-{b}"] = ev.per_query, ev.final
    if any(fold_blends.values()):  # each fold's blend was tuned on that fold's tune queries only
        pq, fin = [], []
        for f, blend in sorted(fold_blends.items()):
            fq = [q for q in qids if fold_of[q] == f]
            e = study.subset(fq).evaluate(config_with(rec.config, blend))
            pq.append(e.per_query)
            fin.append(e.final)
        runs["rerank-tuned"], finals["rerank-tuned"] = pl.concat(pq), pl.concat(fin)
    if weak_scores is not None:
        ws = with_rerank(rec.study, weak_scores, qids)
        for b in ("position", "rerank_only"):
            ev = ws.evaluate(rec.config.replace(rerank=True, blend=b))
            runs[f"weak-{b}"], finals[f"weak-{b}"] = ev.per_query, ev.final
    table = compare_to_baseline(runs, "fused")
    out.mkdir(parents=True, exist_ok=True)
    for name, final in finals.items():
        fname = "fused-heldout.trec" if name == "fused" else f"{name}-heldout.trec"
        write_trec_run(final, out / fname, name, rec.suite.docid)
    data = rec.suite.data()
    qrels_c = data.qrels.filter(pl.col("qid").is_in(qids))
    (out / "qrels.txt").write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in qrels_c.iter_rows()), encoding="utf-8")
    graded = scores.join(rec.table.select("qid", "docno", "grade", "fused_score"), on=["qid", "docno"], how="left")
    rel = (graded["grade"].fill_null(0) >= 1).to_numpy()
    aucs = {
        "rerank_pooled": auc(graded["rerank_score"].to_numpy(), rel),
        "rerank_per_query": mean_query_auc(graded, "rerank_score"),
        "fused_pooled": auc(graded["fused_score"].to_numpy(), rel),
        "fused_per_query": mean_query_auc(graded, "fused_score"),
    }
    if weak_scores is not None:
        wg = weak_scores.join(rec.table.select("qid", "docno", "grade"), on=["qid", "docno"], how="left")
        aucs["weak_pooled"] = auc(wg["rerank_score"].to_numpy(), (wg["grade"].fill_null(0) >= 1).to_numpy())
        aucs["weak_per_query"] = mean_query_auc(wg, "rerank_score")
    per_query = pl.concat([t.with_columns(pl.lit(r).alias("run")) for r, t in runs.items()], how="diagonal")
    return HeldOut(table, {r: mean_scores(t) for r, t in runs.items()}, aucs, per_query)


def format_reranker_table(table: pl.DataFrame) -> str:
    """The held-out table as aligned text (the layout ``qmdlab eval`` prints)."""
    lines = [f"{'run':<22} {'nDCG@10':>8} {'delta':>8} {'p(t)':>8} {'p(Fisher)':>9} {'W/T/L':>10}"]
    for r in table.iter_rows(named=True):
        lines.append(
            f"{r['run']:<22} {r['mean']:>8.4f} {r['delta']:>+8.4f} {r['p_ttest']:>8.4f} "
            f"{r['p_fisher']:>9.4f} {r['wins']:>4}/{r['ties']}/{r['losses']}"
        )
    return "\n".join(lines)

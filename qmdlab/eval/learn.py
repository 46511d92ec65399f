"""Learning to rank the fused candidates: LightGBM lambdarank over trace features, cross-validated.

``qmdlab tune SUITE --learn`` calls :func:`cross_validate_learned` on a :class:`qmdlab.eval.study.Study`:

1. the features of every (query, document) in the recorded lists
   (:func:`qmdlab.pipeline.learned.features`) are built once, labelled with the qrels grade
   (0 when unjudged);
2. the judged queries are split into k folds (:meth:`qmdlab.eval.study.Study.folds`: k-fold, or the official split); for each fold a
   booster is trained on the *other* folds' rows only — the qids it saw are recorded in
   :attr:`LearnReport.trained_on` and checked disjoint from the fold's test qids — and the
   fold's queries are fused by it and run through the rest of the pipeline (candidates, blend,
   finish) exactly like any other fusion method;
3. the held-out per-query metric of the learned fusion is compared with the base config's
   on the same queries (paired t-test and Fisher randomisation, :mod:`qmdlab.eval.significance`);
4. the model written for use is trained on every query (:attr:`LearnReport.booster`); the
   held-out numbers are what it is expected to do on new queries.

Nothing is tuned on the reported folds: the LightGBM settings are chosen from a fixed grid
(:data:`GRID`) by an inner cross-validation over each fold's training queries (nested CV), and
the number of trees is never early-stopped on test data.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypedDict, cast

import numpy as np
import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.blend import blend
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.finish import finish
from qmdlab.pipeline.fuse import candidates
from qmdlab.pipeline.learned import FEATURES, contributions, features, fuse_scored, matrix, prior, score_features
from qmdlab.pipeline.retrieve import ablate, reweight
from qmdlab.pipeline.retune import rerank_scores_of

from .folds import fitted_qids, kfold
from .metrics import HEADLINE, Scorer
from .significance import held_out_pvalues

if TYPE_CHECKING:
    import lightgbm

MODEL_FILE = "learned.lgb.txt"


class Setting(TypedDict):
    """One point of :data:`GRID`: the :class:`LearnConfig` fields the inner cross-validation sets."""

    n_estimators: int
    num_leaves: int
    prior_scale: float


def _mean(column: pl.Series) -> float:
    """The mean of a numeric column: polars types it as any Python value."""
    return cast(float, column.mean())


GRID: tuple[Setting, ...] = tuple(
    Setting(n_estimators=n, num_leaves=leaves, prior_scale=p)
    for p in (60.0, 600.0)
    for n in (50, 200)
    for leaves in (3, 7)
)
"""The settings the inner cross-validation chooses from (8; fixed for a run — this grid itself was
revised once after earlier CISI cross-validation runs, so CISI's held-out number for it is not a
first look: docs/results/retrieval.md)."""


@dataclass(frozen=True)
class LearnConfig:
    """LightGBM lambdarank settings and the cross-validation split (fixed before a run starts).

    Attributes
    ----------
    folds, seed : int
        k of the k-fold split over queries, and its shuffle seed.
    n_estimators, num_leaves, learning_rate, min_data_in_leaf, feature_fraction : ...
        LightGBM parameters (small trees, many rows per leaf: 76–103 queries do not support more).
    truncation_level : int
        ``lambdarank_truncation_level``: pairs are formed within this many top positions.
    prior_scale : float
        The trees boost from ``prior_scale · rrf`` (``PipelineConfig.learned_prior``): larger
        keeps the model closer to plain RRF.
    select : bool
        Choose ``n_estimators``/``num_leaves``/``min_data_in_leaf`` from :data:`GRID` by an
        inner k-fold over the *training* queries of each fold (nested cross-validation: the
        held-out fold plays no part in the choice); off, the values above are used as given.
    inner_folds : int
        k of that inner split.
    """

    folds: int = 5
    seed: int = 0
    n_estimators: int = 200
    num_leaves: int = 7
    learning_rate: float = 0.05
    min_data_in_leaf: int = 50
    feature_fraction: float = 0.8
    truncation_level: int = 20
    prior_scale: float = 60.0
    select: bool = True
    inner_folds: int = 4

    def params(self, max_grade: int) -> dict:
        return {
            "objective": "lambdarank",
            "metric": "ndcg",
            "ndcg_eval_at": [10],
            "num_leaves": self.num_leaves,
            "learning_rate": self.learning_rate,
            "min_data_in_leaf": self.min_data_in_leaf,
            "feature_fraction": self.feature_fraction,
            "feature_fraction_seed": self.seed,
            "lambdarank_truncation_level": self.truncation_level,
            "label_gain": [float(g) for g in range(max(max_grade, 1) + 1)],  # Järvelin gains, as ndcg@k here
            "seed": self.seed,
            "deterministic": True,
            "num_threads": 1,
            "verbose": -1,
        }


def training_frame(study, base: PipelineConfig) -> pl.DataFrame:
    """Features (:data:`FEATURES`) of every (qid, docno) of the study's lists under ``base``'s list
    weights/ablation, with ``label`` (qrels grade, 0 if unjudged), sorted by qid."""
    lists = ablate(reweight(study.trace.lists, base), base)
    feats = features(lists, study.docs)
    labels = study.qrels.select("qid", "docno", pl.col("grade").cast(pl.Int64).alias("label"))
    out = feats.join(labels, on=["qid", "docno"], how="left").with_columns(pl.col("label").fill_null(0).clip(0))
    return out.sort("qid", maintain_order=True)


def fit(frame: pl.DataFrame, cfg: LearnConfig):
    """Train a lambdarank booster on ``frame`` (rows grouped by qid)."""
    try:
        import lightgbm as lgb
    except ImportError:
        raise ConfigError("--learn needs LightGBM: pip install 'qmdlab[learn]'") from None
    frame = frame.sort("qid", maintain_order=True)
    groups = frame.group_by("qid", maintain_order=True).len()["len"].to_numpy()
    y = frame["label"].to_numpy()
    data = lgb.Dataset(
        matrix(frame),
        label=y,
        group=groups,
        feature_name=list(FEATURES),
        init_score=prior(frame, cfg.prior_scale),
        free_raw_data=False,
    )
    return lgb.train(cfg.params(int(y.max()) if len(y) else 1), data, num_boost_round=cfg.n_estimators)


def finals(
    lists: pl.DataFrame,
    frame: pl.DataFrame,
    booster,
    config: PipelineConfig,
    scores: pl.DataFrame | None = None,
    prior_scale: float = 60.0,
) -> pl.DataFrame:
    """The ``final`` table of the queries in ``frame`` fused by ``booster``, then candidates, blend
    (with the recorded rerank ``scores`` when ``config.rerank``) and finish, as for any fusion."""
    qids = frame["qid"].unique().to_list()
    sub = lists.filter(pl.col("qid").is_in(qids))
    fused = fuse_scored(sub, score_features(frame.drop("label", strict=False), booster, prior_scale))
    return finish(blend(candidates(fused, config.candidate_limit), scores if config.rerank else None, config), config)


def select(
    frame: pl.DataFrame,
    lists: pl.DataFrame,
    base: PipelineConfig,
    cfg: LearnConfig,
    scorer: Scorer,
    metric: str,
    scores: pl.DataFrame | None = None,
) -> tuple[LearnConfig, pl.DataFrame]:
    """The :data:`GRID` setting with the best mean inner-fold ``metric`` on ``frame``'s queries
    (an inner k-fold over them; ties keep the earlier, smaller setting). Returns it and the
    table ``setting, mean``. Only ``frame``'s queries are used."""
    import dataclasses

    qids = sorted(frame["qid"].unique().to_list())
    inner = kfold(qids, min(cfg.inner_folds, len(qids)), cfg.seed + 1)
    rows, best, best_value = [], cfg, -np.inf
    for i, over in enumerate(GRID):
        trial = dataclasses.replace(cfg, **over)
        values = []
        for fold in inner:
            booster = fit(frame.filter(pl.col("qid").is_in(list(fold.train))), trial)
            test = frame.filter(pl.col("qid").is_in(list(fold.test)))
            pq = scorer.score(
                finals(lists, test, booster, base, scores, trial.prior_scale).rename({"final_rank": "rank"})
            )
            values.extend(pq.filter(pl.col("qid").is_in(list(fold.test)))[metric].to_list())
        mean = float(np.mean(values))
        rows.append((i, str(over), mean))
        if mean > best_value:
            best, best_value = trial, mean
    return best, pl.DataFrame(rows, schema=["setting", "params", "mean"], orient="row")


class LearnReport(NamedTuple):
    """What :func:`cross_validate_learned` found.

    Attributes
    ----------
    booster : lightgbm.Booster
        Trained on every judged query (what ``--learn`` saves).
    folds : pl.DataFrame
        ``fold, n_train, n_test, test_base, test_learned``.
    held_out : pl.DataFrame
        ``qid, fold, base, learned``: each query scored by the model trained *without* it.
    heldout_final : pl.DataFrame
        The held-out ``final`` rankings of every query (``qid, docno, final_rank, final_score``).
    base_final : pl.DataFrame
        The base config's ``final`` rankings of the same queries.
    trained_on : list of tuple of str
        The qids each fold's booster was trained *and selected* on (disjoint from that fold's
        test qids).
    chosen : list of dict
        The :data:`GRID` setting each fold's inner cross-validation chose (last: the final model's).
    tested_on : list of tuple of str
    gain, p_ttest, p_fisher : float
        Mean held-out gain over the base and its paired p-values.
    in_sample_gain : float
        Gain of the all-queries booster on the queries it was trained on (compare with ``gain``).
    seconds : float
    """

    booster: lightgbm.Booster
    folds: pl.DataFrame
    held_out: pl.DataFrame
    heldout_final: pl.DataFrame
    base_final: pl.DataFrame
    trained_on: list
    tested_on: list
    gain: float
    p_ttest: float
    p_fisher: float
    in_sample_gain: float
    seconds: float
    chosen: list = []

    @property
    def prior_scale(self) -> float:
        """The prior scale of the all-queries model (what ``learned_prior`` is saved as)."""
        return float(self.chosen[-1]["prior_scale"]) if self.chosen else LearnConfig().prior_scale

    def summary(self, metric: str = HEADLINE) -> str:
        base, learned = _mean(self.held_out["base"]), _mean(self.held_out["learned"])
        return (
            f"{metric}: base {base:.4f} -> learned (held-out folds) {learned:.4f} (gain {self.gain:+.4f}, "
            f"t-test p={self.p_ttest:.3g}, Fisher p={self.p_fisher:.3g}; in-sample gain "
            f"{self.in_sample_gain:+.4f} over {self.folds.height} folds)"
        )


def cross_validate_learned(
    study,
    *,
    base: PipelineConfig | None = None,
    cfg: LearnConfig = LearnConfig(),
    metric: str = HEADLINE,
    progress: Callable[[str], None] | None = None,
    _train_filter: Callable[[Sequence[str], Sequence[str]], Sequence[str]] | None = None,
) -> LearnReport:
    """k-fold cross-validated learned fusion of ``study`` (needs ``study.docs``).

    ``_train_filter(train_qids, test_qids) -> qids`` exists for the leak test only: it lets a
    test *inject* a leak and check that the held-out numbers would show it.
    """
    t0 = time.perf_counter()
    base = base or study.config
    if study.docs is None:
        raise ConfigError("learned fusion needs the document table: Study(..., docs=doc_features(index))")
    frame = training_frame(study, base)
    lists = ablate(reweight(study.trace.lists, base), base)
    scorer = Scorer(study.qrels, [metric])
    base_final = study.evaluate(base).final
    scores = rerank_scores_of(study.trace) if base.rerank else None
    base_pq = scorer.score(base_final.rename({"final_rank": "rank"})).select("qid", pl.col(metric).alias("base"))
    rows, held, finals_, trained_on, tested_on, chosen = [], [], [], [], [], []
    splits = study.folds(cfg.folds, cfg.seed)
    for i, fold in enumerate(splits):
        train_qids = list(fold.train) if _train_filter is None else list(_train_filter(fold.train, fold.test))
        train = frame.filter(pl.col("qid").is_in(train_qids))
        test = frame.filter(pl.col("qid").is_in(list(fold.test)))
        seen = tuple(sorted(train["qid"].unique().to_list()))
        trained_on.append(seen)
        tested_on.append(tuple(fold.test))
        fold_cfg = cfg
        if cfg.select:
            fold_cfg, _ = select(train, lists, base, cfg, scorer, metric, scores)
        chosen.append({k: getattr(fold_cfg, k) for k in GRID[0]})
        booster = fit(train, fold_cfg)
        fin = finals(lists, test, booster, base, scores, fold_cfg.prior_scale)
        finals_.append(fin)
        pq = scorer.score(fin.rename({"final_rank": "rank"})).filter(pl.col("qid").is_in(list(fold.test)))
        pq = pq.select("qid", pl.col(metric).alias("learned")).join(base_pq, on="qid", how="left")
        held.append(pq.with_columns(fold=pl.lit(i)))
        rows.append((i, len(seen), len(fold.test), float(_mean(pq["base"])), float(_mean(pq["learned"]))))
        if progress:
            progress(
                f"fold {i + 1}/{len(splits)}: held-out {rows[-1][3]:.4f} -> {rows[-1][4]:.4f} "
                f"({len(seen)} training queries; {chosen[-1]})"
            )
    held_out, p_t, p_f = held_out_pvalues(held, "learned")
    # the saved model is fitted on every query a fold trained on (its test queries are never fitted)
    fit_qids = fitted_qids(splits)
    fit_frame = frame if fit_qids >= set(study.qids) else frame.filter(pl.col("qid").is_in(sorted(fit_qids)))
    final_cfg = select(fit_frame, lists, base, cfg, scorer, metric, scores)[0] if cfg.select else cfg
    chosen.append({k: getattr(final_cfg, k) for k in GRID[0]})
    booster = fit(fit_frame, final_cfg)
    in_sample_pq = scorer.score(
        finals(lists, fit_frame, booster, base, scores, final_cfg.prior_scale).rename({"final_rank": "rank"})
    ).filter(pl.col("qid").is_in(sorted(fit_qids)))
    in_sample = _mean(in_sample_pq[metric])
    fit_base = _mean(base_pq.join(in_sample_pq.select("qid"), on="qid", how="semi")["base"])
    table = pl.DataFrame(rows, schema=["fold", "n_train", "n_test", "test_base", "test_learned"], orient="row")
    return LearnReport(
        booster,
        table,
        held_out,
        pl.concat(finals_),
        base_final,
        trained_on,
        tested_on,
        float(_mean(held_out["learned"] - held_out["base"])),
        p_t,
        p_f,
        float(in_sample - fit_base),
        time.perf_counter() - t0,
        chosen,
    )


def save(
    report: LearnReport,
    out_dir: str | Path,
    base: PipelineConfig,
    *,
    cfg: LearnConfig = LearnConfig(),
    header: str = "",
    docid: Callable[[str], str] = lambda d: d,
) -> dict[str, Path]:
    """Write into ``out_dir``: the model (:data:`MODEL_FILE`), ``config.yaml`` (``fusion: learned``,
    ``learned_model`` relative to it), ``learned-heldout.trec`` (the held-out folds' rankings) and
    ``default.trec`` (the base config on the same queries), both with the collection's ids
    (``docid`` maps qmdlab docnos back), plus ``learn.json`` (settings, folds, held-out summary)."""
    import json

    from .optimise import write_config
    from .runfiles import write_trec_run

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = out / MODEL_FILE
    report.booster.save_model(str(model))
    cfg_path = out / "config.yaml"
    learned_cfg = base.replace(fusion="learned", learned_model=MODEL_FILE, learned_prior=report.prior_scale)
    write_config(learned_cfg, cfg_path, header=header)
    write_trec_run(report.heldout_final, out / "learned-heldout.trec", "learned-heldout", docid)
    write_trec_run(report.base_final, out / "default.trec", "default", docid)
    summary = {
        "learn": asdict(cfg),
        "features": list(FEATURES),
        "folds": report.folds.to_dicts(),
        "held_out_mean": {
            "base": float(_mean(report.held_out["base"])),
            "learned": float(_mean(report.held_out["learned"])),
        },
        "gain": report.gain,
        "p_ttest": report.p_ttest,
        "p_fisher": report.p_fisher,
        "in_sample_gain": report.in_sample_gain,
        "chosen": report.chosen,
        "trained_on": [list(t) for t in report.trained_on],
        "tested_on": [list(t) for t in report.tested_on],
    }
    (out / "learn.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return {
        "model": model,
        "config": cfg_path,
        "heldout": out / "learned-heldout.trec",
        "default": out / "default.trec",
    }


def suite_docs(suite) -> pl.DataFrame:
    """:func:`qmdlab.pipeline.learned.doc_features` of a suite's own index (recorded first)."""
    from qmdlab.pipeline.learned import doc_features
    from qmdlab.store import Index

    path = suite.workdir() / "index"
    if not path.exists():
        raise ConfigError(f"suite {suite.name!r} has no index at {path}; run `qmdlab eval {suite.name}` first")
    idx = Index.open(path)
    try:
        return doc_features(idx)
    finally:
        idx.close()


def explain_query(
    study, booster, qid: str, *, base: PipelineConfig | None = None, top: int = 5, prior_scale: float = 60.0
) -> pl.DataFrame:
    """Per-feature contributions (LightGBM ``pred_contrib``) of ``booster``'s top ``top`` documents
    for one query: ``rank, docno, feature, value, contribution`` (contributions sum to the score)."""
    base = base or study.config
    lists = ablate(reweight(study.trace.lists.filter(pl.col("qid") == str(qid)), base), base)
    if lists.height == 0:
        raise ConfigError(
            f"--explain {qid!r}: no recorded lists for that query id; pick one of the suite's "
            f"judged qids (e.g. {', '.join(study.qids[:5])})"
        )
    contrib = contributions(lists, base.replace(learned_prior=prior_scale), study.docs, booster=booster)
    scores = (
        contrib.group_by("docno")
        .agg(pl.col("contribution").sum().alias("score"))
        .sort(["score", "docno"], descending=[True, False])
        .head(top)
        .with_row_index("rank", offset=1)
    )
    return (
        scores.join(contrib, on="docno")
        .sort(["rank", pl.col("contribution").abs()], descending=[False, True])
        .select("rank", "docno", "score", "feature", "value", "contribution")
    )


def format_explain(table: pl.DataFrame, qid: str, *, per_doc: int = 8) -> str:
    """Text for ``qmdlab tune --learn --explain QID``: each document's largest contributions."""
    lines = [f"query {qid}: learned score = Σ feature contributions (LightGBM pred_contrib)"]
    for (rank, docno, score), part in table.group_by(["rank", "docno", "score"], maintain_order=True):
        lines.append(f"#{rank} {docno}  score {score:+.4f}")
        for r in part.head(per_doc).iter_rows(named=True):
            special = r["feature"] in ("(bias)", "(rrf prior)")
            value = "" if r["feature"] == "(bias)" or r["value"] != r["value"] else f" = {r['value']:.4g}"
            if not special and r["value"] != r["value"]:
                value = " = missing"
            lines.append(f"    {r['contribution']:+.4f}  {r['feature']}{value}")
        rest = part.slice(per_doc)
        if rest.height:
            lines.append(f"    {rest['contribution'].sum():+.4f}  ({rest.height} more features)")
    return "\n".join(lines)


def timing(study, booster, base: PipelineConfig, repeats: int = 5, prior_scale: float = 60.0) -> float:
    """Median ms of one learned re-fusion (features + predict + candidates + blend + finish) of the
    whole study — the ``retune`` benchmark row."""
    lists = ablate(reweight(study.trace.lists, base), base)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        frame = features(lists, study.docs)
        finals(lists, frame, booster, base, rerank_scores_of(study.trace) if base.rerank else None, prior_scale)
        times.append((time.perf_counter() - t0) * 1000)
    return float(np.median(times))


__all__ = [
    "LearnConfig",
    "LearnReport",
    "GRID",
    "select",
    "training_frame",
    "fit",
    "finals",
    "cross_validate_learned",
    "save",
    "suite_docs",
    "explain_query",
    "format_explain",
    "timing",
    "MODEL_FILE",
]

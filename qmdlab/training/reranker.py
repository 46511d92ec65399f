"""Train a small cross-encoder reranker from a suite's labelled queries, and measure it honestly.

``qmdlab train reranker --suite NAME|DIR --out DIR`` or ``python -m qmdlab.training.reranker
--suite cisi --out runs/rr-cisi [--field value ...]`` (TRL-style: every field of
:class:`RerankerRunConfig` is a flag or a YAML key).

Recipe (chosen for a 2-core CPU; each part measured, docs/results/reranker.md):

1. **Record** the suite through the pipeline once (:func:`qmdlab.eval.runner.run_suite`, traces cached
   per query; expansion and rerank off by default, so the fused order is BM25 + vector RRF).
   Each query's top ``candidate_limit`` fused documents, and its relevant documents, are
   represented by the chunk the pipeline would send the reranker (:mod:`qmdlab.training.reranker_data`).
2. **In-collection pretraining, once** (``weak``): heading/title → section text pairs with a
   BM25-mined negative, :class:`~sentence_transformers.cross_encoder.losses.MultipleNegativesRankingLoss`.
   No query and no judgment is read, so it cannot leak a held-out label; it gives the new
   relevance head thousands of free steps before the few labelled lists.
3. **K-fold fine-tuning** (``folds``): for each fold, the other folds' queries are split into
   *fit* (listwise lists: positives = relevant documents' chunks with their grade, hard
   negatives = non-relevant/unjudged fused candidates; LambdaLoss by default; a higher learning
   rate for the head) and *tune* queries, on which a Platt calibration of the logits and the
   blend (qmd's position-aware bands and weights, grid-searched) are chosen. The held-out fold
   is then reranked once. No held-out query reaches fit or tune: checked on the texts given to
   the trainer (:func:`~qmdlab.training.leakage.check_no_heldout`), and by a test.
4. **Report** on held-out queries only: nDCG@10 etc. of the fused order vs each blend, paired
   t and Fisher p (:func:`qmdlab.eval.significance.compare_to_baseline`), the AUC of the reranker's
   scores; TREC run files with the collection's ids (``fused-heldout.trec``,
   ``rerank-<blend>-heldout.trec``, ``qrels.txt``) so anyone can re-score them.
5. **Final model** (``final``) on all labelled queries, with its tuned blend in ``blend.yaml``:
   ``QMDLAB_RERANK_MODEL=cross-encoder:<out>/model``.

Everything is seeded (``seed``); every stage writes a ``DONE`` marker and trainer
checkpoints, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import polars as pl

from qmdlab.errors import ConfigError, QmdlabError
from qmdlab.training import hardware, rundir
from qmdlab.training.base_models import resolve_encoder_base
from qmdlab.training.config import SuiteRunConfig
from qmdlab.training.leakage import check_no_heldout
from qmdlab.training.reranker_data import (
    RerankCandidates,
    pair_rows,
    query_lists,
    record_candidates,
)
from qmdlab.training.reranker_eval import (
    calibrate_and_blend,
    evaluate_heldout,
    format_reranker_table,
    score_table,
    write_blend,
)
from qmdlab.training.reranker_fit import fit, fit_info, stage_model, start_model, write_meta

if TYPE_CHECKING:
    from qmdlab.eval.loaders import OfficialSplit

LOSSES = ("lambda", "listnet", "ranknet", "bce")
BASE_DEFAULT = "pkg:all-minilm-l6-v2"


@dataclass
class RerankerRunConfig(SuiteRunConfig):
    """Configuration of one reranker training run (YAML keys / CLI flags = field names)."""

    out: str = field(default="runs/reranker", metadata={"help": "Run directory."})
    base: str = field(
        default=BASE_DEFAULT, metadata={"help": "pkg:all-minilm-l6-v2, an HF encoder dir or hf:org/name."}
    )
    preset: str = field(default="offline-mini", metadata={"help": "Model preset whose embedder records the traces."})
    pipeline_config: str | None = field(default=None, metadata={"help": "Pipeline config YAML (default built-in)."})
    expand: bool = field(default=False, metadata={"help": "Record traces with query expansion (LLM calls)."})
    folds: int = field(default=5, metadata={"help": "K of the K-fold held-out evaluation (0: none)."})
    seed: int = 0
    max_length: int = field(default=128, metadata={"help": "Tokens per (query, chunk) pair."})
    candidates: int = field(default=20, metadata={"help": "Fused candidates reranked per query (candidate_limit)."})
    freeze_layers: int = field(
        default=0, metadata={"help": "Freeze the embeddings and this many lower encoder layers."}
    )
    identity_pooler: bool = field(
        default=True, metadata={"help": "Start the pooler at tanh(CLS) when starting from a bi-encoder."}
    )
    # label-free in-collection pretraining
    weak: bool = field(default=True, metadata={"help": "Pretrain on heading/title → text pairs first."})
    weak_max_pairs: int = 1500
    weak_hard_negatives: int = 1
    weak_in_batch_negatives: int = 3
    weak_epochs: float = 1.0
    weak_learning_rate: float = 5e-5
    weak_head_learning_rate: float = 1e-3
    weak_batch_size: int = 16
    # supervised fine-tuning
    supervised: bool = field(default=True, metadata={"help": "Fine-tune on labelled lists (off: weak model only)."})
    loss: str = field(default="lambda", metadata={"help": "lambda | listnet | ranknet | bce."})
    learning_rate: float = 3e-5
    head_learning_rate: float = 3e-4
    epochs: float = 2.0
    max_steps: int = field(default=-1, metadata={"help": "Overrides epochs when > 0."})
    list_size: int = 16
    max_positives: int = 8
    lists_per_query: int = 2
    batch_size: int = field(default=4, metadata={"help": "Lists (or pairs for bce) per step."})
    tune_fraction: float = field(
        default=0.25, metadata={"help": "Share of training queries kept for calibration + blend tuning."}
    )
    distill: str | None = field(
        default=None, metadata={"help": "Eval results dir whose LLM rerank scores label unjudged candidates."}
    )
    final: bool = field(default=True, metadata={"help": "Also train the serving model on all labelled queries."})
    score_weak: bool = field(default=True, metadata={"help": "Also report the label-free (weak) model on every query."})
    # training on synthetic queries instead of labels (qmdlab.training.reranker_synthetic)
    synthetic: str | None = field(
        default=None,
        metadata={
            "help": "A doc2query run directory (or its splits.json): train on the index's kept generated queries, "
            "judge on its held-out split."
        },
    )
    generator: str | None = field(
        default=None, metadata={"help": "Generator fingerprint whose kept queries to use (default: the active one)."}
    )
    synthetic_max_pairs: int = field(
        default=5000, metadata={"help": "At most this many synthetic pairs (seeded sample)."}
    )
    synthetic_hard_negatives: int = field(
        default=3, metadata={"help": "BM25-mined negative chunks per synthetic pair."}
    )
    synthetic_negative_depth: int = field(default=20, metadata={"help": "BM25 hits searched for hard negatives."})
    synthetic_epochs: float = 2.0
    synthetic_learning_rate: float = 5e-5
    synthetic_head_learning_rate: float = 1e-3
    synthetic_batch_size: int = 16
    n_threads: int | None = hardware.threads_field(default=1)
    logging_steps: int = 5
    save_steps: int = 100
    progress: bool = True


# -- inputs ---------------------------------------------------------------------------------------


def teacher_scores(run_dir: str | Path | None) -> dict[tuple[str, str], float] | None:
    """``{(qid, docno): P(yes)}`` from the rerank table of an eval results directory (distillation)."""
    if not run_dir:
        return None
    from qmdlab.eval.record import load_run_dir

    trace, _, _ = load_run_dir(run_dir)
    if not trace.rerank.height:
        raise QmdlabError(
            f"{run_dir}: its traces hold no rerank scores; record it with a reranker "
            "(`qmdlab eval SUITE --preset qmd`) to distil from it"
        )
    return {(q, d): float(s) for q, d, s in trace.rerank.select("qid", "docno", "rerank_score").iter_rows()}


# -- training -------------------------------------------------------------------------------------


def make_loss(name: str, model):
    from sentence_transformers.cross_encoder import losses

    if name == "lambda":
        return losses.LambdaLoss(model)
    if name == "listnet":
        return losses.ListNetLoss(model)
    if name == "ranknet":
        return losses.RankNetLoss(model)
    if name == "bce":
        return losses.BinaryCrossEntropyLoss(model)
    raise ConfigError(f"unknown reranker loss {name!r}; choose one of {', '.join(LOSSES)}")


# -- the run --------------------------------------------------------------------------------------
class FoldSplit(NamedTuple):
    fold: int
    fit: tuple[str, ...]
    tune: tuple[str, ...]
    test: tuple[str, ...]


def splits(
    qids: Sequence[str],
    folds: int,
    tune_fraction: float,
    seed: int,
    official: OfficialSplit | None = None,
    texts: dict[str, str] | None = None,
) -> list[FoldSplit]:
    """K folds of the queries — or, with a collection's ``official`` split, its one fold train → test —
    each fold's training queries split into fit/tune (seeded). With ``texts`` (qid → query text), a
    tuning query whose text a fitting query also has moves to fit: the blend is tuned on queries the
    model never saw, by id or by text (SciFact's training claims repeat some texts under two ids).

    >>> s = splits([str(i) for i in range(10)], 2, 0.25, 0)
    >>> [len(x.fit) + len(x.tune) + len(x.test) for x in s], set(s[0].test) & set(s[0].fit + s[0].tune)
    ([10, 10], set())
    >>> from qmdlab.eval.loaders import OfficialSplit
    >>> [(len(x.fit), len(x.tune), x.test) for x in splits(list("abcdef"), 5, 0.25, 0, OfficialSplit(tuple("abcd"), ("e",)))]
    [(3, 1, ('e',))]
    >>> texts = {q: "same claim" if q in "ab" else q for q in "abcdefgh"}
    >>> (sp,) = splits(list("abcdefgh"), 5, 0.5, 0, OfficialSplit(tuple("abcdefg"), ("h",)), texts)
    >>> sorted(sp.fit + sp.tune) == list("abcdefg"), {texts[q] for q in sp.tune} & {texts[q] for q in sp.fit}
    (True, set())
    """
    from qmdlab.eval.folds import Fold, kfold
    from qmdlab.eval.loaders import same_text

    have = set(qids)
    parts = (
        kfold(list(qids), folds, seed)
        if official is None
        else [Fold(tuple(q for q in official.train if q in have), tuple(q for q in official.test if q in have))]
    )
    out = []
    for i, f in enumerate(parts):
        train = list(f.train)
        order = np.random.default_rng(seed + 1000 + i).permutation(len(train))
        n_tune = int(round(len(train) * tune_fraction)) if tune_fraction > 0 else 0
        tune = tuple(sorted(train[j] for j in order[:n_tune]))
        fit_q = tuple(sorted(train[j] for j in order[n_tune:]))
        if texts:
            seen = {same_text(texts[q]) for q in fit_q if q in texts}
            moved = {q for q in tune if q in texts and same_text(texts[q]) in seen}
            tune = tuple(q for q in tune if q not in moved)
            fit_q = tuple(sorted({*fit_q, *moved}))
        out.append(FoldSplit(i, fit_q, tune, tuple(f.test)))
    return out


def _supervised(
    cfg: RerankerRunConfig,
    rec: RerankCandidates,
    init_dir: Path,
    run: Path,
    fit_q: Sequence[str],
    tune_q: Sequence[str],
    heldout: Sequence[str],
    teacher,
    stage: str,
    log,
) -> dict:
    """Fine-tune from ``init_dir`` on ``fit_q``; calibrate + tune the blend on ``tune_q``."""
    done = rundir.done_result(run)
    if done:
        return done
    lists = query_lists(
        rec.table,
        fit_q,
        list_size=cfg.list_size,
        max_positives=cfg.max_positives,
        lists_per_query=cfg.lists_per_query,
        seed=cfg.seed,
        teacher=teacher,
    )
    if not lists:
        raise QmdlabError(
            f"{stage}: none of the {len(fit_q)} training queries has a relevant document among "
            "its chunks; the suite needs positive judgments"
        )
    texts = dict(rec.queries.select("qid", "query").iter_rows())
    if cfg.loss == "bce":
        rows, per_row = pair_rows(lists), 1
    else:
        rows, per_row = lists, cfg.list_size
    # What reaches the trainer: no held-out (or tune) query, by id and by text.
    check_no_heldout(rows, [*heldout, *tune_q], texts, where="reranker training lists", text="query")
    train_rows = [{k: v for k, v in r.items() if k != "qid"} for r in rows]
    (run).mkdir(parents=True, exist_ok=True)
    (run / "train_qids.json").write_text(json.dumps(sorted({r["qid"] for r in rows})), encoding="utf-8")
    model = stage_model(cfg, init_dir, identity_pooler=cfg.identity_pooler and not cfg.weak)
    res = fit(
        model,
        train_rows,
        make_loss(cfg.loss, model),
        run,
        cfg=cfg,
        stage=stage,
        learning_rate=cfg.learning_rate,
        head_lr=cfg.head_learning_rate,
        epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        batch_size=cfg.batch_size,
        pairs_per_row=per_row,
    )
    calib, blend, tune_score = calibrate_and_blend(cfg, rec, res.model_dir, tune_q)
    write_meta(
        res.model_dir,
        cfg,
        rec,
        stage=stage,
        labels_used=True,
        calibration=list(calib),
        blend=blend,
        trained_on_qids=len({r["qid"] for r in rows}),
    )
    info = {
        **fit_info(res, fit_queries=len(fit_q), tune_queries=len(tune_q), lists=len(lists)),
        "calibration": list(calib),
        "blend": blend,
        "tune_ndcg@10": tune_score,
    }
    rundir.append_metrics(cfg.out, {"stage": stage, "final": True, **info})
    rundir.mark_done(run, info)
    log(f"{stage}: {res.steps} steps, {info['pairs_per_s']} pairs/s, loss {res.train_loss:.4f}, blend {info['blend']}")
    return info


def run_reranker(cfg: RerankerRunConfig, log: Callable[[str], None] = print) -> dict:
    """Record, pretrain, K-fold fine-tune and evaluate, train the final model (see module notes).

    Returns
    -------
    dict
        ``heldout`` (table rows), ``metrics``, ``auc``, ``folds`` (per-fold training info),
        ``weak``, ``final``, ``model`` (the serving model's ``cross-encoder:`` ref), ``seconds``.
    """
    if cfg.loss not in LOSSES:
        raise ConfigError(f"unknown reranker loss {cfg.loss!r} (option 'loss'); choose one of {', '.join(LOSSES)}")
    if cfg.folds == 1 or cfg.folds < 0:
        raise ConfigError(f"--folds {cfg.folds}: use 0 (no held-out evaluation) or at least 2")
    if not 0 <= cfg.tune_fraction < 1:
        raise ConfigError(f"tune_fraction must be in [0, 1), got {cfg.tune_fraction}")
    if cfg.synthetic:
        from qmdlab.training.reranker_synthetic import run_synthetic

        return run_synthetic(cfg, log)
    out = Path(cfg.out)
    done = rundir.done_result(out)
    if done:
        return done
    t0 = time.perf_counter()
    base_dir = resolve_encoder_base(cfg.base)
    hardware.set_threads(cfg.n_threads)
    rundir.save_config(cfg, out)
    rec = record_candidates(cfg, log)
    teacher = teacher_scores(cfg.distill)
    qids = sorted(rec.table.filter(pl.col("grade") >= 1)["qid"].unique().to_list())
    log(
        f"{rec.suite.name}: {len(qids)} queries with a relevant chunk, {rec.table.filter(pl.col('candidate')).height} "
        f"candidate pairs"
    )
    init_dir, weak_info = start_model(cfg, rec, base_dir, log)
    result: dict = {"suite": rec.suite.name, "queries": len(qids), "weak": weak_info, "folds": []}
    # a collection's official split (SciFact): one fold, fitted and tuned on train, scored on test; the
    # serving model is that fold's (it saw every training query it may see)
    official = rec.suite.split
    if official is not None:
        result["official_split"] = {"train": len(official.train), "test": len(official.test)}
    if cfg.folds >= 2 and cfg.supervised:
        if official is None and cfg.folds > len(qids):
            raise ConfigError(
                f"--folds {cfg.folds} but only {len(qids)} queries have a relevant document; "
                f"use --folds {max(2, len(qids))} or fewer"
            )
        parts, fold_blends, fold_of = [], {}, {}
        texts = dict(rec.queries.select("qid", "query").iter_rows())
        for sp in splits(qids, cfg.folds, cfg.tune_fraction, cfg.seed, official, texts):
            run = out / f"fold-{sp.fold}"
            info = _supervised(cfg, rec, init_dir, run, sp.fit, sp.tune, sp.test, teacher, f"fold-{sp.fold}", log)
            cal = tuple(info["calibration"])
            cached = run / "heldout_scores.parquet"  # resumable: a fold's held-out scores are computed once
            if cached.is_file():
                part = pl.read_parquet(cached)
            else:
                part = score_table(
                    Path(info["model_dir"]),
                    rec.table,
                    sp.test,
                    max_length=cfg.max_length,
                    n_threads=cfg.n_threads,
                    calibration=cal,
                )
                part.write_parquet(cached)
            parts.append(part)
            fold_blends[sp.fold] = info["blend"]
            fold_of.update({q: sp.fold for q in sp.test})
            result["folds"].append({"fold": sp.fold, "test_queries": len(sp.test), **info})
        scores = pl.concat(parts)
        scores.write_parquet(out / "heldout_scores.parquet")
        weak_scores = None
        if weak_info is not None and cfg.score_weak:  # label-free model: every query is held out from it
            weak_scores = score_table(init_dir, rec.table, qids, max_length=cfg.max_length, n_threads=cfg.n_threads)
        held = evaluate_heldout(rec, scores, fold_blends, fold_of, out, weak_scores)
        held.table.write_csv(out / "heldout.csv")
        held.per_query.write_parquet(out / "heldout_per_query.parquet")
        result.update(heldout=held.table.to_dicts(), metrics=held.metrics, auc=held.auc)
        log(format_reranker_table(held.table))
        log("AUC (held-out candidates): " + ", ".join(f"{k} {v:.3f}" for k, v in held.auc.items() if v is not None))
    model_ref = None
    if cfg.final and cfg.supervised and official is not None and result["folds"]:
        result["final"] = result["folds"][0]
        model_dir = out / "model"
        if model_dir.exists():
            shutil.rmtree(model_dir)
        shutil.copytree(result["final"]["model_dir"], model_dir)
        model_ref = f"cross-encoder:{model_dir.resolve()}"
    elif cfg.final and cfg.supervised:
        if official is not None:  # no held-out fold ran (--folds 0): fit on the training side only
            qids = [q for q in qids if q in set(official.train)]
        rng = np.random.default_rng(cfg.seed + 7)
        order = rng.permutation(len(qids))
        n_tune = int(round(len(qids) * cfg.tune_fraction))
        tune_q = sorted(qids[i] for i in order[:n_tune])
        fit_q = sorted(qids[i] for i in order[n_tune:])
        info = _supervised(cfg, rec, init_dir, out / "final", fit_q, tune_q, [], teacher, "final", log)
        result["final"] = info
        model_dir = out / "model"
        if model_dir.exists():
            shutil.rmtree(model_dir)
        shutil.copytree(info["model_dir"], model_dir)
        model_ref = f"cross-encoder:{model_dir.resolve()}"
    elif cfg.final and weak_info is not None:
        shutil.copytree(init_dir, out / "model", dirs_exist_ok=True)
        model_ref = f"cross-encoder:{(out / 'model').resolve()}"
    if model_ref:
        write_blend(out, rec.config, (result.get("final") or {}).get("blend"))
    result["model"] = model_ref
    result["seconds"] = round(time.perf_counter() - t0, 1)
    _model_card(cfg, result, out)
    rundir.mark_done(out, result)
    return result


def _model_card(cfg: RerankerRunConfig, result: dict, out: Path) -> None:
    table = ""
    if result.get("heldout"):
        table = "```\n" + format_reranker_table(pl.DataFrame(result["heldout"])) + "\n```\n"
    auc_line = ", ".join(f"{k} {v:.3f}" for k, v in (result.get("auc") or {}).items() if v is not None)
    rundir.write_model_card(
        out,
        f"qmdlab cross-encoder reranker — {result['suite']}",
        f"""
Base: `{cfg.base}`; max {cfg.max_length} tokens per pair; loss `{cfg.loss}`; seed {cfg.seed}.
In-collection pretraining (no labels): {"yes" if cfg.weak else "no"}.
Held-out evaluation: {cfg.folds}-fold over {result["queries"]} queries (each fold's model never saw its queries;
calibration and blend tuned on a {cfg.tune_fraction:.0%} split of the training queries).

{table}
AUC: {auc_line or "-"}

Use it: `QMDLAB_RERANK_MODEL={result.get("model") or "cross-encoder:<out>/model"}` (blend settings in blend.yaml).
""",
    )


class Report(NamedTuple):
    """A finished run as the notebooks and the demo read it (see :func:`load_report`)."""

    out: Path
    heldout: pl.DataFrame | None  # run, mean, delta, p_ttest, p_fisher, wins, ties, losses
    per_query: pl.DataFrame | None  # qid, <metrics>, run
    auc: dict
    folds: list
    model: str | None
    result: dict


def load_report(out: str | Path) -> Report | None:
    """The stored result of a finished ``qmdlab train reranker`` run directory, or None."""
    d = Path(out)
    res = rundir.done_result(d)
    if res is None:
        return None
    held = pl.read_csv(d / "heldout.csv") if (d / "heldout.csv").is_file() else None
    pq = pl.read_parquet(d / "heldout_per_query.parquet") if (d / "heldout_per_query.parquet").is_file() else None
    return Report(d, held, pq, res.get("auc") or {}, res.get("folds") or [], res.get("model"), res)


def main(argv: list[str] | None = None) -> dict:
    """``python -m qmdlab.training.reranker [--config reranker.yaml] [--field value ...]``."""
    from qmdlab.training.config import parse_args

    cfg = parse_args(RerankerRunConfig, argv)
    res = run_reranker(cfg)
    print(json.dumps({k: res.get(k) for k in ("suite", "model", "auc", "seconds")}, indent=1, default=str))
    return res


if __name__ == "__main__":
    main(sys.argv[1:])

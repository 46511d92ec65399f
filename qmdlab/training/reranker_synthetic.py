"""Train the cross-encoder reranker on synthetic (generated query, source chunk) pairs, and judge it
on the generator's held-out labelled queries.

``qmdlab train reranker --suite default --synthetic RUN --out DIR`` (``RUN`` is a ``qmdlab train
doc2query`` run directory whose generator has written the suite's expansions, ``qmdlab
expand-docs --generator RUN/model.gguf``).

Recipe (InPars / Promptagator style: thousands of filtered synthetic queries train a small
reranker where a few dozen labelled queries could not):

1. **Record** the suite through the pipeline once, expansion and rerank off
   (:func:`qmdlab.training.reranker_data.record_candidates`); the candidates of each judged query are the chunks
   the pipeline would send the reranker.
2. **Pairs** — the round-trip-filtered generated queries of the index's active generator, each with
   its source chunk as the positive and ``synthetic_hard_negatives`` BM25-mined chunks of other
   documents (:func:`qmdlab.training.embedder.build_pairs`, chunk text as the reranker reads it).
   No label is read. A generated query equal to a held-out query's text fails the run
   (:func:`qmdlab.training.leakage.check_no_heldout`).
3. **Training** — optional label-free in-collection pretraining (``weak``, as in the labelled
   recipe), then ``MultipleNegativesRankingLoss`` over the pairs (hard negatives plus in-batch ones).
4. **Choices on train queries** — the split's *train* judged queries (the generator was trained on
   them; none is held out) pick the Platt calibration, the blend on top of the recorded fusion, and
   a tuned fusion without the reranker (the best configuration without the new thing).
5. **Report** on the split's held-out queries only: the fused order, the tuned fusion and the
   reranked rows, each with paired t and Fisher p-values against the fused order and against the
   tuned fusion; AUC of the reranker's scores; TREC run files (``heldout.csv``,
   ``heldout_vs_tuned.csv``, ``report.json``, ``README.md``). The served model is ``<out>/model``
   with its blend in ``blend.yaml``: ``QMDLAB_RERANK_MODEL=cross-encoder:<out>/model``.

Every stage is resumable (``DONE`` markers, trainer checkpoints, a trace cache).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import polars as pl

from qmdlab.errors import ConfigError, QmdlabError
from qmdlab.training import hardware, rundir

METRIC = "ndcg@10"


def chunk_text(title: str, text: str) -> str:
    """A chunk as the cross-encoder reads it at serving time: its text alone (the candidate table's
    ``text``, :func:`qmdlab.training.reranker_data.candidate_table`).

    >>> chunk_text("Backups", "Run nightly.")
    'Run nightly.'
    """
    return text


def train_and_heldout(qids: Sequence[str], split) -> tuple[list[str], list[str]]:
    """The queries with a relevant candidate on each side of the generator's split.

    >>> from qmdlab.training.splits import QuerySplit
    >>> train_and_heldout(["1", "2", "3"], QuerySplit("s", ("1", "4"), ("2",), 0, 0.5))
    (['1'], ['2'])
    """
    have = set(qids)
    train = sorted(q for q in split.train if q in have)
    held = sorted(q for q in split.heldout if q in have)
    if set(train) & set(split.heldout):  # a split file that lists a query on both sides
        raise ConfigError(f"split of {split.suite!r} lists {sorted(set(train) & set(split.heldout))[:5]} as both")
    return train, held


def tune_fusion(study, config, metric: str = METRIC):
    """Fusion without the reranker tuned on ``study``'s queries (the knobs and search of
    ``qmdlab tune``: :func:`qmdlab.eval.optimise.default_space`, coordinate ascent, 200 trials)."""
    from qmdlab.eval.optimise import apply_params, default_space, params_of, search

    base = config.replace(rerank=False)
    space = default_space(base, rerank=False)
    res = search(lambda p: study.score(apply_params(base, p), metric), space, params_of(base, space))
    return apply_params(base, res.params), res.value


def run_synthetic(cfg, log: Callable[[str], None] = print) -> dict:
    """Pairs → leak guard → (weak) → synthetic training → choices on train queries → held-out report."""
    from sentence_transformers.cross_encoder.losses import MultipleNegativesRankingLoss

    from qmdlab.eval.significance import compare_to_baseline
    from qmdlab.training.base_models import resolve_encoder_base
    from qmdlab.training.embedder import build_pairs, load_split, train_columns
    from qmdlab.training.leakage import check_no_heldout
    from qmdlab.training.reranker_data import record_candidates
    from qmdlab.training.reranker_eval import (
        calibrate_and_blend,
        evaluate_heldout,
        format_reranker_table,
        score_table,
        write_blend,
    )
    from qmdlab.training.reranker_fit import fit, fit_info, stage_model, start_model, write_meta

    out = Path(cfg.out)
    done = rundir.done_result(out)
    if done:
        return done
    if cfg.synthetic_hard_negatives < 0:
        raise ConfigError(f"synthetic_hard_negatives must be 0 or more, got {cfg.synthetic_hard_negatives}")
    t0 = time.perf_counter()
    base_dir = resolve_encoder_base(cfg.base)
    hardware.set_threads(cfg.n_threads)
    rundir.save_config(cfg, out)
    rec = record_candidates(cfg, log)
    split = load_split(cfg.synthetic, rec.suite.name)
    qids = sorted(rec.table.filter(pl.col("grade") >= 1)["qid"].unique().to_list())
    train_q, held_q = train_and_heldout(qids, split)
    if not held_q:
        raise QmdlabError(
            f"{cfg.synthetic}: none of the split's held-out queries of {rec.suite.name!r} has a relevant chunk"
        )

    pairs, counts = build_pairs(
        rec.index,
        generator=cfg.generator,
        hard_negatives=cfg.synthetic_hard_negatives,
        depth=cfg.synthetic_negative_depth,
        max_pairs=cfg.synthetic_max_pairs,
        seed=cfg.seed,
        collections=[rec.suite.collection],
        as_text=chunk_text,
    )
    if not pairs:
        raise QmdlabError(
            f"index {rec.index.dir}: no kept generated queries"
            f"{' of generator ' + cfg.generator if cfg.generator else ''}; run "
            f"`qmdlab --index {rec.index.dir} expand-docs --generator {Path(cfg.synthetic or '')}/model.gguf` first"
        )
    texts = dict(rec.queries.select("qid", "query").iter_rows())
    check_no_heldout(pairs, split.heldout, texts, where="reranker pairs", text="anchor", suite=split.suite)
    with (out / "pairs.jsonl").open("w", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    log(
        f"synthetic: {counts['pairs']} (query, chunk) pairs over {counts['chunks']} chunks from {counts['kept']} kept "
        f"queries; {len(train_q)} train queries choose calibration and blend, {len(held_q)} held out"
    )

    init_dir, weak_info = start_model(cfg, rec, base_dir, log)
    run = out / "synthetic"
    info = rundir.done_result(run)
    if info is None:
        model = stage_model(cfg, init_dir, identity_pooler=cfg.identity_pooler and not cfg.weak)
        res = fit(
            model,
            train_columns(pairs, cfg.synthetic_hard_negatives),
            MultipleNegativesRankingLoss(model, num_negatives=cfg.weak_in_batch_negatives),
            run,
            cfg=cfg,
            stage="synthetic",
            learning_rate=cfg.synthetic_learning_rate,
            head_lr=cfg.synthetic_head_learning_rate,
            epochs=cfg.synthetic_epochs,
            max_steps=cfg.max_steps,
            batch_size=cfg.synthetic_batch_size,
            pairs_per_row=2 + cfg.synthetic_hard_negatives + cfg.weak_in_batch_negatives - 1,
            no_duplicates=True,
        )
        info = fit_info(res, pairs=len(pairs))
        rundir.append_metrics(cfg.out, {"stage": "synthetic", "final": True, **info})
        rundir.mark_done(run, info)
        log(f"synthetic: {res.steps} steps, {info['pairs_per_s']} pairs/s, loss {res.train_loss:.4f}")
    model_dir = Path(info["model_dir"])

    # Choices on the train queries only.
    calib, blend, tune_score = calibrate_and_blend(cfg, rec, model_dir, train_q)
    tuned_fusion, tuned_fusion_train = rec.config.replace(rerank=False), None
    if train_q:
        tuned_fusion, tuned_fusion_train = tune_fusion(rec.study.subset(train_q), rec.config)
    write_meta(model_dir, cfg, rec, stage="synthetic", labels_used=False, calibration=list(calib), blend=blend)

    # The held-out report.
    held_scores = score_table(
        model_dir, rec.table, held_q, max_length=cfg.max_length, n_threads=cfg.n_threads, calibration=calib
    )
    held_scores.write_parquet(out / "heldout_scores.parquet")
    weak_scores = None
    if weak_info is not None and cfg.score_weak:
        weak_scores = score_table(init_dir, rec.table, held_q, max_length=cfg.max_length, n_threads=cfg.n_threads)
    held = evaluate_heldout(rec, held_scores, {0: blend}, {q: 0 for q in held_q}, out, weak_scores)
    study = rec.study.subset(held_q)
    tuned_per_query = study.evaluate(tuned_fusion).per_query
    reranked = "rerank-tuned" if blend else "rerank-position"
    vs_tuned = compare_to_baseline({"fused-tuned": tuned_per_query, reranked: held_per(held, reranked)}, "fused-tuned")
    vs_fused = compare_to_baseline({"fused": held_per(held, "fused"), "fused-tuned": tuned_per_query}, "fused")
    # the tuned fusion's row (against the fused order) second, after the fused order's own
    table = pl.concat([held.table.head(1), vs_fused.tail(1), held.table.slice(1)])
    table.write_csv(out / "heldout.csv")
    vs_tuned.write_csv(out / "heldout_vs_tuned.csv")
    pl.concat(
        [held.per_query, tuned_per_query.with_columns(pl.lit("fused-tuned").alias("run"))], how="diagonal"
    ).write_parquet(out / "heldout_per_query.parquet")
    log(format_reranker_table(table))
    log("against the tuned fusion:\n" + format_reranker_table(vs_tuned))

    final = out / "model"
    if final.exists():
        shutil.rmtree(final)
    shutil.copytree(model_dir, final)
    write_blend(out, rec.config, blend)
    result = {
        "suite": rec.suite.name,
        "mode": "synthetic",
        "synthetic": str(cfg.synthetic),
        "queries": len(qids),
        "split": {"train": len(train_q), "heldout": len(held_q), "seed": split.seed},
        **counts,
        "weak": weak_info,
        "synthetic_training": info,
        "calibration": list(calib),
        "blend": blend,
        "tune_ndcg@10": tune_score,
        "tuned_fusion_train_ndcg@10": tuned_fusion_train,
        "heldout": table.to_dicts(),
        "heldout_vs_tuned": vs_tuned.to_dicts(),
        "metrics": held.metrics,
        "auc": held.auc,
        "folds": [],
        "model": f"cross-encoder:{final.resolve()}",
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "report.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    _model_card(cfg, result, out)
    rundir.mark_done(out, result)
    return result


def held_per(held, run: str) -> pl.DataFrame:
    """One run's per-query scores from a :class:`qmdlab.training.reranker_eval.HeldOut`."""
    return held.per_query.filter(pl.col("run") == run).drop("run")


def _model_card(cfg, result: dict, out: Path) -> None:
    from qmdlab.training.reranker_eval import format_reranker_table

    table = format_reranker_table(pl.DataFrame(result["heldout"]))
    vs = format_reranker_table(pl.DataFrame(result["heldout_vs_tuned"]))
    auc_line = ", ".join(f"{k} {v:.3f}" for k, v in (result.get("auc") or {}).items() if v is not None)
    rundir.write_model_card(
        out,
        f"qmdlab cross-encoder reranker trained on synthetic queries — {result['suite']}",
        f"""
Base: `{cfg.base}`; max {cfg.max_length} tokens per pair; seed {cfg.seed}. Training data: {result["pairs"]}
(generated query, source chunk) pairs over {result["chunks"]} chunks — the round-trip-filtered queries of the
doc2query generator of `{cfg.synthetic}` — each with {cfg.synthetic_hard_negatives} BM25-mined hard negative(s);
MultipleNegativesRankingLoss. In-collection pretraining first: {"yes" if cfg.weak else "no"}. No labelled query
was read for training. The split's {result["split"]["train"]} train queries chose the calibration, the blend
and the tuned fusion; the {result["split"]["heldout"]} held-out queries were scored once.

Held-out nDCG@10, paired against the fused order:

```
{table}
```

Against the tuned fusion (the best configuration without the reranker):

```
{vs}
```

AUC: {auc_line or "-"}

Use it: `QMDLAB_RERANK_MODEL={result["model"]}` (blend settings in blend.yaml).
""",
    )

"""Query-likelihood rerank over the fused candidates: AUC and held-out nDCG@10 against fused.

One recording per suite (expansion off, vectors on, the top ``--candidates`` fused documents scored
by ``qlm:MODEL``), then every row is cut from it without a model call (:class:`eval.study.Study`):

- ``fused``: the suite config's fusion order (rerank off) — nothing fitted, held-out by nature;
- ``fused, tuned (k-fold)``: fusion weights / rrf_k / bonuses tuned on the training folds
  (:func:`eval.optimise.cross_validate`, the folds and seed of ``qmdlab tune``);
- ``+qlm, position blend``: qmd's default blend weights and bands;
- ``+qlm, rerank only``: the QLM order alone;
- ``+qlm, blend tuned (k-fold)``: the blend weights and bands tuned on the training folds.

Writes ``summary.json``, ``per_query.csv`` (nDCG@10 per query and row) and ``pairs.csv`` (every
scored candidate: fused rank, QLM score, grade) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
import polars as pl

METRIC = "ndcg@10"


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mann–Whitney AUC of ``scores`` for ``labels`` (ties count one half); NaN without both classes.

    >>> auc(np.array([0.9, 0.1, 0.5]), np.array([1, 0, 0]))
    1.0
    >>> auc(np.array([0.5, 0.5]), np.array([1, 0]))
    0.5
    """
    pos, neg = scores[labels > 0], scores[labels <= 0]
    if not len(pos) or not len(neg):
        return float("nan")
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size)


def pair_table(study) -> pl.DataFrame:
    """Every scored candidate: ``qid, docno, fused_rank, rerank_score, grade`` (grade 0 = not judged relevant)."""
    rr = study.trace.rerank.select("qid", "docno", "rerank_score").drop_nulls("rerank_score")
    fused = (
        study.trace.fused.select("qid", "docno", "fused_rank")
        if "fused_rank" in study.trace.fused.columns
        else study.trace.fused.with_columns(pl.int_range(1, pl.len() + 1).over("qid").alias("fused_rank"))
    )
    out = rr.join(fused.select("qid", "docno", "fused_rank"), on=["qid", "docno"], how="left")
    out = out.join(study.qrels.select("qid", "docno", "grade"), on=["qid", "docno"], how="left")
    return out.with_columns(pl.col("grade").fill_null(0)).sort("qid", "fused_rank")


def auc_summary(pairs: pl.DataFrame) -> dict:
    """Pooled AUC and the mean per-query AUC (queries with both classes among their candidates),
    of the QLM score and, for reference, of the fused position ``1 / fused_rank``."""
    out = {}
    for name, col in (("qlm", pl.col("rerank_score")), ("fused_position", 1.0 / pl.col("fused_rank"))):
        p = pairs.with_columns(col.alias("_s"))
        per = [auc(g["_s"].to_numpy(), g["grade"].to_numpy()) for _, g in p.group_by("qid", maintain_order=True)]
        per = [a for a in per if not np.isnan(a)]
        out[name] = {
            "pooled": auc(p["_s"].to_numpy(), p["grade"].to_numpy()),
            "per_query_mean": float(np.mean(per)) if per else float("nan"),
            "queries": len(per),
        }
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", default="default")
    ap.add_argument("--model", default="pkg:smollm2-135m-instruct-q4_1", help="the MODEL of qlm:MODEL")
    ap.add_argument("--candidates", type=int, default=10, help="fused documents scored per query")
    ap.add_argument("--max-doc-tokens", type=int, default=192, help="tokens of each chunk the model reads")
    ap.add_argument("--prompt", default="plain", help="QLM prompt template: plain, chatml, doc2query")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=None, help="only the first N judged queries (smoke runs)")
    ap.add_argument(
        "--splits",
        type=Path,
        default=None,
        help="a run's splits.json: only its held-out queries (for a model trained on the train ones, "
        "e.g. a `qmdlab train doc2query` generator)",
    )
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    from qmdlab.eval.optimise import BLEND_SPACE, FUSION_SPACE, cross_validate
    from qmdlab.eval.record import record, suite_config
    from qmdlab.eval.significance import paired_pvalues
    from qmdlab.eval.study import Study
    from qmdlab.eval.suites import get_suite
    from qmdlab.models import load_models

    suite = get_suite(args.suite)
    base = suite_config(suite).replace(expand=False, rerank=True, candidate_limit=args.candidates)
    from qmdlab.models import llama_qlm
    from qmdlab.models.base import ModelSet
    from qmdlab.models.registry import KNOWN, resolve_path

    retrieval = load_models(expand="none", rerank="none")
    qlm = llama_qlm.build(
        f"qlm:{args.model}",
        resolve_path,
        KNOWN,
        idle_timeout=None,
        max_doc_tokens=args.max_doc_tokens,
        prompt=args.prompt,
    )
    models = ModelSet(retrieval.embedder, None, qlm)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    qids = None
    if args.splits is not None:
        from qmdlab.training.splits import load_splits

        qids = list(load_splits(args.splits)[suite.name].heldout)
    rec = record(suite, models, base, limit=args.limit, qids=qids, name=f"qlm top {args.candidates}", progress=True)
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()
    study = Study.from_recording(rec)
    fused_cfg = base.replace(rerank=False)
    pairs = pair_table(study)
    aucs = auc_summary(pairs)

    def pq(ev, name):
        return ev.per_query.select("qid", pl.col(METRIC).alias(name))

    rows = {
        "fused": pq(study.evaluate(fused_cfg), "fused"),
        "+qlm, position blend": pq(study.evaluate(base), "+qlm, position blend"),
        "+qlm, rerank only": pq(study.evaluate(base.replace(blend="rerank_only")), "+qlm, rerank only"),
    }
    fusion_space = tuple(
        p
        for p in FUSION_SPACE
        if p.name in ("weight_original_fts", "weight_original_vec", "rrf_k", "bonus_rank1", "bonus_rank23")
    )
    cv_fused = cross_validate(
        study, base=fused_cfg, space=fusion_space, folds=args.folds, seed=args.seed, metric=METRIC, progress=print
    )
    cv_blend = cross_validate(
        study, base=base, space=BLEND_SPACE, folds=args.folds, seed=args.seed, metric=METRIC, progress=print
    )
    rows["fused, tuned (k-fold)"] = cv_fused.held_out.select("qid", pl.col("tuned").alias("fused, tuned (k-fold)"))
    rows["+qlm, blend tuned (k-fold)"] = cv_blend.held_out.select(
        "qid", pl.col("tuned").alias("+qlm, blend tuned (k-fold)")
    )
    table = None
    for name, t in rows.items():
        table = t if table is None else table.join(t, on="qid", how="inner")
    table = table.sort("qid")
    fused = table["fused"].to_numpy()
    best_without = max(("fused", "fused, tuned (k-fold)"), key=lambda n: table[n].mean())
    result_rows = []
    for name in rows:
        v = table[name].to_numpy()
        p_t, p_f = paired_pvalues(fused, v)
        q_t, q_f = paired_pvalues(table[best_without].to_numpy(), v)
        result_rows.append(
            {
                "row": name,
                METRIC: float(v.mean()),
                "delta_vs_fused": float(v.mean() - fused.mean()),
                "p_ttest_vs_fused": p_t,
                "p_fisher_vs_fused": p_f,
                "wins": int((v > fused).sum()),
                "ties": int((v == fused).sum()),
                "losses": int((v < fused).sum()),
                f"p_ttest_vs_{best_without}": q_t,
                f"p_fisher_vs_{best_without}": q_f,
            }
        )
    n_pairs = pairs.height
    cached = int(study.trace.rerank["cached"].sum()) if "cached" in study.trace.rerank.columns else 0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    summary = {
        "suite": args.suite,
        "model": f"qlm:{args.model}",
        "fingerprint": models.reranker.fingerprint,
        "candidates": args.candidates,
        "max_doc_tokens": args.max_doc_tokens,
        "queries": table.height,
        "pairs": n_pairs,
        "pairs_from_cache": cached,
        "folds": args.folds,
        "seed": args.seed,
        "config": {
            k: v
            for k, v in base.to_dict().items()
            if k in ("expand", "rerank", "candidate_limit", "blend", "blend_weights", "blend_bands", "fusion")
        },
        "auc": aucs,
        "rows": result_rows,
        "best_without_qlm": best_without,
        "tuned_blend_all_queries": {k: cv_blend.config.to_dict()[k] for k in ("blend_weights", "blend_bands")},
        "blend_folds": cv_blend.folds.to_dicts(),
        "fusion_folds": cv_fused.folds.to_dicts(),
        "record_wall_s": wall,
        "rough_pairs_per_s": (n_pairs - cached) / wall if n_pairs > cached else None,
        "loadavg_before": load0,
        "loadavg_after": load1,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    table.write_csv(args.out / "per_query.csv")
    pairs.write_csv(args.out / "pairs.csv")
    print(
        json.dumps(
            {k: summary[k] for k in ("suite", "queries", "pairs", "auc", "rows", "rough_pairs_per_s", "loadavg_after")},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

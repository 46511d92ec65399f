"""EmbeddingGemma-300M (qmd's embedder, packaged offline) against all-MiniLM-L6-v2 on a labelled suite.

    .venv/bin/python experiments/embeddinggemma/run.py default cisi --out docs/results/embeddinggemma

For each suite, the same judged queries are recorded twice with expansion and rerank off — once
with MiniLM (the offline-mini preset) and once with the offline-gemma preset (EmbeddingGemma) — and
the vector-only and hybrid (qmd's weighted RRF over BM25 + vectors) rows are compared per query:
nDCG@10 of each, the difference, the paired t-test and Fisher randomisation p-value, wins / ties /
losses. These rows tune nothing, so every query is a held-out query. A third row per model tunes
the hybrid's fusion (the knobs and folds of ``qmdlab tune``: 5 folds, seed 0, coordinate ascent) and
scores each query with the parameters of the other four folds; EmbeddingGemma's rows are then also
compared with MiniLM's tuned hybrid, the best configuration without it. Also recorded: seconds spent
embedding the suite's index with each model (CPU, this machine). Writes ``<out>/<suite>.json`` (the
table and every query's nDCG@10) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _study(suite, preset: str):
    from qmdlab.eval.record import prepare_index
    from qmdlab.eval.study import Study
    from qmdlab.models import load_models
    from qmdlab.pipeline.config import PipelineConfig

    models = load_models(preset, expand="none", rerank="none")
    t0 = time.perf_counter()
    prepare_index(suite, models.embedder)
    embed_s = time.perf_counter() - t0
    config = PipelineConfig(expand=False, rerank=False)
    study = Study.for_suite(suite, models, config)
    return study, embed_s


TUNED = "bm25+vector, fusion tuned (5-fold)"


def _rows(study) -> dict:
    """Per-query nDCG@10 of the BM25, vector-only and hybrid rows of one study (the ablation's rows)
    and of the hybrid with its fusion tuned k-fold (held-out scores only)."""
    from qmdlab.eval.ablation import variants
    from qmdlab.eval.optimise import cross_validate, default_space

    out = {}
    for v in variants(study.config, has_vector=True, has_expansion=False, has_rerank=False):
        if v.name in ("bm25", "vector", "bm25+vector"):
            ev = study.evaluate(study.config.replace(**v.overrides), lists=v.lists)
            out[v.name] = dict(zip(ev.per_query["qid"].to_list(), ev.per_query["ndcg@10"].to_list()))
    cv = cross_validate(study, space=default_space(study.config), folds=5, seed=0, metric="ndcg@10")
    out[TUNED] = dict(zip(cv.held_out["qid"].to_list(), cv.held_out["tuned"].to_list()))
    return out


def _compare(a: dict, b: dict, name_a: str, name_b: str) -> dict:
    """Paired comparison of two per-query nDCG@10 maps over their common queries."""
    import numpy as np

    from qmdlab.eval.significance import paired_pvalues

    qids = sorted(set(a) & set(b))
    x, y = np.array([a[q] for q in qids]), np.array([b[q] for q in qids])
    p_t, p_f = paired_pvalues(x, y)
    d = y - x
    return {
        "queries": len(qids),
        name_a: float(x.mean()),
        name_b: float(y.mean()),
        "delta": float(d.mean()),
        "p_ttest": float(p_t),
        "p_fisher": float(p_f),
        "wins": int((d > 1e-12).sum()),
        "ties": int((abs(d) <= 1e-12).sum()),
        "losses": int((d < -1e-12).sum()),
    }


def compare(suite_name: str) -> dict:
    import numpy as np

    from qmdlab.eval.suites import get_suite

    suite = get_suite(suite_name)
    out = {"suite": suite_name, "rows": [], "per_query": {}}
    runs = {}
    for preset in ("offline-mini", "offline-gemma"):
        study, embed_s = _study(suite, preset)
        runs[preset] = _rows(study)
        out[f"{preset}_index_s"] = round(embed_s, 1)
    for row in ("vector", "bm25+vector", TUNED):
        a, b = runs["offline-mini"][row], runs["offline-gemma"][row]
        out["rows"].append({"row": row, **_compare(a, b, "minilm", "embeddinggemma")})
        out["per_query"][row] = {q: {"minilm": a[q], "embeddinggemma": b[q]} for q in sorted(set(a) & set(b))}
    best_without = runs["offline-mini"][TUNED]
    out["against_minilm_tuned"] = [
        {"row": row, **_compare(best_without, runs["offline-gemma"][row], "minilm_tuned", "embeddinggemma")}
        for row in ("bm25+vector", TUNED)
    ]
    out["bm25"] = float(np.mean(list(runs["offline-mini"]["bm25"].values())))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suites", nargs="+")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    for name in args.suites:
        res = compare(name)
        print(
            f"{name}: BM25 {res['bm25']:.4f}; index build with embedding: MiniLM {res['offline_index_s']} s, "
            f"EmbeddingGemma {res['offline-gemma_index_s']} s"
        )
        for r in res["rows"]:
            print(
                f"  {r['row']:<12} MiniLM {r['minilm']:.4f}  EmbeddingGemma {r['embeddinggemma']:.4f}  "
                f"Δ {r['delta']:+.4f}  p {r['p_ttest']:.3g} / {r['p_fisher']:.3g}  "
                f"W/T/L {r['wins']}/{r['ties']}/{r['losses']}  ({r['queries']} queries)"
            )
        for r in res["against_minilm_tuned"]:
            print(
                f"  EmbeddingGemma {r['row']} {r['embeddinggemma']:.4f} vs MiniLM tuned {r['minilm_tuned']:.4f}  "
                f"Δ {r['delta']:+.4f}  p {r['p_ttest']:.3g} / {r['p_fisher']:.3g}  "
                f"W/T/L {r['wins']}/{r['ties']}/{r['losses']}"
            )
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.json").write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""EmbeddingGemma-300M (qmd's embedder, packaged offline) against all-MiniLM-L6-v2 on a labelled suite.

    .venv/bin/python experiments/embeddinggemma/run.py default cisi --out docs/results/embeddinggemma

For each suite, the same judged queries are recorded twice with expansion and rerank off — once
with the offline preset (MiniLM) and once with the offline-gemma preset (EmbeddingGemma) — and
the vector-only and hybrid (qmd's weighted RRF over BM25 + vectors) rows are compared per query:
nDCG@10 of each, the difference, the paired t-test and Fisher randomisation p-value, wins / ties /
losses. Nothing is tuned, so every query is a held-out query. Also recorded: chunks embedded and
seconds spent embedding the suite's index with each model (CPU, this machine). Writes
``<out>/<suite>.json`` (the table and every query's nDCG@10) and prints the table.
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


def _rows(study) -> dict:
    """Per-query nDCG@10 of the BM25, vector-only and hybrid rows of one study (the ablation's rows)."""
    from qmdlab.eval.ablation import variants

    out = {}
    for v in variants(study.config, has_vector=True, has_expansion=False, has_rerank=False):
        if v.name in ("bm25", "vector", "bm25+vector"):
            ev = study.evaluate(study.config.replace(**v.overrides), lists=v.lists)
            out[v.name] = dict(zip(ev.per_query["qid"].to_list(), ev.per_query["ndcg@10"].to_list()))
    return out


def compare(suite_name: str) -> dict:
    import numpy as np

    from qmdlab.eval.significance import paired_pvalues
    from qmdlab.eval.suites import get_suite

    suite = get_suite(suite_name)
    out = {"suite": suite_name, "rows": [], "per_query": {}}
    runs = {}
    for preset in ("offline", "offline-gemma"):
        study, embed_s = _study(suite, preset)
        runs[preset] = _rows(study)
        out[f"{preset}_index_s"] = round(embed_s, 1)
    for row in ("vector", "bm25+vector"):
        a, b = runs["offline"][row], runs["offline-gemma"][row]
        qids = sorted(set(a) & set(b))
        x, y = np.array([a[q] for q in qids]), np.array([b[q] for q in qids])
        p_t, p_f = paired_pvalues(x, y)
        d = y - x
        out["rows"].append(
            {
                "row": row,
                "queries": len(qids),
                "minilm": float(x.mean()),
                "embeddinggemma": float(y.mean()),
                "delta": float(d.mean()),
                "p_ttest": float(p_t),
                "p_fisher": float(p_f),
                "wins": int((d > 1e-12).sum()),
                "ties": int((abs(d) <= 1e-12).sum()),
                "losses": int((d < -1e-12).sum()),
            }
        )
        out["per_query"][row] = {q: {"minilm": a[q], "embeddinggemma": b[q]} for q in qids}
    out["bm25"] = float(np.mean(list(runs["offline"]["bm25"].values())))
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
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.json").write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

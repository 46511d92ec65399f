"""Does trained document expansion (doc2query) raise held-out nDCG@10 over the best configuration without it?

Usage::

    qmdlab train doc2query --suite SUITE --output-dir RUN          # the generator (train-split queries only)
    .venv/bin/python experiments/doc2query/run.py SUITE RUN [--per-chunk 5] [--top-k 20] [--out DIR]

1. Generates ``--per-chunk`` queries per chunk of the suite's index with ``RUN/model.gguf``
   (:func:`qmdlab.pipeline.doc_expand.expand_documents`: cached, resumable), keeps those whose source
   ranks in the BM25 top ``--top-k`` (round trip), and writes the expansions column.
2. Chooses the column's weight on the run's *train* queries (those the generator was trained on; a
   grid, for BM25 alone and for the hybrid pipeline separately).
3. Reports, on the *held-out* queries of ``RUN/splits.json`` only (never seen by the generator), the
   nDCG@10 of BM25 and hybrid without and with the column at the chosen weight, with paired t and
   Fisher randomisation p-values against the same retriever without it. The hybrid without the
   column is the offline default, the measured best configuration without any trained model.

Writes ``results.json`` (every figure, per-query scores, the expansion report) to ``--out``
(default ``RUN/eval``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

WEIGHTS = (0.25, 0.5, 1.0, 2.0, 4.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite")
    ap.add_argument("run", type=Path)
    ap.add_argument("--per-chunk", type=int, default=5)
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    from qmdlab.eval.metrics import per_query
    from qmdlab.eval.record import prepare_index, record
    from qmdlab.eval.significance import paired_pvalues
    from qmdlab.eval.suites import get_suite
    from qmdlab.models import load_models
    from qmdlab.models.doc_query_gen import load_generator
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.pipeline.doc_expand import expand_documents
    from qmdlab.training.leakage import check_no_heldout
    from qmdlab.training.splits import load_splits

    out = args.out or args.run / "eval"
    out.mkdir(parents=True, exist_ok=True)
    suite = get_suite(args.suite)
    split = load_splits(args.run / "splits.json")[suite.name]
    check_no_heldout(split.train, split.heldout, where="doc2query evaluation")
    models = load_models("offline-mini", expand="none", rerank="none", n_threads=args.threads)
    idx = prepare_index(suite, models.embedder, progress=False)
    gguf = args.run / "model.gguf"
    t0 = time.perf_counter()
    report = expand_documents(
        idx, load_generator(str(gguf), n_threads=args.threads), per_chunk=args.per_chunk, top_k=args.top_k
    )
    expand_s = time.perf_counter() - t0
    print(f"expand-docs: {report.summary()}")
    from qmdlab.store import doc_expansions

    generator = doc_expansions.active_generator(idx)

    def column(on: bool) -> None:
        # "without" is the index as it was before expansion: the column emptied, not only
        # unweighted (FTS5's bm25() normalises by the whole row's length)
        doc_expansions.set_active_generator(idx, generator if on else None)

    def scores(cfg, qids) -> dict[str, float]:
        rec = record(suite, models, cfg, qids=list(qids), log=lambda m: None)
        table = per_query(rec.trace.final.rename({"final_rank": "rank"}), rec.qrels, ["ndcg@10"])
        return dict(zip(table["qid"].to_list(), table["ndcg@10"].to_list()))

    mean = lambda d: sum(d.values()) / len(d)  # noqa: E731
    base = PipelineConfig(expand=False, rerank=False)
    legs = {"bm25": base.replace(vector=False), "hybrid": base}
    results: dict = {
        "suite": suite.name,
        "generator": str(gguf),
        "expand": report._asdict(),
        "expand_s": expand_s,
        "train_queries": len(split.train),
        "heldout_queries": len(split.heldout),
        "legs": {},
    }
    print(
        f"{'leg':8s} {'weight':>6s} {'train':>7s} | {'held-out without':>16s} {'with':>7s} {'delta':>7s} "
        f"{'p_t':>6s} {'p_fisher':>8s}  wins/ties/losses"
    )
    for leg, cfg in legs.items():
        column(True)
        tuning = {w: mean(scores(cfg.replace(bm25_weight_doc_queries=w), split.train)) for w in WEIGHTS}
        with_held = {w: scores(cfg.replace(bm25_weight_doc_queries=w), split.heldout) for w in WEIGHTS}
        column(False)
        tuning[0.0] = mean(scores(cfg, split.train))
        without = scores(cfg, split.heldout)
        best = max(tuning, key=lambda w: (tuning[w], -w))
        with_ = with_held[best] if best else dict(without)
        qids = sorted(without)
        a = [without[q] for q in qids]
        b = [with_[q] for q in qids]
        import numpy as np

        p_t, p_f = paired_pvalues(np.array(a), np.array(b))
        wins = sum(y > x for x, y in zip(a, b))
        losses = sum(y < x for x, y in zip(a, b))
        results["legs"][leg] = {
            "train_by_weight": tuning,
            "heldout_by_weight (not used to choose)": {w: mean(d) for w, d in with_held.items()},
            "weight": best,
            "without": mean(without),
            "with": mean(with_),
            "delta": mean(with_) - mean(without),
            "p_ttest": p_t,
            "p_fisher": p_f,
            "wins": wins,
            "ties": len(qids) - wins - losses,
            "losses": losses,
            "per_query": {"without": without, "with": with_},
        }
        print(
            f"{leg:8s} {best:6.2f} {tuning[best]:7.4f} | {mean(without):16.4f} {mean(with_):7.4f} "
            f"{mean(with_) - mean(without):+7.4f} {p_t:6.3f} {p_f:8.3f}  {wins}/{len(qids) - wins - losses}/{losses}"
        )
    column(True)
    idx.close()
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

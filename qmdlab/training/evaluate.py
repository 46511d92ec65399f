"""Evaluate expanders: the rule score on held-out queries and nDCG@10 through the pipeline.

Variants compared on one labelled suite (default: the embedded corpus in ``data/``):

- ``none`` — the pipeline with expansion off (original query only);
- each named expander (``trained``, ``base``, …) — the same pipeline, same embedder, same
  reranker setting, with that expander.

The rule score is :func:`qmdlab.training.reward.score_expansion`, the very function GRPO
optimises. Each variant is recorded through :func:`qmdlab.eval.record.record` (the suite's own
index and the trace cache shared with ``qmdlab eval``), and nDCG@10 is :mod:`qmdlab.eval.metrics`'
(checked against ranx in the tests) on the suite's graded qrels. Results: ``metrics.jsonl`` (one line per variant),
``per_query.jsonl`` and ``README.md`` in ``output_dir``.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qmdlab.errors import ConfigError
from qmdlab.training import rundir
from qmdlab.training.reward import score_expansion


@dataclass
class EvaluateConfig:
    """Configuration of one evaluation (YAML keys = field names)."""

    expander: str | None = field(default=None, metadata={"help": "Trained GGUF (from `train export`)."})
    base_expander: str | None = field(default=None, metadata={"help": "Comparison expander: GGUF path or model ref."})
    suite: str = field(default="data", metadata={"help": "Labelled suite directory (qmdlab.eval.loaders format)."})
    collection: str = field(default="default", metadata={"help": "Collection name the suite's docids live under."})
    index: str = field(
        default="runs/eval-index",
        metadata={
            "help": "Unused: variants are recorded in the suite's own index (qmdlab.eval.record); kept so old configs load."
        },
    )
    examples_file: str | None = field(default=None, metadata={"help": "Held-out examples for the rule score."})
    models_preset: str = field(default="offline-mini", metadata={"help": "Embedder (and reranker) preset."})
    rerank: bool = field(default=False, metadata={"help": "Rerank (slow on CPU; off compares expansion alone)."})
    max_queries: int | None = None
    compare: list[str] = field(
        default_factory=list,
        metadata={"help": "More expanders as NAME=REF (a GGUF path or model ref), e.g. sft=runs/x/sft.gguf."},
    )
    splits_file: str | None = field(
        default=None,
        metadata={"help": "splits.json (qmdlab.training.splits): evaluate only the suite's held-out queries."},
    )
    prompt_qids_file: str | None = field(
        default=None,
        metadata={
            "help": "A GRPO run's prompt_qids.json: evaluation refuses a held-out query that was a training prompt."
        },
    )
    time_queries: int = field(
        default=10,
        metadata={"help": "Held-out queries expanded again without any cache to time each expander (0: skip)."},
    )
    max_rule_queries: int = 40
    n_threads: int = 2
    max_tokens: int = 200
    repeat_penalty: float = field(
        default=1.0, metadata={"help": "llama.cpp's repeat penalty for the expanders' greedy decoding (1.0: off)."}
    )
    output_dir: str = "runs/evaluate"


def suite_rows(suite_dir: str | Path, collection: str) -> list[dict]:
    """``[{"qid", "query", "intent", "qrels": {docno: grade}}]`` for the judged queries of a suite."""
    from qmdlab.eval.loaders import load

    if Path(suite_dir).is_dir():
        data = load(suite_dir)
    else:  # a registered suite name (default, cisi, …)
        from qmdlab.eval.suites import get_suite

        data = get_suite(str(suite_dir)).data()
    import polars as pl

    from qmdlab.eval.metrics import qrels_dict

    qrels = qrels_dict(
        data.qrels.with_columns((pl.lit(f"{collection}/") + pl.col("docid").cast(pl.Utf8)).alias("docno"))
    )
    rows = []
    for r in data.judged_queries().iter_rows(named=True):
        rows.append({"qid": r["qid"], "query": r["query"], "intent": r.get("intent"), "qrels": qrels[r["qid"]]})
    return rows


def ensure_index(index_dir: str | Path, corpus_dir: str | Path, collection: str, embedder, *, batch_size: int = 32):
    """Open ``index_dir``; add ``corpus_dir`` as ``collection`` when missing; update; embed
    chunks lacking vectors for ``embedder`` (resumable)."""
    from qmdlab.eval.record import embed_missing
    from qmdlab.store import Index

    idx = Index.open(str(Path(index_dir).resolve()))
    if collection not in [c.name for c in idx.collections()]:
        idx.add_collection(collection, corpus_dir)
    idx.update([collection])
    if embedder is not None:
        embed_missing(idx, embedder, [collection], progress=False, batch_size=batch_size)
    return idx


def ndcg_table(trace, qrels: dict[str, dict[str, int]]) -> list[dict]:
    """Per-query nDCG@10 (:mod:`qmdlab.eval.metrics`) and the number of kept expansion lines of a trace."""
    import polars as pl

    from qmdlab.eval.metrics import per_query

    judged = pl.DataFrame(
        [{"qid": q, "docno": d, "grade": g} for q, docs in qrels.items() for d, g in docs.items()],
        schema={"qid": pl.Utf8, "docno": pl.Utf8, "grade": pl.Int64},
    )
    scores = per_query(trace.final.rename({"final_rank": "rank"}), judged, ["ndcg@10"])
    kept = trace.expansions.filter(pl.col("kept")).group_by("qid").len()
    table = scores.join(kept, on="qid", how="left").fill_null(0).sort("qid")
    return [{"qid": q, "ndcg@10": v, "n_expansions": int(n)} for q, v, n in table.iter_rows()]


def lab_traces(lab, rows: list[dict], *, expand: bool):
    """The traces of ``rows`` through an injected lab (tests); :func:`qmdlab.eval.record.record` otherwise."""
    from qmdlab.pipeline.trace import Trace

    return Trace.concat([lab.query(r["query"], intent=r.get("intent"), qid=r["qid"], expand=expand) for r in rows])


def rule_scores(expander, queries: list[str]) -> list[dict]:
    """Rule score of the expander's raw output for each query."""
    out = []
    for q in queries:
        res = expander.expand(q)
        s = score_expansion(q, res.raw)
        out.append({"query": q, "score": s.total, "gate": s.gate, "raw": res.raw})
    return out


def build_expander(ref: str, cfg: EvaluateConfig):
    from qmdlab.models.llama_expand import SamplingConfig

    sampling = SamplingConfig(temperature=0.0, max_tokens=cfg.max_tokens, repeat_penalty=cfg.repeat_penalty)
    if ref.endswith(".gguf") and Path(ref).is_file():
        from qmdlab.training.export import load_expander

        return load_expander(ref, sampling=sampling, n_threads=cfg.n_threads)
    from qmdlab.models.registry import build_model

    return build_model("expand", ref, n_threads=cfg.n_threads, sampling=sampling)


def run_evaluate(cfg: EvaluateConfig, *, expanders: dict | None = None, lab_factory=None) -> dict:
    """Score every variant; ``expanders`` (name → expander object) and ``lab_factory``
    (``expander -> Lab``) may be injected (tests)."""
    out = Path(cfg.output_dir)
    rundir.save_config(cfg, out)
    variants = dict(expanders or {})
    if cfg.expander:
        variants.setdefault("trained", build_expander(cfg.expander, cfg))
    if cfg.base_expander:
        variants.setdefault("base", build_expander(cfg.base_expander, cfg))
    for item in cfg.compare:
        name, sep, ref = item.partition("=")
        if not sep or not name.strip() or not ref.strip():
            raise ConfigError(f"--compare {item!r}: expected NAME=REF (e.g. sft=runs/cpu-small/export-sft/x.gguf)")
        variants.setdefault(name.strip(), build_expander(ref.strip(), cfg))
    if not variants:
        raise ConfigError("nothing to evaluate: pass --expander (and optionally --base-expander)")
    rows = sorted(suite_rows(cfg.suite, cfg.collection), key=lambda r: r["qid"])
    heldout = heldout_qids(cfg)
    if heldout is not None:
        rows = [r for r in rows if str(r["qid"]) in heldout]
    if cfg.max_queries:
        rows = rows[: cfg.max_queries]
    qrels = {r["qid"]: r["qrels"] for r in rows}
    if lab_factory is None:
        from qmdlab.eval.record import judged_queries, record, suite_config
        from qmdlab.models import ModelSet, load_models

        suite = _suite(cfg.suite)
        base = load_models(cfg.models_preset, n_threads=cfg.n_threads)
        reranker = base.reranker if cfg.rerank else None
        config = suite_config(suite).replace(rerank=cfg.rerank)
        from qmdlab.eval.metrics import qrels_dict

        qids = [str(r["qid"]) for r in rows]
        # The suite's own docnos (its collection name).
        qrels = qrels_dict(
            suite.qrels_docnos().join(judged_queries(suite, None, qids).select("qid"), on="qid", how="semi")
        )

        def traces_of(expander):
            return record(
                suite,
                ModelSet(base.embedder, expander, reranker),
                config.replace(expand=expander is not None),
                qids=qids,
                log=lambda _m: None,
            ).trace
    else:

        def traces_of(expander):
            return lab_traces(lab_factory(expander), rows, expand=expander is not None)

    results: dict[str, dict[str, Any]] = {}
    per_query: list[dict] = []
    none_rows = ndcg_table(traces_of(None), qrels)
    results["none"] = {
        "ndcg@10": statistics.fmean(r["ndcg@10"] for r in none_rows) if rows else None,
        "n_queries": len(rows),
    }
    per_query += [{"variant": "none", **r} for r in none_rows]
    rule_queries = []
    if cfg.examples_file:
        from qmdlab.training.data import load_examples

        rule_queries = [e.query for e in load_examples(cfg.examples_file)][: cfg.max_rule_queries]
    for name, expander in variants.items():
        table = ndcg_table(traces_of(expander), qrels)
        per_query += [{"variant": name, **r} for r in table]
        res: dict[str, Any] = {
            "ndcg@10": statistics.fmean(r["ndcg@10"] for r in table) if rows else None,
            "n_queries": len(rows),
        }
        if rows:
            from qmdlab.eval.significance import paired_pvalues

            res["delta_vs_none"] = res["ndcg@10"] - results["none"]["ndcg@10"]
            res["wins"] = sum(a["ndcg@10"] > b["ndcg@10"] for a, b in zip(table, none_rows))
            res["losses"] = sum(a["ndcg@10"] < b["ndcg@10"] for a, b in zip(table, none_rows))
            assert [a["qid"] for a in table] == [b["qid"] for b in none_rows], "paired tests need the same queries"
            res["p_t"], res["p_fisher"] = paired_pvalues(
                np.array([b["ndcg@10"] for b in none_rows]), np.array([a["ndcg@10"] for a in table])
            )
        if cfg.time_queries and rows:
            res["s_per_query"] = seconds_per_query(expander, [r["query"] for r in rows[: cfg.time_queries]])
        if rule_queries:
            rs = rule_scores(expander, rule_queries)
            res["rule_score"] = statistics.fmean(r["score"] for r in rs)
            res["gate_failures"] = sum(r["gate"] is not None for r in rs)
            per_query += [{"variant": name, "rule": r} for r in rs]
        results[name] = res
    for name, res in results.items():
        rundir.append_metrics(out, {"stage": "evaluate", "variant": name, **res})
    with (out / "per_query.jsonl").open("w", encoding="utf-8") as fh:
        for r in per_query:
            fh.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")
    scope = "held-out" if heldout is not None else "judged"
    rundir.write_model_card(
        out,
        "Expander evaluation",
        f"Suite `{cfg.suite}` ({len(rows)} {scope} queries), "
        f"rerank {'on' if cfg.rerank else 'off'}, preset `{cfg.models_preset}`.\n\n" + format_results(results),
    )
    return results


def format_results(results: dict) -> str:
    """The markdown table of :func:`run_evaluate`'s results (one row per variant).

    >>> print(format_results({"none": {"ndcg@10": 0.5, "n_queries": 2},
    ...                       "x": {"ndcg@10": 0.6, "delta_vs_none": 0.1, "wins": 1, "losses": 0, "p_t": 0.5,
    ...                             "p_fisher": 0.49, "s_per_query": 0.8}}))
    | variant | nDCG@10 | Δ vs none | p (t / Fisher) | W/L | s/query | rule score |
    |---|---|---|---|---|---|---|
    | none | 0.5000 | — | — | — | — | — |
    | x | 0.6000 | +0.1000 | 0.500 / 0.490 | 1/0 | 0.80 | — |
    """
    fmt = lambda v, f="{:.4f}": "—" if v is None else f.format(v)  # noqa: E731
    lines = [
        "| variant | nDCG@10 | Δ vs none | p (t / Fisher) | W/L | s/query | rule score |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        wl = f"{r['wins']}/{r['losses']}" if "wins" in r else "—"
        p = f"{r['p_t']:.3f} / {r['p_fisher']:.3f}" if "p_t" in r else "—"
        lines.append(
            f"| {name} | {fmt(r.get('ndcg@10'))} | {fmt(r.get('delta_vs_none'), '{:+.4f}')} | {p} | {wl} | "
            f"{fmt(r.get('s_per_query'), '{:.2f}')} | {fmt(r.get('rule_score'))} |"
        )
    return "\n".join(lines)


def heldout_qids(cfg: EvaluateConfig) -> set[str] | None:
    """The suite's held-out qids from ``splits_file`` (None without one), checked against the GRPO
    run's prompts when ``prompt_qids_file`` is given (:class:`qmdlab.training.leakage.LeakError` on overlap)."""
    if not cfg.splits_file:
        return None
    from qmdlab.training.leakage import check_no_heldout
    from qmdlab.training.splits import load_splits, tag

    name = _suite(cfg.suite).name
    splits = load_splits(cfg.splits_file)
    if name not in splits:
        raise ConfigError(f"{cfg.splits_file} has no split for suite {name!r} (it has {sorted(splits)})")
    held = set(splits[name].heldout)
    if cfg.prompt_qids_file:
        try:
            prompts = json.loads(Path(cfg.prompt_qids_file).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(
                f"--prompt_qids_file {cfg.prompt_qids_file} does not exist (GRPO writes prompt_qids.json "
                "in its output_dir when training starts; pass that file, or drop the flag)"
            ) from None
        check_no_heldout(prompts, {tag(name, q) for q in held}, where=f"the GRPO prompts of {cfg.prompt_qids_file}")
    return held


def seconds_per_query(expander, queries: list[str]) -> float | None:
    """Mean wall seconds of one uncached expansion (the expander object itself, never the LLM cache)."""
    import time

    inner = getattr(expander, "inner", expander)  # a CachedExpander wraps the model
    if not queries or not hasattr(inner, "expand"):
        return None
    inner.expand(queries[0])  # load / warm up
    t0 = time.perf_counter()
    for q in queries:
        inner.expand(q)
    return (time.perf_counter() - t0) / len(queries)


def _suite(path: str):
    """The suite of ``path``; the repository's ``data/`` is the registered ``default`` suite (so the
    trace cache is shared with ``qmdlab eval default`` and ``make demo``)."""
    from qmdlab.eval.suites import get_suite

    default = get_suite("default")
    if Path(path).resolve() == default.path.resolve():
        return default
    return get_suite(path)


def main(argv: list[str] | None = None) -> dict:
    """``python -m qmdlab.training.evaluate [--config evaluate.yaml] [--field value ...]``."""
    from qmdlab.training.config import parse_args

    return run_evaluate(parse_args(EvaluateConfig, argv))


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=1))

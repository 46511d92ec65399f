"""Evaluate expanders: the rule score on held-out queries and nDCG@10 through the pipeline.

Variants compared on one labelled suite (default: the embedded corpus in ``data/``):

- ``none`` — the pipeline with expansion off (original query only);
- each named expander (``trained``, ``base``, …) — the same pipeline, same embedder, same
  reranker setting, with that expander.

The rule score is :func:`training.reward.score_expansion`, the very function GRPO
optimises. nDCG@10 uses the suite's graded qrels (:func:`training.reward.ndcg_at_k`,
checked against ranx in the tests). Results: ``metrics.jsonl`` (one line per variant),
``per_query.jsonl`` and ``README.md`` in ``output_dir``.
"""
from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from qmdlab.errors import ConfigError

from training import common
from training.reward import ndcg_at_k, score_expansion


@dataclass
class EvaluateConfig:
    """Configuration of one evaluation (YAML keys = field names)."""

    expander: str | None = field(default=None, metadata={"help": "Trained GGUF (from `train export`)."})
    base_expander: str | None = field(default=None, metadata={"help": "Comparison expander: GGUF path or model ref."})
    suite: str = field(default="data", metadata={"help": "Labelled suite directory (eval.loaders format)."})
    collection: str = field(default="default", metadata={"help": "Collection name the suite's docids live under."})
    index: str = field(default="runs/eval-index", metadata={"help": "Index dir (built from the suite if empty)."})
    examples_file: str | None = field(default=None, metadata={"help": "Held-out examples for the rule score."})
    models_preset: str = field(default="offline", metadata={"help": "Embedder (and reranker) preset."})
    rerank: bool = field(default=False, metadata={"help": "Rerank (slow on CPU; off compares expansion alone)."})
    max_queries: int | None = None
    max_rule_queries: int = 40
    n_threads: int = 2
    max_tokens: int = 200
    output_dir: str = "runs/evaluate"


def suite_rows(suite_dir: str | Path, collection: str) -> list[dict]:
    """``[{"qid", "query", "intent", "qrels": {docno: grade}}]`` for the judged queries of a suite."""
    from eval.loaders import load

    data = load(suite_dir)
    qrels: dict[str, dict[str, int]] = {}
    for qid, docid, grade in data.qrels.iter_rows():
        qrels.setdefault(qid, {})[f"{collection}/{docid}"] = int(grade)
    rows = []
    for r in data.judged_queries().iter_rows(named=True):
        rows.append({"qid": r["qid"], "query": r["query"], "intent": r.get("intent"), "qrels": qrels[r["qid"]]})
    return rows


def ensure_index(index_dir: str | Path, corpus_dir: str | Path, collection: str, embedder, *, batch_size: int = 32):
    """Open ``index_dir``; add ``corpus_dir`` as ``collection`` when missing; update; embed
    chunks lacking vectors for ``embedder`` (resumable)."""
    from qmdlab.store import Index

    idx = Index.open(str(Path(index_dir).resolve()))
    if collection not in [c.name for c in idx.collections()]:
        idx.add_collection(collection, corpus_dir)
    idx.update([collection])
    if embedder is not None:
        todo = idx.chunks_needing_vectors(embedder.fingerprint, [collection])
        ids, titles, texts = todo["chunk_id"].to_list(), todo["title"].fill_null("").to_list(), todo["text"].to_list()
        for i in range(0, len(ids), batch_size):
            mat = embedder.embed_documents(list(zip(titles[i:i + batch_size], texts[i:i + batch_size])))
            idx.store_vectors(ids[i:i + batch_size], mat, embedder.fingerprint)
    return idx


def ranking(trace) -> list[str]:
    return trace.final.sort("final_rank")["docno"].to_list()


def ndcg_table(lab, rows: list[dict], *, expand: bool) -> list[dict]:
    """Per-query nDCG@10 (and the kept expansion lines) for one lab."""
    out = []
    for r in rows:
        trace = lab.query(r["query"], intent=r.get("intent"), qid=r["qid"], expand=expand)
        exp = trace.expansions
        kept = exp.filter(exp["kept"])["text"].to_list() if exp.height else []
        out.append({"qid": r["qid"], "ndcg@10": ndcg_at_k(ranking(trace), r["qrels"], 10), "n_expansions": len(kept)})
    return out


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

    sampling = SamplingConfig(temperature=0.0, max_tokens=cfg.max_tokens)
    if ref.endswith(".gguf") and Path(ref).is_file():
        from training.export import load_expander

        return load_expander(ref, sampling=sampling, n_threads=cfg.n_threads)
    from qmdlab.models.registry import build_model

    return build_model("expand", ref, n_threads=cfg.n_threads, sampling=sampling)


def run_evaluate(cfg: EvaluateConfig, *, expanders: dict | None = None, lab_factory=None) -> dict:
    """Score every variant; ``expanders`` (name → expander object) and ``lab_factory``
    (``expander -> Lab``) may be injected (tests)."""
    out = Path(cfg.output_dir)
    common.save_config(cfg, out)
    variants = dict(expanders or {})
    if cfg.expander:
        variants.setdefault("trained", build_expander(cfg.expander, cfg))
    if cfg.base_expander:
        variants.setdefault("base", build_expander(cfg.base_expander, cfg))
    if not variants:
        raise ConfigError("nothing to evaluate: pass --expander (and optionally --base-expander)")
    rows = suite_rows(cfg.suite, cfg.collection)
    if cfg.max_queries:
        rows = rows[: cfg.max_queries]
    if lab_factory is None:
        from qmdlab.models import ModelSet, load_models
        from qmdlab.pipeline.lab import Lab

        from eval.loaders import load

        base = load_models(cfg.models_preset, n_threads=cfg.n_threads)
        corpus = load(cfg.suite).corpus_dir
        idx = ensure_index(cfg.index, corpus, cfg.collection, base.embedder)
        reranker = base.reranker if cfg.rerank else None

        def lab_factory(expander):
            lab = Lab(idx, ModelSet(base.embedder, expander, reranker))
            lab.config = lab.config.replace(rerank=cfg.rerank)
            return lab

    results, per_query = {}, []
    none_rows = ndcg_table(lab_factory(None), rows, expand=False)
    results["none"] = {"ndcg@10": statistics.fmean(r["ndcg@10"] for r in none_rows) if rows else None,
                       "n_queries": len(rows)}
    per_query += [{"variant": "none", **r} for r in none_rows]
    rule_queries = []
    if cfg.examples_file:
        from training.data import load_examples

        rule_queries = [e.query for e in load_examples(cfg.examples_file)][: cfg.max_rule_queries]
    for name, expander in variants.items():
        table = ndcg_table(lab_factory(expander), rows, expand=True)
        per_query += [{"variant": name, **r} for r in table]
        res = {"ndcg@10": statistics.fmean(r["ndcg@10"] for r in table) if rows else None, "n_queries": len(rows)}
        if rows:
            res["delta_vs_none"] = res["ndcg@10"] - results["none"]["ndcg@10"]
            res["wins"] = sum(a["ndcg@10"] > b["ndcg@10"] for a, b in zip(table, none_rows))
            res["losses"] = sum(a["ndcg@10"] < b["ndcg@10"] for a, b in zip(table, none_rows))
        if rule_queries:
            rs = rule_scores(expander, rule_queries)
            res["rule_score"] = statistics.fmean(r["score"] for r in rs)
            res["gate_failures"] = sum(r["gate"] is not None for r in rs)
            per_query += [{"variant": name, "rule": r} for r in rs]
        results[name] = res
    for name, res in results.items():
        common.append_metrics(out, {"stage": "evaluate", "variant": name, **res})
    with (out / "per_query.jsonl").open("w", encoding="utf-8") as fh:
        for r in per_query:
            fh.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")
    lines = ["| variant | nDCG@10 | Δ vs none | wins/losses | rule score |", "|---|---|---|---|---|"]
    for name, r in results.items():
        fmt = lambda v: "—" if v is None else f"{v:.4f}"  # noqa: E731
        wl = f"{r['wins']}/{r['losses']}" if "wins" in r else "—"
        lines.append(f"| {name} | {fmt(r.get('ndcg@10'))} | {fmt(r.get('delta_vs_none'))} | {wl} | "
                     f"{fmt(r.get('rule_score'))} |")
    common.write_model_card(out, "Expander evaluation", f"Suite `{cfg.suite}` ({len(rows)} judged queries), "
                            f"rerank {'on' if cfg.rerank else 'off'}, preset `{cfg.models_preset}`.\n\n"
                            + "\n".join(lines))
    return results


def main(argv: list[str] | None = None) -> dict:
    """``python -m training.evaluate [--config evaluate.yaml] [--field value ...]``."""
    from trl import TrlParser

    (cfg,) = TrlParser((EvaluateConfig,)).parse_args_and_config(argv)
    return run_evaluate(cfg)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=1))

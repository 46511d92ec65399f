"""SciFact with its official split: every untrained configuration and every trainer, fitted on the
809 training claims and scored once on the 300 test claims.

    .venv/bin/python experiments/scifact/run.py --out docs/results/scifact --work runs/scifact

Stages (``--stages``, default all, each resumable: a finished stage's JSON is read back):

- ``untrained`` — MiniLM (the offline-mini preset), expansion and rerank off: BM25, vectors, and the
  hybrid under every fusion method; nothing fitted, scored on the test claims.
- ``tuned`` — the hybrid's fusion knobs tuned on the training claims (``qmdlab tune``'s space and
  search), scored on the test claims: the best configuration without a trained model.
- ``learned`` — LightGBM lambdarank fusion fitted on the training claims (``qmdlab tune --learn``).
- ``embedder`` — MiniLM fine-tuned on the training claims (``qmdlab train embedder --labelled``:
  MultipleNegativesRankingLoss, negatives drawn from the baseline hybrid's ranking), then the hybrid
  with it, its fusion tuned on the training claims as for the untrained row.
- ``reranker`` — the MiniLM cross-encoder trained on the training claims' hybrid candidates
  (``qmdlab train reranker --suite scifact``), calibrated and blended on held-back training claims.
- ``expander`` — the query expander of ``make train-scifact-expander`` (SmolLM2-135M, SFT then GRPO
  on the training claims; ``--expander-run``), each exported GGUF plugged into the hybrid as
  ``--expand-model`` would, recorded on the test claims with the recipe's own sampling (so the
  recipe's evaluation traces are reused), under qmd_rrf and under the fusion chosen on the training
  claims; each row is also compared with the same fusion without expansion.
- ``gemma`` — the ``offline-gemma`` preset's embedder (EmbeddingGemma-300M, untrained) in place of
  MiniLM: its vectors, the hybrid under every fusion method, and its fusion chosen and tuned on the
  training claims — a candidate for the best untrained configuration.
- ``gemma-learned`` — LightGBM lambdarank fusion fitted on the training claims over EmbeddingGemma's
  lists (the ``gemma`` stage's recordings): a trained part on the best untrained embedder.
- ``doc2query`` — the document → query generator of ``qmdlab train doc2query --suite scifact``
  (SmolLM2-135M LoRA on (abstract → training claim) pairs; ``--d2q-run``, trained here when it is
  missing), ``--d2q-per-chunk`` queries generated for every abstract and kept by the round trip
  (``qmdlab expand-docs``), the doc-queries column's weight chosen on the training claims for BM25 and
  for the hybrid, and the hybrid's fusion tuned on the training claims with the column in place;
  each row is also compared with the same configuration without the column. The column is emptied
  again at the end, so the other stages' recordings stay valid.

- ``default`` — the default preset's embedder (EmbeddingGemma-300M, the Q8_0 file qmd uses) as the
  ``gemma`` stage runs the f16 file: its vectors, the hybrid under every fusion method, its fusion
  chosen and tuned on the training claims.
- ``adapter`` — a query adapter (``qmdlab train adapter --suite scifact``: a linear map of the query
  vector, fitted on the training claims against the stored document vectors, nothing re-embedded) on
  the default embedder: its vectors, and the hybrid with its fusion chosen and tuned on the training
  claims.
- ``gemma-embedder`` — the default embedder itself fine-tuned on the training claims (``qmdlab train
  embedder --labelled true --base pkg:embeddinggemma-300m --outtype q8_0``: the MiniLM recipe with
  EmbeddingGemma's prompts, batch 8, one epoch, checkpoints every 10 steps so a stopped run resumes),
  converted to a Q8_0 GGUF and the corpus re-embedded through llama.cpp: its vectors, the hybrid under
  qmd_rrf, its fusion chosen and tuned on the training claims; then a query adapter fitted on top of it
  as the ``adapter`` stage fits one on the packaged file.

Every row is compared per test claim with the best untrained row (paired t-test, Fisher
randomisation, wins/ties/losses). Writes ``<out>/scifact.json`` (rows, comparisons, per-claim
nDCG@10, costs) and ``<out>/runs/<untrained|trained>-<row>.trec`` (top 100, SciFact's ids), so
anyone can re-score them against ``qrels/test.tsv``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
METRICS = ("ndcg@10", "recall@100")
STAGES = (
    "untrained",
    "tuned",
    "learned",
    "embedder",
    "reranker",
    "expander",
    "doc2query",
    "gemma",
    "gemma-learned",
    "default",
    "adapter",
    "gemma-embedder",
)
#: Weights of the doc-queries column tried on the training claims (0: the column emptied).
DOC_QUERY_WEIGHTS = (0.25, 0.5, 1.0, 2.0, 4.0)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _study(suite, embedder, name: str):
    """All judged claims (train and test) recorded with ``embedder``, expansion and rerank off."""
    from qmdlab.eval.record import record, suite_config
    from qmdlab.eval.study import Study
    from qmdlab.models.base import ModelSet

    cfg = suite_config(suite).replace(expand=False, rerank=False)
    rec = record(suite, ModelSet(embedder, None, None), cfg, name=name, progress=True, log=_log)
    return Study.from_recording(rec, metrics=list(METRICS)), rec


def _row(name: str, final, study, test, out: Path, suite, kind: str) -> dict:
    """Score ``final`` (qid, docno, final_rank, final_score) on the test claims and write its run."""
    import polars as pl

    from qmdlab.eval.runfiles import write_trec_run

    final = final.filter(pl.col("qid").is_in(list(test)) & (pl.col("final_rank") <= 100))
    pq = study.scorer.score(final.rename({"final_rank": "rank"})).filter(pl.col("qid").is_in(list(test)))
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9_.]+", "-", name.replace("+", " plus ")).strip("-")
    fname = f"{kind}-{slug}.trec"
    write_trec_run(final, runs / fname, f"{kind}-{name}", suite.docid)
    return {
        "row": name,
        "kind": kind,
        "queries": pq.height,
        **{m: float(pq[m].mean()) for m in METRICS},
        "run": f"runs/{fname}",
        "per_query": dict(zip(pq["qid"].to_list(), pq["ndcg@10"].to_list())),
    }


def untrained(suite, out: Path) -> list[dict]:
    from qmdlab.eval.ablation import variants
    from qmdlab.models import load_models
    from qmdlab.pipeline.config import FUSION_METHODS

    study, _ = _study(suite, load_models("offline-mini", expand="none", rerank="none").embedder, "scifact-minilm")
    test = suite.split.test
    rows = []
    for v in variants(study.config, has_vector=True, has_expansion=False, has_rerank=False):
        if v.name in ("bm25", "vector"):
            ev = study.evaluate(study.config.replace(**v.overrides), lists=v.lists)
            rows.append(_row(v.name, ev.final, study, test, out, suite, "untrained"))
    for m in FUSION_METHODS:
        ev = study.evaluate(study.config.replace(fusion=m))
        rows.append(_row(f"hybrid {m}", ev.final, study, test, out, suite, "untrained"))
    return rows


def _tune(study, suite, out: Path, name: str, kind: str) -> list[dict]:
    """The best configuration without a trained model, chosen on the training claims only: the fusion
    method with the best training nDCG@10, then its knobs tuned on the training claims (the one
    official fold of ``qmdlab tune``); a row for each, scored on the test claims."""
    from qmdlab.eval.optimise import cross_validate, default_space
    from qmdlab.pipeline.config import FUSION_METHODS

    t0 = time.perf_counter()
    train, test = study.subset(suite.split.train), suite.split.test
    on_train = {m: train.score(study.config.replace(fusion=m), "ndcg@10") for m in FUSION_METHODS}
    method = max(on_train, key=lambda m: (on_train[m], m == study.config.fusion))
    chosen = study.config.replace(fusion=method)
    row = _row(
        f"{name}: {method} (chosen on train)", study.subset(test).evaluate(chosen).final, study, test, out, suite, kind
    )
    row["train_ndcg@10"] = on_train
    report = cross_validate(study, base=chosen, space=default_space(chosen), metric="ndcg@10", progress=_log)
    final = study.subset(test).evaluate(report.config).final
    tuned_row = _row(f"{name}: {method}, knobs tuned on train", final, study, test, out, suite, kind)
    tuned_row["changed"] = str(report.config.diff(chosen))
    tuned_row["fit_s"] = row["fit_s"] = round(time.perf_counter() - t0, 1)
    return [row, tuned_row]


def tuned(suite, out: Path) -> list[dict]:
    from qmdlab.models import load_models

    study, _ = _study(suite, load_models("offline-mini", expand="none", rerank="none").embedder, "scifact-minilm")
    return _tune(study, suite, out, "hybrid fusion", "untrained")


def gemma(suite, out: Path) -> list[dict]:
    from qmdlab.eval.ablation import variants
    from qmdlab.models import load_models
    from qmdlab.pipeline.config import FUSION_METHODS

    embedder = load_models("offline-gemma", expand="none", rerank="none").embedder
    study, _ = _study(suite, embedder, "scifact-gemma")
    test = suite.split.test
    rows = []
    for v in variants(study.config, has_vector=True, has_expansion=False, has_rerank=False):
        if v.name == "vector":
            ev = study.evaluate(study.config.replace(**v.overrides), lists=v.lists)
            rows.append(_row("EmbeddingGemma vector", ev.final, study, test, out, suite, "untrained"))
    for m in FUSION_METHODS:
        ev = study.evaluate(study.config.replace(fusion=m))
        rows.append(_row(f"EmbeddingGemma hybrid {m}", ev.final, study, test, out, suite, "untrained"))
    return rows + _tune(study, suite, out, "EmbeddingGemma hybrid fusion", "untrained")


def _vector_and_fusions(study, suite, out: Path, name: str, kind: str, every_fusion: bool) -> list[dict]:
    """The vector-only row and the hybrid under every fusion method (``every_fusion``) on the test claims,
    then the fusion chosen and tuned on the training claims (:func:`_tune`)."""
    from qmdlab.eval.ablation import variants
    from qmdlab.pipeline.config import FUSION_METHODS

    test = suite.split.test
    rows = []
    for v in variants(study.config, has_vector=True, has_expansion=False, has_rerank=False):
        if v.name == "vector":
            ev = study.evaluate(study.config.replace(**v.overrides), lists=v.lists)
            rows.append(_row(f"{name} vector", ev.final, study, test, out, suite, kind))
    for m in FUSION_METHODS if every_fusion else ():
        ev = study.evaluate(study.config.replace(fusion=m))
        rows.append(_row(f"{name} hybrid {m}", ev.final, study, test, out, suite, kind))
    return rows + _tune(study, suite, out, f"{name} hybrid fusion", kind)


def default_embedder(suite, out: Path) -> list[dict]:
    from qmdlab.models import load_models

    study, _ = _study(suite, load_models("offline", expand="none", rerank="none").embedder, "scifact-gemma-q8")
    return _vector_and_fusions(study, suite, out, "EmbeddingGemma Q8_0", "untrained", every_fusion=True)


def adapter(suite, out: Path, work: Path, args) -> list[dict]:
    from qmdlab.models import load_models
    from qmdlab.models.adapter import adapted
    from qmdlab.training.adapter import AdapterRunConfig, run_adapter

    run = work / "adapter"
    t0 = time.perf_counter()
    report = run_adapter(
        AdapterRunConfig(out=str(run), suite="scifact", preset="offline", n_threads=args.threads), _log
    )
    fit_s = round(time.perf_counter() - t0, 1)
    embedder = adapted(load_models("offline", expand="none", rerank="none").embedder, run)
    study, _ = _study(suite, embedder, "scifact-gemma-q8-adapter")
    rows = _vector_and_fusions(study, suite, out, "EmbeddingGemma Q8_0 + query adapter", "trained", every_fusion=False)
    for r in rows:
        r.update(adapter_fit_s=fit_s, adapter=str(run), adapter_report=json.loads(json.dumps(report, default=str)))
    return rows


def gemma_embedder(suite, out: Path, work: Path, args) -> list[dict]:
    from qmdlab.models.adapter import adapted
    from qmdlab.training.adapter import AdapterRunConfig, run_adapter
    from qmdlab.training.embedder import EmbedderRunConfig, encoder_profile, gguf_embedder, run_embedder

    run = (work / "embedder-gemma").resolve()
    t0 = time.perf_counter()
    # a finished run (report.json beside its GGUF) is reused; otherwise it is trained, or resumed from
    # its last checkpoint, here
    report_file = run / "report.json"
    if not (report_file.is_file() and (run / "model.gguf").is_file()):
        run_embedder(
            EmbedderRunConfig(
                suite="scifact",
                labelled=True,
                base="pkg:embeddinggemma-300m",
                preset="offline",
                outtype="q8_0",
                out=str(run),
                hard_negatives=args.hard_negatives,
                epochs=args.epochs,
                batch_size=8,
                save_steps=10,
                evaluate=False,
                n_threads=args.threads,
                progress=False,
            ),
            log=_log,
        )
    report = json.loads(report_file.read_text())
    profile = encoder_profile(report["model_dir"]).at("q8_0")
    tuned = gguf_embedder(run / "model.gguf", profile)
    study, _ = _study(suite, tuned, "scifact-gemma-q8-tuned")
    rows = _vector_and_fusions(study, suite, out, "fine-tuned EmbeddingGemma Q8_0", "trained", every_fusion=False)
    ev = study.evaluate(study.config)
    rows.append(
        _row("fine-tuned EmbeddingGemma Q8_0 hybrid qmd_rrf", ev.final, study, suite.split.test, out, suite, "trained")
    )
    train = {k: report.get(k) for k in ("pairs", "queries", "steps", "train_loss", "train_s", "seconds")}
    for r in rows:
        r.update(train=train, train_and_index_s=round(time.perf_counter() - t0, 1))

    t1 = time.perf_counter()
    adapter_run = work / "adapter-on-tuned-gemma"
    run_adapter(
        AdapterRunConfig(
            out=str(adapter_run), suite="scifact", embed_model=str(run / "model.gguf"), n_threads=args.threads
        ),
        _log,
    )
    fit_s = round(time.perf_counter() - t1, 1)
    study, _ = _study(suite, adapted(tuned, adapter_run), "scifact-gemma-q8-tuned-adapter")
    both = _vector_and_fusions(
        study, suite, out, "fine-tuned EmbeddingGemma Q8_0 + query adapter", "trained", every_fusion=False
    )
    for r in both:
        r.update(train=train, adapter_fit_s=fit_s)
    return rows + both


def learned(suite, out: Path, preset: str = "offline-mini", name: str = "learned fusion") -> list[dict]:
    from qmdlab.eval.learn import LearnConfig, cross_validate_learned, suite_docs
    from qmdlab.models import load_models

    run = {"offline-mini": "scifact-minilm", "offline-gemma": "scifact-gemma"}[preset]
    study, _ = _study(suite, load_models(preset, expand="none", rerank="none").embedder, run)
    study.docs = suite_docs(suite)
    t0 = time.perf_counter()
    report = cross_validate_learned(study, cfg=LearnConfig(), metric="ndcg@10", progress=_log)
    row = _row(name, report.heldout_final, study, suite.split.test, out, suite, "trained")
    row["fit_s"] = round(time.perf_counter() - t0, 1)
    return [row]


def gemma_learned(suite, out: Path) -> list[dict]:
    return learned(suite, out, "offline-gemma", "EmbeddingGemma + learned fusion")


def embedder(suite, out: Path, work: Path, args) -> list[dict]:
    from qmdlab.eval.ablation import variants
    from qmdlab.training.embedder import EmbedderRunConfig, gguf_embedder, run_embedder

    t0 = time.perf_counter()
    res = run_embedder(
        EmbedderRunConfig(
            suite="scifact",
            labelled=True,
            out=str(work / "embedder"),
            hard_negatives=args.hard_negatives,
            negative_depth=20,
            epochs=args.epochs,
            batch_size=args.batch_size,
            learning_rate=2e-5,
            evaluate=False,
            n_threads=args.threads,
            progress=False,
        ),
        log=_log,
    )
    train_s = time.perf_counter() - t0
    study, _ = _study(suite, gguf_embedder(Path(res["gguf"])), "scifact-minilm-tuned")
    test = suite.split.test
    rows = []
    ev = study.evaluate(study.config)
    for v in variants(study.config, has_vector=True, has_expansion=False, has_rerank=False):
        if v.name == "vector":
            vec = study.evaluate(study.config.replace(**v.overrides), lists=v.lists)
            rows.append(_row("fine-tuned MiniLM vector", vec.final, study, test, out, suite, "trained"))
    rows.append(_row("fine-tuned MiniLM hybrid qmd_rrf", ev.final, study, test, out, suite, "trained"))
    rows += _tune(study, suite, out, "fine-tuned MiniLM hybrid fusion", "trained")
    # both trained parts at once: learned fusion over the trained embedder's lists
    from qmdlab.eval.learn import LearnConfig, cross_validate_learned, suite_docs

    study.docs = suite_docs(suite)
    report = cross_validate_learned(study, cfg=LearnConfig(), metric="ndcg@10", progress=_log)
    rows.append(_row("fine-tuned MiniLM + learned fusion", report.heldout_final, study, test, out, suite, "trained"))
    for r in rows:
        r["train"] = {
            k: res.get(k) for k in ("pairs", "queries", "steps", "train_loss", "train_s", "no_negatives", "seconds")
        }
        r["train_and_index_s"] = round(train_s, 1)
    return rows


def reranker(suite, out: Path, work: Path, args) -> list[dict]:
    import polars as pl

    from qmdlab.training.reranker import RerankerRunConfig, run_reranker

    t0 = time.perf_counter()
    run = work / "reranker"
    res = run_reranker(
        RerankerRunConfig(
            suite="scifact",
            out=str(run),
            candidates=args.candidates,
            weak=False,
            score_weak=False,
            epochs=args.rerank_epochs,
            list_size=args.list_size,
            lists_per_query=1,
            n_threads=args.threads,
            progress=False,
        ),
        log=_log,
    )
    seconds = time.perf_counter() - t0
    per_query = pl.read_parquet(run / "heldout_per_query.parquet")
    rows = []
    for name in sorted(per_query["run"].unique().to_list()):
        if name == "fused":
            continue
        pq = per_query.filter(pl.col("run") == name)
        src = run / f"{name}-heldout.trec"
        dest = out / "runs" / f"trained-cross-encoder-{name}.trec"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
        rows.append(
            {
                "row": f"cross-encoder {name}",
                "kind": "trained",
                "queries": pq.height,
                **{m: float(pq[m].mean()) for m in METRICS if m in pq.columns},
                "run": f"runs/{dest.name}",
                "per_query": dict(zip(pq["qid"].to_list(), pq["ndcg@10"].to_list())),
                "train_s": round(seconds, 1),
                "auc": res.get("auc"),
            }
        )
    return rows


def expander(suite, out: Path, work: Path, args) -> list[dict]:
    import polars as pl

    from qmdlab.eval.record import record, suite_config
    from qmdlab.eval.significance import paired_comparison
    from qmdlab.eval.study import Study
    from qmdlab.models import ModelSet, load_models
    from qmdlab.training.config import load_config
    from qmdlab.training.cpu_run import stage_seconds
    from qmdlab.training.evaluate import EvaluateConfig, build_expander

    run = Path(args.expander_run)
    summary = run / "summary.json"
    if not summary.is_file():
        raise SystemExit(f"{summary}: no finished expander run; run `make train-scifact-expander` first")
    recipe = json.loads(summary.read_text(encoding="utf-8"))
    ecfg = load_config(EvaluateConfig, str(run / "evaluate" / "scifact" / "config.yaml"))
    base = load_models(ecfg.models_preset, n_threads=ecfg.n_threads)
    test = sorted(suite.split.test)
    config = suite_config(suite).replace(rerank=False)
    none = Study.from_recording(
        record(suite, ModelSet(base.embedder, None, None), config.replace(expand=False), qids=test, log=_log),
        metrics=list(METRICS),
    )
    tuned_rows = (
        json.loads((out / "scifact.json").read_text(encoding="utf-8"))["stages"].get("tuned", {}).get("rows", [])
    )
    chosen = next((r["row"].split(": ")[1].split(" ")[0] for r in tuned_rows if "chosen on train" in r["row"]), None)
    fusions = ["qmd_rrf"] + ([chosen] if chosen and chosen != "qmd_rrf" else [])
    costs = {k: v for k, v in stage_seconds(run).items()}
    rows = []
    for variant, path in recipe["models"].items():
        label = {"sft": "expander SFT", "sft+grpo": "expander SFT+GRPO"}.get(variant, f"expander {variant}")
        exp = build_expander(path, ecfg)
        rec = record(suite, ModelSet(base.embedder, exp, None), config.replace(expand=True), qids=test, log=_log)
        study = Study.from_recording(rec, metrics=list(METRICS))
        for fusion in fusions:
            row = _row(
                f"{label} hybrid {fusion}",
                study.evaluate(config.replace(fusion=fusion)).final,
                study,
                test,
                out,
                suite,
                "trained",
            )
            without = none.evaluate(config.replace(expand=False, fusion=fusion)).final
            pq = none.scorer.score(without.rename({"final_rank": "rank"}))
            baseline = dict(zip(pq["qid"].to_list(), pq["ndcg@10"].to_list()))
            row["against_no_expansion"] = {
                "fusion": fusion,
                "ndcg@10": float(pl.Series(list(baseline.values())).mean()),
                **paired_comparison(baseline, row["per_query"]),
            }
            row["train_s"] = {k: costs.get(k) for k in ("synth", "sft", "grpo", "export_sft", "export_grpo")}
            row["s_per_query"] = recipe["evaluate"]["scifact"].get(variant, {}).get("s_per_query")
            rows.append(row)
    return rows


def _untrained_row(out: Path, name: str) -> dict | None:
    """The row ``name`` of an earlier untrained or tuned stage of ``<out>/scifact.json``, if any."""
    store = out / "scifact.json"
    if not store.is_file():
        return None
    stages = json.loads(store.read_text(encoding="utf-8"))["stages"]
    return next((r for st in stages.values() for r in st["rows"] if r["row"] == name), None)


def doc2query(suite, out: Path, work: Path, args) -> list[dict]:
    from qmdlab.eval.ablation import variants
    from qmdlab.eval.record import prepare_index, record, suite_config
    from qmdlab.eval.significance import paired_comparison
    from qmdlab.eval.study import Study
    from qmdlab.models import ModelSet, load_models
    from qmdlab.models.doc_query_gen import load_generator
    from qmdlab.pipeline.doc_expand import expand_documents
    from qmdlab.store import doc_expansions
    from qmdlab.training.doc2query import Doc2QueryRunConfig, run_doc2query
    from qmdlab.training.leakage import check_no_heldout
    from qmdlab.training.splits import load_splits

    run = Path(args.d2q_run)
    res = run_doc2query(
        Doc2QueryRunConfig(
            suite="scifact",
            out=str(run),
            max_steps=args.d2q_steps,
            max_heading_pairs=0,
            n_threads=args.threads,
        ),
        log=_log,
    )
    split = load_splits(run / "splits.json")["scifact"]
    # the generator's split is the official one: it read training claims only
    check_no_heldout(split.train, suite.split.test, where="scifact doc2query generator")
    assert set(split.train) <= set(suite.split.train), "the generator read a claim outside the training split"
    models = load_models("offline-mini", expand="none", rerank="none", n_threads=args.threads)
    idx = prepare_index(suite, models.embedder, progress=False, log=_log)
    t0 = time.perf_counter()
    report = expand_documents(
        idx,
        load_generator(str(run / "model.gguf"), n_threads=args.threads),
        per_chunk=args.d2q_per_chunk,
        top_k=20,
        on_progress=lambda done, total: _log(f"doc2query: {done}/{total} chunks") if done % 256 == 0 else None,
    )
    expand_s = time.perf_counter() - t0
    _log(f"expand-docs: {report.summary()}")
    # the raw output names the generator relative to the working directory, not this machine's path
    here = f"{Path.cwd().resolve()}/"
    generator = (doc_expansions.active_generator(idx) or "").replace(here, "")
    status = doc_expansions.status(idx)
    train, test = sorted(suite.split.train), sorted(suite.split.test)
    embedder = ModelSet(models.embedder, None, None)
    base = suite_config(suite).replace(expand=False, rerank=False)
    recorded: dict[float, object] = {}

    def study(weight: float):
        """Every judged claim recorded with the column at ``weight`` (train and test: the cache is per
        claim; only the training claims choose anything)."""
        if weight not in recorded:
            cfg = base.replace(bm25_weight_doc_queries=weight)
            rec = record(suite, embedder, cfg, qids=train + test, log=_log)
            recorded[weight] = Study.from_recording(rec, metrics=list(METRICS))
        return recorded[weight]

    bm25_only = next(
        v for v in variants(base, has_vector=True, has_expansion=False, has_rerank=False) if v.name == "bm25"
    )
    rows = []
    cost = {
        "generator": {k: res.get(k) for k in ("pairs", "label_pairs", "steps", "train_loss", "train_s", "seconds")},
        "expand": {**report._asdict(), "generator": generator},
        "expand_s": round(expand_s, 1),
        "column": {"documents": status.documents, "kept": status.kept},
    }
    try:
        for leg, overrides, lists, untrained_name in (
            ("BM25", bm25_only.overrides, bm25_only.lists, "bm25"),
            ("hybrid qmd_rrf", {}, None, "hybrid qmd_rrf"),
        ):
            tried = {
                w: study(w).subset(train).score(base.replace(bm25_weight_doc_queries=w, **overrides), "ndcg@10", lists)
                for w in DOC_QUERY_WEIGHTS
            }
            weight = max(tried, key=lambda w: (tried[w], -w))
            st = study(weight)
            # the recorded config (its limit is the recording depth, so the run file keeps the top 100)
            chosen = st.config.replace(**overrides)
            ev = st.subset(test).evaluate(chosen, lists=lists)
            row = _row(
                f"doc2query column {leg} (weight {weight:g}, chosen on train)",
                ev.final,
                st,
                test,
                out,
                suite,
                "trained",
            )
            row["train_ndcg@10_by_weight"] = tried
            compared = [(row, untrained_name)]
            if lists is None:
                # the column at its weight, then the fusion chosen and tuned on the training claims as
                # for the untrained bar
                tuned_rows = _tune(st, suite, out, f"doc2query column (weight {weight:g}) hybrid fusion", "trained")
                compared += [(r, "hybrid fusion: " + r["row"].split(" hybrid fusion: ")[1]) for r in tuned_rows]
            for r, name in compared:
                without = _untrained_row(out, name)
                if without is not None:
                    r["against_without"] = {
                        "row": without["row"],
                        **paired_comparison(without["per_query"], r["per_query"]),
                    }
                rows.append(r)
    finally:
        # the column emptied again (its stored queries stay): the other stages' recordings keyed on
        # the index without it stay valid
        doc_expansions.set_active_generator(idx, None)
        idx.close()
    for r in rows:
        r.update(cost, generator=generator)
    return rows


def _compare(best: dict, row: dict) -> dict:
    from qmdlab.eval.significance import paired_comparison

    return {"row": row["row"], "against": best["row"], **paired_comparison(best["per_query"], row["per_query"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "scifact")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "scifact", help="Training run folders.")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"Comma-separated, of {', '.join(STAGES)}.")
    ap.add_argument("--epochs", type=float, default=1.0, help="Embedder epochs over the training pairs.")
    ap.add_argument("--batch-size", type=int, default=32, help="Embedder pairs per step (in-batch negatives).")
    ap.add_argument("--hard-negatives", type=int, default=1, help="Embedder hard negatives per pair.")
    ap.add_argument("--rerank-epochs", type=float, default=1.0, help="Cross-encoder epochs.")
    ap.add_argument("--candidates", type=int, default=20, help="Hybrid candidates the cross-encoder reranks.")
    ap.add_argument("--list-size", type=int, default=8, help="Candidates per training list of the cross-encoder.")
    ap.add_argument("--threads", type=int, default=2, help="Torch CPU threads for training.")
    ap.add_argument(
        "--expander-run",
        type=Path,
        default=REPO / "runs" / "scifact-expander",
        help="A finished `make train-scifact-expander` run (the expander stage scores its exports).",
    )
    ap.add_argument(
        "--d2q-run",
        type=Path,
        default=REPO / "runs" / "scifact" / "doc2query",
        help="The doc2query generator's run folder (trained there when it holds no finished run).",
    )
    ap.add_argument("--d2q-steps", type=int, default=80, help="Generator training steps (batch 8).")
    ap.add_argument("--d2q-per-chunk", type=int, default=2, help="Queries generated per abstract.")
    ap.add_argument("--markdown", action="store_true", help="Also print the tables as Markdown.")
    args = ap.parse_args(argv)

    from qmdlab.eval.suites import get_suite

    suite = get_suite("scifact")
    suite.check()
    split = suite.split
    _log(
        f"scifact: {len(split.train)} training claims ({len(split.dropped)} more left out: their text is a test "
        f"claim's), {len(split.test)} test claims"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "scifact.json"
    data = json.loads(store.read_text()) if store.is_file() else {"stages": {}}
    for stage in [s.strip() for s in args.stages.split(",") if s.strip()]:
        if stage not in STAGES:
            ap.error(f"--stages: unknown stage {stage!r}; choose from {', '.join(STAGES)}")
        if stage in data["stages"]:
            _log(f"{stage}: done earlier (delete it from {store} to run it again)")
            continue
        t0 = time.perf_counter()
        if stage in ("embedder", "reranker", "expander", "doc2query", "adapter", "gemma-embedder"):
            trainers = {
                "embedder": embedder,
                "reranker": reranker,
                "expander": expander,
                "doc2query": doc2query,
                "adapter": adapter,
                "gemma-embedder": gemma_embedder,
            }
            rows = trainers[stage](suite, args.out, args.work, args)
        else:
            rows = {
                "untrained": untrained,
                "tuned": tuned,
                "learned": learned,
                "gemma": gemma,
                "gemma-learned": gemma_learned,
                "default": default_embedder,
            }[stage](suite, args.out)
        data["stages"][stage] = {"rows": rows, "seconds": round(time.perf_counter() - t0, 1)}
        store.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    rows = [r for st in data["stages"].values() for r in st["rows"]]
    untrained_rows = [r for r in rows if r["kind"] == "untrained"]
    # the bar: the best untrained configuration as chosen on the training claims (of the rows whose fusion
    # was chosen there, the embedder and fusion that scored best on those claims; no test claim is looked at),
    # and — a harder bar, chosen by looking at the test claims — the best untrained row on test
    chosen = [r for r in untrained_rows if "(chosen on train)" in r["row"]]
    bars = {}
    if chosen:
        bars["chosen on train"] = max(chosen, key=lambda r: max(r["train_ndcg@10"].values()))
    if untrained_rows:
        bars["best on test"] = max(untrained_rows, key=lambda r: r["ndcg@10"])
    data["bars"] = {k: b["row"] for k, b in bars.items()}
    data["comparisons"] = {
        k: [_compare(b, r) for r in rows if r is not b and (r["kind"] == "trained" or k == "chosen on train")]
        for k, b in bars.items()
    }
    data["split"] = {"train": len(split.train), "dropped": list(split.dropped), "test": len(split.test)}
    store.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"{'row':<58} {'kind':<10} {'n':>4} {'nDCG@10':>8} {'R@100':>7}")
    for r in rows:
        print(f"{r['row']:<58} {r['kind']:<10} {r['queries']:>4} {r['ndcg@10']:>8.4f} {r.get('recall@100', 0):>7.4f}")
    for k, b in bars.items():
        print(f"\nagainst the best untrained row {k} ({b['row']}, {b['ndcg@10']:.4f}):")
        for c in data["comparisons"][k]:
            print(
                f"  {c['row']:<58} Δ {c['delta']:+.4f}  p(t) {c['p_ttest']:.3g}  p(F) {c['p_fisher']:.3g}  "
                f"W/T/L {c['wins']}/{c['ties']}/{c['losses']}"
            )
    if args.markdown:
        print("\n" + markdown(data, rows))
    return 0


def markdown(data: dict, rows: list[dict]) -> str:
    """The rows and the paired comparisons as the Markdown tables of the results page."""
    lines = ["| row | kind | nDCG@10 | recall@100 | run file |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['row']} | {r['kind']} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} | `{r['run']}` |")
    for k, comps in data.get("comparisons", {}).items():
        bar = data["bars"][k]
        lines += ["", f"Against the best untrained row {k} ({bar}):", ""]
        lines += ["| row | Δ nDCG@10 | p (t) | p (Fisher) | W/T/L |", "|---|---|---|---|---|"]
        for c in comps:
            lines.append(
                f"| {c['row']} | {c['delta']:+.4f} | {c['p_ttest']:.3g} | {c['p_fisher']:.3g} | "
                f"{c['wins']}/{c['ties']}/{c['losses']} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""Run a suite through the pipeline: index, embed, query every judged query, score, save.

:func:`run_suite` does, for one :class:`eval.suites.Suite`:

1. writes inline documents as markdown under ``$QMDLAB_HOME/eval/<suite>/corpus`` (SMART,
   BEIR, …), builds/updates the suite's own index ``$QMDLAB_HOME/eval/<suite>/index`` and
   embeds chunks that lack vectors for the current embedder;
2. runs every judged query through :class:`qmdlab.Lab` with a progress bar. Each query's
   trace is cached as parquet under ``$QMDLAB_HOME/eval/<suite>/traces/<key>/<qid>/``, the
   key hashing the config, the model fingerprints and the suite's content, so an interrupted
   run resumes where it stopped and a repeated run costs nothing;
3. scores the ``final`` table against the qrels (:mod:`eval.metrics`) and, with
   ``ablate=True``, every row of :mod:`eval.ablation` cut from the same traces;
4. saves into the results directory (``--out DIR``, default
   ``$QMDLAB_HOME/eval/<suite>/results/<run-name>``): ``<run>.trec`` per run (collection ids:
   ``qid Q0 docid rank score run``), ``qrels.txt`` (collection ids, TREC format),
   ``metrics.json`` (``{run: {metric: mean}}``), ``per_query.parquet``, ``ablation.csv``,
   ``config.yaml``, ``run.json`` (suite, models, timings) and the concatenated trace under
   ``traces/`` (what :meth:`eval.study.Study.from_run_dir` loads).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence
from urllib.parse import quote

import polars as pl

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.trace import Trace

from .metrics import DEFAULT_METRICS, mean_scores, per_query
from .suites import Suite


EVAL_DEPTH = 100
"""Results kept per query in evaluation runs (``PipelineConfig.limit`` is raised to this)."""


class RunResult(NamedTuple):
    """What :func:`run_suite` produced.

    Attributes
    ----------
    name : str
        Name of the main run.
    trace : Trace
        Concatenated trace of every judged query.
    qrels : pl.DataFrame
        ``qid, docno, grade`` (qmdlab docnos).
    per_query : pl.DataFrame
        ``run, qid, <metrics>`` for the main run and every ablation row.
    metrics : dict
        ``{run: {metric: mean}}``.
    ablation : pl.DataFrame or None
        The :func:`eval.ablation.ablate` table.
    out_dir : Path
    timings : dict
        Seconds spent indexing, embedding, querying (with the number of queries from cache).
    """

    name: str
    trace: Trace
    qrels: pl.DataFrame
    per_query: pl.DataFrame
    metrics: dict
    ablation: pl.DataFrame | None
    out_dir: Path
    timings: dict


def prepare_index(suite: Suite, embedder: Any = None, *, progress: bool = True, batch_size: int = 32,
                  log: Callable[[str], None] = print):
    """Write/refresh the suite corpus, update the suite's index and embed missing chunks."""
    from qmdlab.store import Index

    suite.write_corpus()
    idx = Index.open(suite.workdir() / "index")
    root = suite.corpus_dir().resolve()
    existing = {c.name: c for c in idx.collections()}
    if suite.collection in existing and Path(existing[suite.collection].root).resolve() != root:
        idx.remove_collection(suite.collection)
        existing.pop(suite.collection)
    if suite.collection not in existing:
        idx.add_collection(suite.collection, root)
    report = idx.update([suite.collection], progress=progress)
    log(f"index {idx.dir}: {report.summary() if hasattr(report, 'summary') else report}")
    if embedder is not None:
        n = embed_missing(idx, embedder, [suite.collection], progress=progress, batch_size=batch_size)
        if n:
            log(f"embedded {n} chunks with {embedder.model_id}")
    return idx


def embed_missing(idx, embedder, collections: Sequence[str] | None = None, *, progress: bool = True,
                  batch_size: int = 32) -> int:
    """Embed the chunks of ``collections`` that have no vector for ``embedder`` (resumable: one
    transaction per batch). Returns the number of chunks embedded."""
    from tqdm import tqdm

    todo = idx.chunks_needing_vectors(embedder.fingerprint, list(collections) if collections else None)
    n = todo.height
    if not n:
        return 0
    ids, titles, texts = todo["chunk_id"].to_list(), todo["title"].fill_null("").to_list(), todo["text"].to_list()
    with tqdm(total=n, unit="chunk", desc="embed", disable=not progress) as bar:
        for i in range(0, n, batch_size):
            mat = embedder.embed_documents(list(zip(titles[i:i + batch_size], texts[i:i + batch_size])))
            idx.store_vectors(ids[i:i + batch_size], mat, embedder.fingerprint)
            bar.update(len(mat))
    return n


def _fingerprint(model: Any) -> str:
    return "none" if model is None else str(getattr(model, "fingerprint", None) or getattr(model, "model_id", type(model).__name__))


def cache_key(suite: Suite, config: PipelineConfig, models: Any) -> str:
    """Hash of everything a query's trace depends on: suite content, config, model fingerprints
    and the trace schema (a new trace column invalidates old caches)."""
    embedder, expander, reranker = models if models is not None else (None, None, None)
    from qmdlab.pipeline.trace import SCHEMAS

    schema = {t: {c: str(d) for c, d in cols.items()} for t, cols in SCHEMAS.items()}
    payload = json.dumps({"suite": suite.fingerprint(), "config": config.to_dict(), "schema": schema,
                          "models": [_fingerprint(m) for m in (embedder, expander, reranker)]}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def run_name(config: PipelineConfig, config_path: str | Path | None = None) -> str:
    """A readable name for the main run.

    >>> run_name(PipelineConfig(expand=False, rerank=False), "tuned.yaml")
    'qmdlab-no-expand-no-rerank-tuned'
    """
    name = "qmdlab"
    if not config.expand:
        name += "-no-expand"
    if not config.rerank:
        name += "-no-rerank"
    if config_path:
        name += "-" + Path(config_path).stem
    return name


def query_traces(suite: Suite, lab, queries: pl.DataFrame, cache_dir: Path, *, progress: bool = True) -> tuple[Trace, int]:
    """Run (or load from ``cache_dir``) the trace of every query; returns the concatenation and
    how many came from the cache."""
    with _no_query_budget():
        return _query_traces(suite, lab, queries.to_dicts(), cache_dir, progress)


@contextlib.contextmanager
def _no_query_budget():
    """Lift the interactive per-query time budget (``QMDLAB_QUERY_BUDGET_MS``), which skips the
    rerank of slow queries, for the length of an evaluation run — unless the caller set it.
    An evaluation measures the configured pipeline, not the latency guard."""
    key = "QMDLAB_QUERY_BUDGET_MS"
    if os.environ.get(key):
        yield
        return
    os.environ[key] = "1e15"
    try:
        yield
    finally:
        os.environ.pop(key, None)


def _query_traces(suite: Suite, lab, rows: list[dict], cache_dir: Path, progress: bool) -> tuple[Trace, int]:
    from tqdm import tqdm

    traces, cached = [], 0
    with tqdm(rows, desc=f"{suite.name} queries", unit="q", disable=not progress) as bar:
        for r in bar:
            qdir = cache_dir / quote(str(r["qid"]), safe="")
            loaded = None
            if (qdir / "lists.parquet").exists() and (qdir / "DONE").exists():
                try:
                    loaded = Trace.from_parquet(qdir)
                except (ValueError, OSError, pl.exceptions.PolarsError):  # unreadable: run again
                    loaded = None
            if loaded is not None:
                traces.append(loaded)
                cached += 1
            else:
                t = lab.query(r["query"], intent=r.get("intent") or None, qid=str(r["qid"]))
                tmp = qdir.with_name(qdir.name + ".tmp")
                shutil.rmtree(tmp, ignore_errors=True)
                t.to_parquet(tmp)
                if not degraded_queries(t).height:  # a degraded trace is kept but re-run next time
                    (tmp / "DONE").write_text("", encoding="utf-8")
                shutil.rmtree(qdir, ignore_errors=True)
                tmp.rename(qdir)
                traces.append(t)
            bar.set_postfix(cached=cached, refresh=False)
    return Trace.concat(traces), cached


_DEGRADED = r"(?i)skipped|failed|budget|degrad|could not"


def degraded_queries(trace: Trace) -> pl.DataFrame:
    """Notes (``qid, stage, message``) saying a stage was skipped or failed for a reason other
    than the config switching it off — e.g. the query time budget skipping rerank, an expander
    error. Such queries were not measured under the config the run claims.

    >>> from qmdlab.pipeline.trace import Trace
    >>> notes = pl.DataFrame({"qid": ["1", "2"], "stage": ["rerank", "rerank"],
    ...     "message": ["rerank disabled: fusion order kept", "query time budget used up before rerank: rerank skipped"]})
    >>> degraded_queries(Trace(notes=notes))["qid"].to_list()
    ['2']
    """
    expected = r"(?i)disabled|^strong signal|^no embedder"  # the config or the model set asked for it
    return trace.notes.filter(pl.col("message").str.contains(_DEGRADED)
                              & ~pl.col("message").str.contains(expected)).select("qid", "stage", "message")


def write_trec_run(final: pl.DataFrame, path: Path, name: str, docid: Callable[[str], str]) -> None:
    """Write ``final`` (``qid, docno, final_rank, final_score``) as a TREC run with collection ids.

    Scores are made strictly decreasing within a query (a tie is lowered by 1e-9 per place) so
    that tools which re-sort by score (trec_eval, ranx) keep the pipeline's order.
    """
    lines = []
    for (qid,), part in final.sort(["qid", "final_rank"]).group_by("qid", maintain_order=True):
        prev = None
        for pos, (docno, score) in enumerate(part.select("docno", "final_score").iter_rows(), start=1):
            score = float(score) if score is not None else 0.0
            if prev is not None and score >= prev:
                score = prev - 1e-9
            prev = score
            lines.append(f"{qid} Q0 {docid(docno)} {pos} {score:.9f} {name}")
    path.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")


def run_suite(suite: Suite, models: Any = None, config: PipelineConfig | None = None, *,
              out: str | Path | None = None, name: str | None = None, ablate: bool = False,
              baseline: str = "best-leg", metrics: Sequence[str] = DEFAULT_METRICS, limit: int | None = None,
              progress: bool = True, complete_rerank: bool = True, check_ranx: bool = True,
              log: Callable[[str], None] = print) -> RunResult:
    """Index, run, score and save one suite (see the module notes).

    Parameters
    ----------
    suite : Suite
    models : qmdlab.models.ModelSet, optional
        ``(embedder, expander, reranker)``; missing roles skip their stage.
    config : PipelineConfig, optional
    out : path, optional
        Results directory (default ``$QMDLAB_HOME/eval/<suite>/results/<name>``).
    ablate : bool
        Also evaluate the ablation matrix from the same traces.
    baseline : str
        Ablation baseline row (``best-leg`` = the better of bm25/vector).
    limit : int, optional
        Only the first ``limit`` judged queries (smoke runs).
    complete_rerank : bool
        During the ablation, rerank candidates that a fusion/blend row newly promotes (model
        calls, cached) instead of leaving them unscored.
    check_ranx : bool
        Re-score the saved main run file with ``ranx.evaluate`` (from ``qrels.txt`` and the
        ``.trec`` file, collection ids) and fail loudly if it disagrees with our metrics.
    """
    from qmdlab.pipeline.lab import Lab

    from .ablation import ablate as ablate_fn
    from .study import Study

    config = config or PipelineConfig()
    name = name or run_name(config)
    # Record up to EVAL_DEPTH results so recall@100 is defined; ``limit`` only truncates the
    # finished list, so every metric at 10 is unchanged (the pipeline still returns at most
    # ``candidate_limit`` documents: recall@100 is the recall of the candidate pool).
    config = config.replace(limit=max(config.limit, EVAL_DEPTH))
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    embedder = models[0] if models is not None else None
    idx = prepare_index(suite, embedder if config.vector else None, progress=progress, log=log)
    timings["index_s"] = time.perf_counter() - t0
    queries = suite.data().judged_queries().sort("qid")
    if limit:
        queries = queries.head(limit)
    qrels = suite.qrels_docnos().join(queries.select("qid"), on="qid", how="semi")
    lab = Lab(idx, models, config)
    cache_dir = suite.workdir() / "traces" / cache_key(suite, config, models)
    t1 = time.perf_counter()
    trace, cached = query_traces(suite, lab, queries, cache_dir, progress=progress)
    timings["query_s"] = time.perf_counter() - t1
    timings["queries"], timings["queries_cached"] = queries.height, cached
    degraded = degraded_queries(trace)
    if degraded.height:
        log(f"warning: {degraded['qid'].n_unique()} of {queries.height} queries ran degraded (a stage was skipped "
            f"or failed; see degraded.csv), e.g. {degraded['qid'][0]}: {degraded['message'][0]}")

    out_dir = Path(out) if out else suite.workdir() / "results" / name
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = {name: per_query(trace.final.rename({"final_rank": "rank"}), qrels, metrics)}
    finals = {name: trace.final}
    table = None
    if ablate:
        t2 = time.perf_counter()
        rfn = lab.rerank_fn(trace, config) if complete_rerank and models is not None and models[2] is not None else None
        study = Study(trace, qrels, metrics=metrics, config=config, rerank_fn=rfn)
        table = ablate_fn(study, baseline=baseline)
        from .ablation import variants

        for v in variants(config, has_vector=bool(trace.lists.filter(pl.col("source") == "vec").height),
                          has_expansion=bool(trace.lists.filter(pl.col("query_type") != "original").height),
                          has_rerank=bool(trace.rerank.height)):
            ev = study.evaluate(config.replace(**v.overrides), lists=v.lists)
            runs[v.name], finals[v.name] = ev.per_query, ev.final
        trace = study.trace  # with any rerank scores the ablation added
        timings["ablation_s"] = time.perf_counter() - t2
    # -- save -----------------------------------------------------------------------------
    for run, final in finals.items():
        write_trec_run(final, out_dir / f"{_file_safe(run)}.trec", _file_safe(run), suite.docid)
    qrels_c = suite.data().qrels.join(queries.select("qid"), on="qid", how="semi")
    (out_dir / "qrels.txt").write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in qrels_c.iter_rows()), encoding="utf-8")
    means = {run: mean_scores(t) for run, t in runs.items()}
    ranx_means = ranx_check(out_dir / "qrels.txt", out_dir / f"{_file_safe(name)}.trec", means[name]) \
        if check_ranx else None
    (out_dir / "metrics.json").write_text(json.dumps(means, indent=1), encoding="utf-8")
    pq = pl.concat([t.with_columns(pl.lit(r).alias("run")).select("run", *t.columns) for r, t in runs.items()])
    pq.write_parquet(out_dir / "per_query.parquet")
    if table is not None:
        table.write_csv(out_dir / "ablation.csv")
    degraded.write_csv(out_dir / "degraded.csv")
    import yaml

    (out_dir / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")
    shutil.rmtree(out_dir / "traces", ignore_errors=True)
    trace.to_parquet(out_dir / "traces")
    qrels.write_parquet(out_dir / "qrels.parquet")
    info = {"suite": suite.name, "path": str(suite.path), "format": suite.format, "run": name,
            "models": [_fingerprint(m) for m in (models or (None, None, None))], "timings": timings,
            "trace_cache": str(cache_dir), "ranx_check": ranx_means,
            "degraded_queries": degraded["qid"].n_unique()}
    (out_dir / "run.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
    return RunResult(name, trace, qrels, pq, means, table, out_dir, timings)


RANX_NAMES = {"p": "precision"}


def ranx_check(qrels_path: Path, run_path: Path, ours: dict[str, float]) -> dict[str, float]:
    """``ranx.evaluate`` of a saved run file against saved qrels; raises if any metric differs
    from ``ours`` by more than 1e-9 (that would be a bug in :mod:`eval.metrics` or the writer)."""
    from ranx import Qrels, Run, evaluate

    from .metrics import parse_metric

    names = {m: (RANX_NAMES.get(parse_metric(m).kind, parse_metric(m).kind)
                 + (f"@{parse_metric(m).k}" if parse_metric(m).k else "")) for m in ours}
    qrels = Qrels.from_file(str(qrels_path), kind="trec")
    if run_path.stat().st_size == 0:
        return {m: 0.0 for m in ours}
    run = Run.from_file(str(run_path), kind="trec")
    theirs = evaluate(qrels, run, list(names.values()), make_comparable=True)
    theirs = theirs if isinstance(theirs, dict) else {next(iter(names.values())): theirs}
    out = {m: float(theirs[r]) for m, r in names.items()}
    bad = {m: (ours[m], out[m]) for m in ours if abs(ours[m] - out[m]) > 1e-9}
    if bad:
        raise RuntimeError(f"metrics disagree with ranx on {run_path.name}: {bad}")
    return out


def _file_safe(run: str) -> str:
    """Run names as file names / TREC run tags (no spaces, slashes or ``+``).

    >>> _file_safe("fusion=qmd_rrf"), _file_safe("+lex+vec"), _file_safe("bm25+vector")
    ('fusion=qmd_rrf', 'plus_lex_plus_vec', 'bm25_plus_vector')
    """
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", run.replace("+", " plus ")).strip("_")


def load_run_dir(directory: str | Path) -> tuple[Trace, pl.DataFrame, PipelineConfig]:
    """``(trace, qrels, config)`` of a results directory written by :func:`run_suite`."""
    from qmdlab.errors import QmdlabError

    d = Path(directory)
    if not (d / "qrels.parquet").exists():
        raise QmdlabError(f"{d}: not a qmdlab eval results directory (no qrels.parquet); run `qmdlab eval` first")
    trace = Trace.from_parquet(d / "traces")
    config = PipelineConfig.from_yaml(d / "config.yaml") if (d / "config.yaml").exists() else PipelineConfig()
    return trace, pl.read_parquet(d / "qrels.parquet"), config

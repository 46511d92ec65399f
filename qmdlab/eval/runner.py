"""Run a suite through the pipeline: index, embed, query every judged query, score, save.

:func:`run_suite` does, for one :class:`qmdlab.eval.suites.Suite`:

1.–2. :func:`qmdlab.eval.record.record` — index and embed the suite, run every judged query through
   :class:`qmdlab.Lab` (or load its trace from the per-query cache under
   ``$QMDLAB_HOME/eval/<suite>/traces/<key>/``), at :data:`qmdlab.eval.record.EVAL_DEPTH`;
3. scores the ``final`` table against the qrels (:mod:`qmdlab.eval.metrics`) and, with
   ``ablate=True``, every row of :mod:`qmdlab.eval.ablation` cut from the same traces;
4. saves into the results directory (``--out DIR``, default
   ``$QMDLAB_HOME/eval/<suite>/results/<run-name>``): ``<run>.trec`` per run (collection ids:
   ``qid Q0 docid rank score run``), ``qrels.txt`` (collection ids, TREC format),
   ``metrics.json`` (``{run: {metric: mean}}``), ``per_query.parquet``, ``ablation.csv``,
   ``config.yaml``, ``run.json`` (suite, models, timings) and the concatenated trace under
   ``traces/`` (what :meth:`qmdlab.eval.study.Study.from_run_dir` loads).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from qmdlab.errors import import_extra
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.trace import Trace

from .ablation import ablate as ablate_fn
from .ablation import chunker_evaluations, strong_signal_qids, variant_evaluations, variants
from .metrics import DEFAULT_METRICS, mean_scores, parse_metric, per_query
from .record import (
    degraded_queries,
    embed_missing,  # noqa: F401 — re-exported
    model_fingerprints,
    record,
)
from .runfiles import file_safe, write_trec_run
from .study import Study
from .suites import Suite


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
        The :func:`qmdlab.eval.ablation.ablate` table.
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


def run_suite(
    suite: Suite,
    models: Any = None,
    config: PipelineConfig | None = None,
    *,
    out: str | Path | None = None,
    name: str | None = None,
    ablate: bool = False,
    baseline: str = "best-leg",
    metrics: Sequence[str] = DEFAULT_METRICS,
    limit: int | None = None,
    progress: bool = True,
    complete_rerank: bool = True,
    check_ranx: bool = True,
    log: Callable[[str], None] = print,
    remote: Callable | None = None,
    chunkers: Sequence[str] = (),
    recorded_variants: Sequence[str] = (),
    all_queries: bool = False,
) -> RunResult:
    """Index, run, score and save one suite (see the module notes).

    Parameters
    ----------
    suite, models, config
        What :func:`~qmdlab.eval.record.record` records (``config`` default: ``PipelineConfig()``).
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
    remote : callable, optional
        Computes the uncached traces elsewhere (``qmdlab eval --ray``; see :func:`qmdlab.eval.record.record`).
    chunkers : sequence of str
        With ``ablate``: a ``chunker=<c>`` row per chunker, each from its own index and recording
        (:func:`qmdlab.eval.ablation.chunker_evaluations`).
    all_queries : bool
        Record every judged query. By default a suite with an official split (SciFact) records and
        scores its ``test`` queries only, the figures it reports; tuning records both sides and fits ``train``.
    recorded_variants : sequence of str
        With ``ablate``: a row per recorded variant (names of :data:`qmdlab.eval.ablation.RECORDED_VARIANTS`,
        ``qmdlab eval --variants``), each the same queries recorded with the variant's config overrides
        (:func:`qmdlab.eval.ablation.variant_evaluations`).
    """
    config = config or PipelineConfig()
    name = name or run_name(config)
    qids = None if all_queries else suite.report_qids()
    if qids is not None:
        log(f"suite {suite.name}: scoring its official test split ({len(qids)} queries; tuning and training use train)")
    rec = record(suite, models, config, limit=limit, qids=qids, name=name, progress=progress, log=log, remote=remote)
    config, trace, qrels, queries, timings = rec.config, rec.trace, rec.qrels, rec.queries, dict(rec.timings)
    degraded = degraded_queries(trace)
    if degraded.height:
        log(
            f"warning: {degraded['qid'].n_unique()} of {queries.height} queries ran degraded (a stage was skipped "
            f"or failed; see degraded.csv), e.g. {degraded['qid'][0]}: {degraded['message'][0]}"
        )

    out_dir = Path(out) if out else suite.workdir() / "results" / name
    out_dir.mkdir(parents=True, exist_ok=True)
    if config.fusion == "learned":
        log(
            "note: fusion=learned scores whatever it is given; on the queries its model was trained on these are "
            "in-sample numbers (`qmdlab tune SUITE --learn` reports held-out ones)"
        )
    runs = {name: per_query(trace.final.rename({"final_rank": "rank"}), qrels, metrics)}
    finals = {name: trace.final}
    table = None
    if ablate:
        t2 = time.perf_counter()
        docs = None
        if config.fusion == "learned":  # the learned fuser's per-document features (title, headings, length)
            from .learn import suite_docs

            docs = suite_docs(suite)
        study = Study.from_recording(rec, metrics=metrics, complete_rerank=complete_rerank, docs=docs)
        chunk_rows = (
            chunker_evaluations(study, suite, models, chunkers, progress=progress, log=log, remote=remote)
            if chunkers
            else {}
        )
        variant_rows = (
            variant_evaluations(study, suite, models, recorded_variants, progress=progress, log=log, remote=remote)
            if recorded_variants
            else {}
        )
        table = ablate_fn(study, baseline=baseline, chunkers=chunk_rows, recorded=variant_rows)
        for row, ev in [*chunk_rows.items(), *((r, v.evaluation) for r, v in variant_rows.items())]:
            runs[row], finals[row] = ev.per_query, ev.final
        for v in variants(
            config,
            has_vector=bool(trace.lists.filter(pl.col("source") == "vec").height),
            has_expansion=bool(trace.lists.filter(pl.col("query_type") != "original").height),
            has_rerank=bool(trace.rerank.height),
            # recorded with the skip off: the "strong-signal skip" row measures it
            skip_qids=None if config.strong_signal else strong_signal_qids(trace.notes),
        ):
            ev = study.evaluate(config.replace(**v.overrides), lists=v.lists)
            runs[v.name], finals[v.name] = ev.per_query, ev.final
        trace = study.trace  # with any rerank scores the ablation added
        timings["ablation_s"] = time.perf_counter() - t2
    # -- save -----------------------------------------------------------------------------
    for run, final in finals.items():
        write_trec_run(final, out_dir / f"{file_safe(run)}.trec", file_safe(run), suite.docid)
    qrels_c = suite.data().qrels.join(queries.select("qid"), on="qid", how="semi")
    (out_dir / "qrels.txt").write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in qrels_c.iter_rows()), encoding="utf-8")
    means = {run: mean_scores(t) for run, t in runs.items()}
    t_ranx = time.perf_counter()
    ranx_means = (
        ranx_check(out_dir / "qrels.txt", out_dir / f"{file_safe(name)}.trec", means[name]) if check_ranx else None
    )
    timings["ranx_check_s"] = time.perf_counter() - t_ranx  # numba compiles ranx's metrics on a first use
    (out_dir / "metrics.json").write_text(json.dumps(means, indent=1), encoding="utf-8")
    pq = pl.concat([t.with_columns(pl.lit(r).alias("run")).select("run", *t.columns) for r, t in runs.items()])
    pq.write_parquet(out_dir / "per_query.parquet")
    if table is not None:
        table.write_csv(out_dir / "ablation.csv")
    degraded.write_csv(out_dir / "degraded.csv")
    import yaml

    grades_note = suite.grades_note() if hasattr(suite, "grades_note") else "grades: gain (as coded)"
    (out_dir / "config.yaml").write_text(
        f"# suite {suite.name} ({suite.format}), {grades_note}\n" + yaml.safe_dump(config.to_dict(), sort_keys=False),
        encoding="utf-8",
    )
    shutil.rmtree(out_dir / "traces", ignore_errors=True)
    trace.to_parquet(out_dir / "traces")
    qrels.write_parquet(out_dir / "qrels.parquet")
    info = {
        "suite": suite.name,
        "path": str(suite.path),
        "format": suite.format,
        "grades": getattr(suite, "grades", "gain"),
        "run": name,
        "models": model_fingerprints(models),
        "timings": timings,
        "trace_cache": str(rec.cache_dir),
        "ranx_check": ranx_means,
        "degraded_queries": degraded["qid"].n_unique(),
    }
    (out_dir / "run.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
    return RunResult(name, trace, qrels, pq, means, table, out_dir, timings)


RANX_NAMES = {"p": "precision"}


def ranx_check(qrels_path: Path, run_path: Path, ours: dict[str, float]) -> dict[str, float]:
    """``ranx.evaluate`` of a saved run file against saved qrels; raises if any metric differs
    from ``ours`` by more than 1e-9 (that would be a bug in :mod:`qmdlab.eval.metrics` or the writer)."""
    ranx = import_extra("ranx", "eval")
    Qrels, Run, evaluate = ranx.Qrels, ranx.Run, ranx.evaluate

    names = {
        m: (
            RANX_NAMES.get(parse_metric(m).kind, parse_metric(m).kind)
            + (f"@{parse_metric(m).k}" if parse_metric(m).k else "")
        )
        for m in ours
    }
    qrels = Qrels.from_file(str(qrels_path), kind="trec")
    if not run_path.read_text(encoding="utf-8").strip():
        # ranx cannot evaluate an empty run (max() of an empty sequence), so give every judged
        # query one unjudged placeholder document: ranx then scores the run as retrieving
        # nothing (0 everywhere) and ours is still compared with it, never assumed.
        run = Run({qid: {"__qmdlab_no_results__": 0.0} for qid in qrels.keys()})
    else:
        run = Run.from_file(str(run_path), kind="trec")
    theirs = evaluate(qrels, run, list(names.values()), make_comparable=True)
    theirs = theirs if isinstance(theirs, dict) else {next(iter(names.values())): theirs}
    out = {m: float(theirs[r]) for m, r in names.items()}
    bad = {m: (ours[m], out[m]) for m in ours if abs(ours[m] - out[m]) > 1e-9}
    if bad:
        raise RuntimeError(f"metrics disagree with ranx on {run_path.name}: {bad}")
    return out

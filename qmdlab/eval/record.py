"""Record a suite: the one door from "a suite + models + a config" to traces and qrels.

Every evaluation front end goes through :func:`record` — ``qmdlab eval`` / ``qmdlab tune``
(via :func:`qmdlab.eval.runner.run_suite`), :meth:`qmdlab.eval.study.Study.for_suite`, the tune, evaluate and
explore notebooks and :mod:`qmdlab.training.evaluate`:

1. :func:`prepare_index` writes inline documents as markdown under
   ``$QMDLAB_HOME/eval/<suite>/corpus``, builds/updates the suite's own index
   ``$QMDLAB_HOME/eval/<suite>/index`` (``index-<chunker>`` for a config's non-default ``chunker``,
   :func:`index_dir`) and embeds chunks that lack vectors for the embedder;
2. every judged query runs through :class:`qmdlab.Lab` with the config's ``limit`` raised to
   :data:`EVAL_DEPTH` (one depth everywhere, so recall@100 is defined and every front end
   shares one cache). Each query's trace is cached as parquet under
   ``$QMDLAB_HOME/eval/<suite>/traces/<key>/<qid>/`` (:func:`cache_key` hashes the suite's
   content, the config's recorded options, the model fingerprints and the trace schema): an
   interrupted run resumes where it stopped and a repeated one costs nothing. A config that
   differs only in options that re-run on recorded lists (fusion, candidates, blend, finish:
   ``recorded=False`` in :class:`~qmdlab.pipeline.config.PipelineConfig`) loads the cached traces
   and re-runs those stages (:func:`qmdlab.pipeline.retune.retune`, reranking newly promoted
   candidates) instead of running the models again. ``recording.json`` beside the
   per-query directories says what the key stands for, so :func:`recorded` can list and
   :func:`load_recorded` can open a recording **without loading any model**.

:func:`estimate` says what recording a config would cost (queries to run, seconds measured
from earlier recordings with the same models) before anything is started; :func:`record` logs
its :meth:`Estimate.warning` (the estimate and how to make the run cheaper) before a run
estimated over :data:`WARN_SECONDS`, or one of unknown length with a model stage.

Imports point down: this module knows suites, the pipeline and the store, not
:class:`qmdlab.eval.study.Study` (which is built from a :class:`Recording`) nor the runner.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

import polars as pl

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.retune import retune
from qmdlab.pipeline.trace import SCHEMAS, Trace

from .suites import Suite

EVAL_DEPTH = 100
"""Results kept per query in every recording (``PipelineConfig.limit`` is raised to this).
``limit`` only truncates the finished list, so every metric at 10 is unchanged; the pipeline
still returns at most ``candidate_limit`` documents (recall@100 is the candidate pool's)."""

MANIFEST = "recording.json"

WARN_SECONDS = 600.0
"""A recording estimated longer than this (10 minutes) is warned about before it starts (:meth:`Estimate.warning`)."""


class Progress(NamedTuple):
    """What :func:`record` reports to ``on_progress``.

    Attributes
    ----------
    phase : str
        ``"index"`` (indexing/embedding; no counts), ``"query"`` (a query was run; cached
        traces are not reported, so ``done/total`` counts real work only) or ``"done"``.
    done, total : int
        Queries run so far / queries to run (those not in the trace cache).
    qid : str or None
        The query just run.
    """

    phase: str
    done: int
    total: int
    qid: str | None = None


class Recording(NamedTuple):
    """Traces and qrels of a suite's judged queries under one config.

    Attributes
    ----------
    suite : Suite
    trace : Trace
        Concatenated trace of every recorded query (sorted by qid).
    qrels : pl.DataFrame
        ``qid, docno, grade`` (qmdlab docnos) of the recorded queries.
    queries : pl.DataFrame
        ``qid, query, …`` of the recorded queries.
    config : PipelineConfig
        The config recorded (``limit`` at least :data:`EVAL_DEPTH`).
    cache_dir : Path
        ``$QMDLAB_HOME/eval/<suite>/traces/<key>``.
    timings : dict
        ``index_s``, ``query_s``, ``queries``, ``queries_cached``.
    lab : qmdlab.Lab or None
        The lab that ran the queries (``None`` when loaded by :func:`load_recorded`).
    """

    suite: Suite
    trace: Trace
    qrels: pl.DataFrame
    queries: pl.DataFrame
    config: PipelineConfig
    cache_dir: Path
    timings: dict
    lab: Any = None


class RecordingInfo(NamedTuple):
    """One recording in a suite's trace cache (see :func:`recorded`).

    Attributes
    ----------
    key : str
        The cache key (directory name).
    config : PipelineConfig
    models : list of str
        Fingerprints of embedder, expander, reranker (``"none"`` for a missing role).
    qids : list of str
        Queries whose trace is complete.
    label : str
        A short description, e.g. ``"bm25+vector · 103 queries"``.
    name : str
        The run name given when recorded (``demo-retrieval``, ``qmdlab``, …), may be ``""``.
    mtime : float
    """

    key: str
    config: PipelineConfig
    models: list
    qids: list
    label: str
    name: str
    mtime: float


class Estimate(NamedTuple):
    """What recording a config would cost (:func:`estimate`).

    Attributes
    ----------
    queries : int
        Judged queries asked for.
    cached : int
        Of those, already in the trace cache.
    seconds : float or None
        Expected time for the others; ``None`` when nothing is known about the models' speed.
    basis : str
        How ``seconds`` was obtained (measured per-stage medians, or why it is unknown).
    stages : tuple of str
        The model stages the run needs (``"expand"``, ``"rerank"``): what :meth:`warning` offers to drop.
    candidates : int
        Documents reranked per query (with ``"rerank"`` in ``stages``).
    """

    queries: int
    cached: int
    seconds: float | None
    basis: str
    stages: tuple[str, ...] = ()
    candidates: int = 0

    @property
    def to_run(self) -> int:
        return self.queries - self.cached

    def summary(self) -> str:
        """One line for a UI.

        >>> Estimate(10, 4, 90.0, "measured").summary()
        '6 of 10 queries to run (4 cached), about 2 min (measured)'
        >>> Estimate(3, 3, 0.0, "measured").summary()
        'all 3 queries are recorded: loads from the cache in seconds'
        """
        if not self.to_run:
            return f"all {self.queries} queries are recorded: loads from the cache in seconds"
        cost = "unknown time" if self.seconds is None else f"about {_duration(self.seconds)}"
        return f"{self.to_run} of {self.queries} queries to run ({self.cached} cached), {cost} ({self.basis})"

    def warning(self) -> str:
        """One line before a long run — estimated over :data:`WARN_SECONDS`, or of unknown time with a
        model stage (a CPU spends seconds per expansion and per reranked document) — saying the estimate
        and how to make the run cheaper; ``""`` otherwise.

        >>> Estimate(103, 0, 5400.0, "measured", ("rerank",), 40).warning()
        'warning: a long run: 103 of 103 queries to run (0 cached), about 1.5 h (measured); cheaper: --limit N (fewer queries), --no-rerank, or fewer reranked candidates than 40 (candidate_limit)'
        >>> Estimate(103, 0, 120.0, "measured").warning(), Estimate(103, 0, None, "never timed").warning()
        ('', '')
        """
        if not self.to_run or (self.seconds is None and not self.stages):
            return ""
        if self.seconds is not None and self.seconds <= WARN_SECONDS:
            return ""
        cheaper = ["--limit N (fewer queries)"]
        if "expand" in self.stages:
            cheaper.append("--no-expand")
        if "rerank" in self.stages:
            cheaper += ["--no-rerank", f"or fewer reranked candidates than {self.candidates} (candidate_limit)"]
        return f"warning: a long run: {self.summary()}; cheaper: {', '.join(cheaper)}"


def _duration(s: float) -> str:
    """
    >>> _duration(12), _duration(90), _duration(7200)
    ('12 s', '2 min', '2.0 h')
    """
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


# -- suite → config, index, lab --------------------------------------------------------------
def suite_config(suite: Suite) -> PipelineConfig:
    """The suite's own pipeline config (its ``config`` file) or the defaults."""
    config = getattr(suite, "config", None)
    return PipelineConfig.from_file(config) if config else PipelineConfig()


def index_dir(suite: Suite, chunker: str = "") -> Path:
    """The suite's index for ``chunker``: ``<workdir>/index`` for the default (``""`` or
    ``breakpoints``), ``<workdir>/index-<chunker>`` for another one (chunks are stored, so each
    chunker has its own index; its traces have their own cache key through the config's ``chunker``).

    >>> from qmdlab.eval.suites import get_suite
    >>> s = get_suite("default"); index_dir(s).name, index_dir(s, "breakpoints").name, index_dir(s, "headings").name
    ('index', 'index', 'index-headings')
    """
    from qmdlab.store.chunkers import DEFAULT_CHUNKER, check_chunker

    name = check_chunker(chunker or DEFAULT_CHUNKER, "option 'chunker':")
    return suite.workdir() / ("index" if name == DEFAULT_CHUNKER else f"index-{name}")


def prepare_index(
    suite: Suite,
    embedder: Any = None,
    *,
    progress: bool = True,
    batch_size: int = 32,
    log: Callable[[str], None] = print,
    chunker: str = "",
):
    """Write/refresh the suite corpus, update the suite's index (:func:`index_dir` of ``chunker``,
    re-chunked if its chunks were made otherwise) and embed missing chunks."""
    from qmdlab.store import Index
    from qmdlab.store.chunkers import DEFAULT_CHUNKER

    suite.write_corpus()
    idx = Index.open(index_dir(suite, chunker))
    rechunked = idx.set_chunker(chunker or DEFAULT_CHUNKER, progress=progress)
    if rechunked.changed:
        log(f"index {idx.dir}: {rechunked.summary()}")
    root = suite.corpus_dir().resolve()
    existing = {c.name: c for c in idx.collections()}
    mask, ignore = getattr(suite, "mask", "**/*.md"), tuple(getattr(suite, "ignore", ()))
    known = existing.get(suite.collection)
    if known is not None and (Path(known.root).resolve() != root or known.mask != mask or known.ignore != ignore):
        idx.remove_collection(suite.collection)
        existing.pop(suite.collection)
    if suite.collection not in existing:
        idx.add_collection(suite.collection, root, mask, ignore)
    report = idx.update([suite.collection], progress=progress)
    log(f"index {idx.dir}: {report.summary() if hasattr(report, 'summary') else report}")
    if embedder is not None:
        n = embed_missing(idx, embedder, [suite.collection], progress=progress, batch_size=batch_size)
        if n:
            log(f"embedded {n} chunks with {embedder.model_id}")
    return idx


def embed_missing(
    idx, embedder, collections: Sequence[str] | None = None, *, progress: bool = True, batch_size: int = 32
) -> int:
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
            mat = embedder.embed_documents(list(zip(titles[i : i + batch_size], texts[i : i + batch_size])))
            idx.store_vectors(ids[i : i + batch_size], mat, embedder.fingerprint)
            bar.update(len(mat))
    return n


def open_lab(
    suite: Suite,
    models: Any = None,
    config: PipelineConfig | None = None,
    *,
    progress: bool = False,
    log: Callable[[str], None] = print,
):
    """The suite's index (built and embedded on first use) in a :class:`qmdlab.Lab` with ``models``."""
    from qmdlab.pipeline.lab import Lab

    config = config or suite_config(suite)
    embedder = models[0] if models is not None else None
    idx = prepare_index(suite, embedder if config.vector else None, progress=progress, log=log, chunker=config.chunker)
    return Lab(idx, models, config)


def depth_config(config: PipelineConfig, depth: int = EVAL_DEPTH) -> PipelineConfig:
    """``config`` with ``limit`` raised to ``depth`` (what every recording runs)."""
    return config.replace(limit=max(config.limit, depth))


def judged_queries(suite: Suite, limit: int | None = None, qids: Sequence[str] | None = None) -> pl.DataFrame:
    """The suite's judged queries sorted by qid: only ``qids`` when given (a held-out split; an id the
    suite does not judge is an error), then the first ``limit`` only when given."""
    queries = suite.data().judged_queries().sort("qid")
    if qids is not None:
        wanted = [str(q) for q in qids]
        missing = sorted(set(wanted) - set(queries["qid"].cast(pl.Utf8).to_list()))
        if missing:
            raise ValueError(
                f"suite {suite.name!r} has no judged queries {missing[:5]}"
                f"{' …' if len(missing) > 5 else ''} (check the split file's suite and qids)"
            )
        queries = queries.filter(pl.col("qid").cast(pl.Utf8).is_in(wanted))
    return queries.head(limit) if limit else queries


# -- the cache key ---------------------------------------------------------------------------
def model_fingerprints(models: Any) -> list[str]:
    """Fingerprints of ``(embedder, expander, reranker)``; ``"none"`` for a missing role."""
    return [_fingerprint(m) for m in (models if models is not None else (None, None, None))]


def _fingerprint(model: Any) -> str:
    return (
        "none"
        if model is None
        else str(getattr(model, "fingerprint", None) or getattr(model, "model_id", type(model).__name__))
    )


def index_fingerprints(config: PipelineConfig, index: Any) -> list[str]:
    """What a trace depends on in the index beyond the suite's documents: when the BM25
    doc-queries column holds generated queries, the active generator and how many of its queries
    the column holds (another generator, or a re-filter, is another recording). At weight 0 too:
    FTS5's ``bm25()`` normalises by the length of the whole row, so a filled column lengthens
    every document it is in and shifts BM25 scores slightly even when nothing matches in it.
    Appended to the model fingerprints of the key and the manifest; empty otherwise."""
    if index is None:
        return []
    from qmdlab.store.doc_expansions import status

    s = status(index)
    if not s.documents:
        return []
    # "expansions:" is part of recorded cache keys: renaming it would orphan every recorded trace
    return [f"expansions:{s.generator}:{s.kept}:{s.documents}"]


def cache_key(suite: Suite, config: PipelineConfig, models: Any, index: Any = None) -> str:
    """Hash of everything a query's recorded trace depends on: suite content, the config's recorded
    options (:meth:`PipelineConfig.recorded_dict`), model fingerprints, the trace schema (a new trace
    column invalidates old caches) and, given the suite's ``index``, its document expansions
    (:func:`index_fingerprints`; what :func:`record` uses). Configs that differ only in options
    that re-run on recorded lists (fusion, candidates, blend, finish) share one key."""
    return _key(suite, config, model_fingerprints(models) + index_fingerprints(config, index))


def _key(suite: Suite | str, config: PipelineConfig, fingerprints: Sequence[str], *, every_option: bool = False) -> str:
    """The cache key; ``suite`` may be given as its content fingerprint (computed once by callers).
    ``every_option``: the key of recordings made when the cache was keyed on every option
    (:func:`_cache_dir` adopts them)."""
    schema = {t: {c: str(d) for c, d in cols.items()} for t, cols in SCHEMAS.items()}
    suite_fp = suite if isinstance(suite, str) else suite.fingerprint()
    options = config.to_dict() if every_option else config.recorded_dict()
    payload = json.dumps(
        {"suite": suite_fp, "config": options, "schema": schema, "models": list(fingerprints)}, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _cache_dir(suite: Suite, config: PipelineConfig, prints: Sequence[str]) -> Path:
    """The recording's directory in the trace cache. A recording of exactly this config made when
    the cache was keyed on every option is moved there, so its traces are not recorded again."""
    suite_fp = suite.fingerprint()
    cache_dir = cache_root(suite) / _key(suite_fp, config, prints)
    whole = cache_root(suite) / _key(suite_fp, config, prints, every_option=True)
    if not cache_dir.exists() and whole.is_dir():
        with contextlib.suppress(OSError):  # another process moved it first: record as usual
            whole.rename(cache_dir)
    return cache_dir


def cache_root(suite: Suite) -> Path:
    """Where a suite's recordings live: ``$QMDLAB_HOME/eval/<suite>/traces``."""
    return suite.workdir() / "traces"


# -- recording -------------------------------------------------------------------------------
def record(
    suite: Suite,
    models: Any = None,
    config: PipelineConfig | None = None,
    *,
    depth: int = EVAL_DEPTH,
    limit: int | None = None,
    qids: Sequence[str] | None = None,
    name: str = "",
    on_progress: Callable[[Progress], None] | None = None,
    progress: bool = False,
    log: Callable[[str], None] = print,
    remote: Callable | None = None,
) -> Recording:
    """Index the suite and run (or load from the trace cache) every judged query.

    Parameters
    ----------
    suite : Suite
    models : qmdlab.models.ModelSet, optional
        ``(embedder, expander, reranker)``; missing roles skip their stage.
    config : PipelineConfig, optional
        Default: the suite's own config (:func:`suite_config`). Its ``limit`` is raised to ``depth``.
    depth : int
        Results kept per query (:data:`EVAL_DEPTH`; one depth for every front end).
    limit : int, optional
        Only the first ``limit`` judged queries (smoke runs, the demo's LLM tier).
    qids : sequence of str, optional
        Only these judged queries (a held-out split). Traces are cached per query, so a subset
        shares the cache with full recordings of the same configuration.
    name : str
        A run name stored in the recording's manifest (shown by :func:`recorded`).
    on_progress : callable, optional
        Called with a :class:`Progress` after indexing and after each query actually run.
    progress : bool
        tqdm bars on stderr.
    remote : callable, optional
        ``remote(rows, lab)`` yields ``(qid, trace)`` for the query rows not in the cache,
        computed elsewhere (:class:`qmdlab.scale.ray_queries.RayQueries`: Ray actors); each is
        stored in the trace cache as it arrives, exactly as a local trace.
    """
    config = depth_config(config or suite_config(suite), depth)
    timings: dict[str, Any] = {}
    t0 = time.perf_counter()
    if on_progress:
        on_progress(Progress("index", 0, 0))
    lab = open_lab(suite, models, config, progress=progress, log=log)
    timings["index_s"] = time.perf_counter() - t0
    queries = judged_queries(suite, limit, qids)
    prints = model_fingerprints(models) + index_fingerprints(config, lab.index)
    cache_dir = _cache_dir(suite, config, prints)
    warning = _estimate(suite, config, prints, cache_dir, [str(q) for q in queries["qid"].to_list()]).warning()
    if warning:
        log(warning)
    _write_manifest(cache_dir, suite, config, prints, name)
    t1 = time.perf_counter()
    trace, cached = query_traces(
        suite, lab, queries, cache_dir, progress=progress, on_progress=on_progress, remote=remote
    )
    timings["query_s"] = time.perf_counter() - t1
    timings["queries"], timings["queries_cached"] = queries.height, cached
    if on_progress:
        on_progress(Progress("done", queries.height - cached, queries.height - cached))
    qrels = suite.qrels_docnos().join(queries.select("qid"), on="qid", how="semi")
    return Recording(suite, trace, qrels, queries, config, cache_dir, timings, lab)


def query_traces(
    suite: Suite,
    lab,
    queries: pl.DataFrame,
    cache_dir: Path,
    *,
    progress: bool = True,
    on_progress: Callable[[Progress], None] | None = None,
    remote: Callable | None = None,
) -> tuple[Trace, int]:
    """Run (or load from ``cache_dir``) the trace of every query; returns the concatenation and
    how many came from the cache (``remote``: see :func:`record`)."""
    with _no_query_budget():
        return _query_traces(suite, lab, queries.to_dicts(), cache_dir, progress, on_progress, remote)


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


def _load_cached(qdir: Path) -> Trace | None:
    if (qdir / "lists.parquet").exists() and (qdir / "DONE").exists():
        try:
            return Trace.from_parquet(qdir)
        except (ValueError, OSError, pl.exceptions.PolarsError):  # unreadable: run again
            return None
    return None


def _qdir(cache_dir: Path, qid: Any) -> Path:
    return cache_dir / quote(str(qid), safe="")


def _store_trace(cache_dir: Path, qid: str, t: Trace) -> None:
    """Write one query's trace into the cache (atomically; ``DONE`` unless it ran degraded)."""
    qdir = _qdir(cache_dir, qid)
    tmp = qdir.with_name(qdir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    t.to_parquet(tmp)
    if not degraded_queries(t).height:  # a degraded trace is kept but re-run next time
        (tmp / "DONE").write_text("", encoding="utf-8")
    shutil.rmtree(qdir, ignore_errors=True)
    tmp.rename(qdir)


def _query_traces(
    suite: Suite,
    lab,
    rows: list[dict],
    cache_dir: Path,
    progress: bool,
    on_progress: Callable[[Progress], None] | None = None,
    remote: Callable | None = None,
) -> tuple[Trace, int]:
    from tqdm import tqdm

    loaded = {str(r["qid"]): _load_cached(_qdir(cache_dir, r["qid"])) for r in rows}
    for qid, t in loaded.items():
        if t is not None and t.config != lab.config.to_dict():
            loaded[qid] = t = _retuned(lab, t)
            _store_trace(cache_dir, qid, t)
    todo = [r for r in rows if loaded[str(r["qid"])] is None]
    traces, done = [], 0
    if on_progress:
        on_progress(Progress("query", 0, len(todo)))
    if remote is not None and todo:
        for qid, t in remote(todo, lab):
            _store_trace(cache_dir, str(qid), t)
            loaded[str(qid)] = t
            done += 1
            if on_progress:
                on_progress(Progress("query", done, len(todo), str(qid)))
    with tqdm(rows, desc=f"{suite.name} queries", unit="q", disable=not progress) as bar:
        for r in bar:
            qid = str(r["qid"])
            t = loaded[qid]
            if t is None:
                t = lab.query(r["query"], intent=r.get("intent") or None, qid=qid)
                _store_trace(cache_dir, qid, t)
                done += 1
                if on_progress:
                    on_progress(Progress("query", done, len(todo), qid))
            traces.append(t)
            bar.set_postfix(cached=len(rows) - len(todo), refresh=False)
    return Trace.concat(traces), len(rows) - len(todo)


def _retuned(lab, trace: Trace) -> Trace:
    """A cached trace recorded under other values of the unrecorded options (one cache key:
    :func:`cache_key`), re-run from its recorded lists under ``lab.config`` as a query would run
    them: candidates it newly promotes are reranked (from the LLM cache when they were before), and
    every result gets its snippet (:meth:`qmdlab.Lab.retune`)."""
    return lab.retune(trace, compute_missing=True, results=True)


_DEGRADED = r"(?i)skipped|failed|budget|degrad|could not"


def degraded_queries(trace: Trace) -> pl.DataFrame:
    """Notes (``qid, stage, message``) saying a stage was skipped or failed for a reason other
    than the config switching it off — e.g. the query time budget skipping rerank, an expander
    error. Such queries were not measured under the config the run claims.

    >>> notes = pl.DataFrame({"qid": ["1", "2"], "stage": ["rerank", "rerank"],
    ...     "message": ["rerank disabled: fusion order kept", "query time budget used up before rerank: rerank skipped"]})
    >>> degraded_queries(Trace(notes=notes))["qid"].to_list()
    ['2']
    """
    expected = r"(?i)disabled|^strong signal|^no embedder"  # the config or the model set asked for it
    return trace.notes.filter(
        pl.col("message").str.contains(_DEGRADED) & ~pl.col("message").str.contains(expected)
    ).select("qid", "stage", "message")


# -- what is recorded ------------------------------------------------------------------------
def _write_manifest(cache_dir: Path, suite: Suite, config: PipelineConfig, prints: list[str], name: str) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / MANIFEST
    old = {}
    with contextlib.suppress(OSError, ValueError):
        old = json.loads(path.read_text(encoding="utf-8"))
    info = {
        "suite": suite.name,
        "config": config.to_dict(),
        "models": prints,
        "name": name or old.get("name", ""),
    }
    if info != old:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(info, indent=1), encoding="utf-8")
        tmp.replace(path)


def describe(config: PipelineConfig, models: Sequence[str] | None = None) -> str:
    """The stages a recording holds, e.g. ``bm25+vector+expand+rerank top 5``.

    >>> describe(PipelineConfig(expand=False, rerank=False))
    'bm25+vector'
    >>> describe(PipelineConfig(candidate_limit=5), ["e", "x", "none"])
    'bm25+vector+expand'
    """
    has = lambda i: models is None or models[i] != "none"  # noqa: E731
    parts = ["bm25"]
    if config.vector and has(0):
        parts.append("vector")
    if config.expand and has(1):
        parts.append("expand")
    if config.rerank and has(2):
        parts.append(f"rerank top {config.candidate_limit}")
    return "+".join(parts)


def recorded(suite: Suite) -> list[RecordingInfo]:
    """The recordings of ``suite`` in its trace cache that are still valid (same suite content,
    trace schema and config options), most queries first, then the richest."""
    root = cache_root(suite)
    out = []
    suite_fp = suite.fingerprint() if root.is_dir() else ""
    for manifest in sorted(root.glob(f"*/{MANIFEST}")) if root.is_dir() else []:
        try:
            info = json.loads(manifest.read_text(encoding="utf-8"))
            config = PipelineConfig.from_dict(info["config"])
            models = list(info["models"])
        except Exception:  # noqa: BLE001 — an unreadable or outdated manifest is not listed
            continue
        key = manifest.parent.name
        if key not in (_key(suite_fp, config, models), _key(suite_fp, config, models, every_option=True)):
            continue  # suite content, schema or config options changed
        qids = sorted(_unquote(p.parent.name) for p in manifest.parent.glob("*/DONE"))
        if not qids:
            continue
        label = f"{describe(config, models)} · {len(qids)} queries" + (f" · {info['name']}" if info.get("name") else "")
        out.append(RecordingInfo(key, config, models, qids, label, info.get("name", ""), manifest.stat().st_mtime))
    return sorted(out, key=lambda r: (-len(r.qids), -len(describe(r.config, r.models)), -r.mtime))


def outdated(suite: Suite) -> int:
    """How many recordings of ``suite`` in its trace cache :func:`recorded` no longer lists because
    the suite's content, the trace schema or the pipeline's config options changed since (a new
    ``PipelineConfig`` option changes every key). Re-recording them is cheap when the models'
    answers are in the LLM cache (``make demo`` again: the LLM tier replays from the cache)."""
    root = cache_root(suite)
    manifests = list(root.glob(f"*/{MANIFEST}")) if root.is_dir() else []
    valid = {r.key for r in recorded(suite)}
    return sum(1 for m in manifests if m.parent.name not in valid and any(m.parent.glob("*/DONE")))


def _unquote(name: str) -> str:
    from urllib.parse import unquote

    return unquote(name)


def load_recorded(
    suite: Suite, key: str, *, limit: int | None = None, on_progress: Callable[[Progress], None] | None = None
) -> Recording:
    """Open a recording of :func:`recorded` from the trace cache — no model, no index.

    Only queries whose trace is complete are loaded; ``limit`` keeps the first ``limit``
    judged queries of the suite (those of them that are recorded).
    """
    from qmdlab.errors import QmdlabError

    rec = next((r for r in recorded(suite) if r.key == key), None)
    if rec is None:
        raise QmdlabError(
            f"no recording {key!r} of suite {suite.name!r} under {cache_root(suite)}; "
            "record it first (qmdlab eval, make demo, or the notebook's Record button)"
        )
    queries = judged_queries(suite, limit)
    queries = queries.filter(pl.col("qid").cast(pl.Utf8).is_in(rec.qids))
    cache_dir = cache_root(suite) / key
    t0 = time.perf_counter()
    traces = [t for t in (_load_cached(_qdir(cache_dir, q)) for q in queries["qid"].to_list()) if t is not None]
    want = rec.config.to_dict()
    # A query recorded only under other unrecorded options (a held-out subset run) is re-run from its
    # lists under the recording's config; with no model, newly promoted candidates keep no rerank score.
    traces = [t if t.config == want else retune(t, rec.config) for t in traces]
    trace = Trace.concat(traces)
    timings = {
        "index_s": 0.0,
        "query_s": time.perf_counter() - t0,
        "queries": len(traces),
        "queries_cached": len(traces),
    }
    if on_progress:
        on_progress(Progress("done", 0, 0))
    qrels = suite.qrels_docnos().join(queries.select("qid"), on="qid", how="semi")
    return Recording(suite, trace, qrels, queries, rec.config, cache_dir, timings, None)


def estimate(
    suite: Suite,
    models: Any,
    config: PipelineConfig | None = None,
    *,
    depth: int = EVAL_DEPTH,
    limit: int | None = None,
) -> Estimate:
    """What :func:`record` would cost: queries not yet in the cache and their expected time.

    The time is measured, not guessed: per-stage medians of earlier recordings of this suite made
    with the same model fingerprints (any config, also outdated ones: they time the same models)
    — expansion per query, rerank per document, the rest per query. Stages answered from the LLM
    cache are left out, they say nothing of the models' speed. When the config needs a stage that
    was never timed with these models, ``seconds`` is ``None`` and ``basis`` says which.
    """
    config = depth_config(config or suite_config(suite), depth)
    prints = model_fingerprints(models)
    cache_dir = _cache_dir(suite, config, prints)
    return _estimate(suite, config, prints, cache_dir, [str(q) for q in judged_queries(suite, limit)["qid"].to_list()])


def _estimate(suite: Suite, config: PipelineConfig, prints: list[str], cache_dir: Path, qids: list[str]) -> Estimate:
    """:func:`estimate` of the queries ``qids`` recorded under ``cache_dir`` with fingerprints ``prints``."""
    done = {q for q in qids if (_qdir(cache_dir, q) / "DONE").exists()}
    todo = len(qids) - len(done)
    need = tuple(
        s for s, on, i in (("expand", config.expand, 1), ("rerank", config.rerank, 2)) if on and prints[i] != "none"
    )
    cands = config.candidate_limit if "rerank" in need else 0
    if not todo:
        return Estimate(len(qids), len(done), 0.0, "measured", need, cands)
    per_query, expand_s, rerank_s = _measured_seconds(suite, prints)
    missing = [s for s, vals in (("expand", expand_s), ("rerank", rerank_s)) if s in need and not vals]
    if not per_query or missing:
        what = ", ".join(missing) or "any stage"
        basis = f"{what} never timed here with these models (cache hits do not count)"
        return Estimate(len(qids), len(done), None, basis, need, cands)
    each = statistics.median(per_query)
    if "expand" in need:
        each += statistics.median(expand_s)
    if "rerank" in need:
        each += statistics.median(rerank_s) * config.candidate_limit
    return Estimate(len(qids), len(done), each * todo, "measured medians of earlier recordings", need, cands)


def _measured_seconds(suite: Suite, prints: list[str], sample: int = 20) -> tuple[list, list, list]:
    """``(other stages per query, expansion per query, rerank per document)`` in seconds, from up
    to ``sample`` queries of every recording of ``suite`` made with the model fingerprints ``prints``."""
    per_query: list[float] = []
    expand_s: list[float] = []
    rerank_s: list[float] = []
    root = cache_root(suite)
    for manifest in sorted(root.glob(f"*/{MANIFEST}")) if root.is_dir() else []:
        try:
            if json.loads(manifest.read_text(encoding="utf-8")).get("models") != prints:
                continue
        except (OSError, ValueError):
            continue
        for done in sorted(manifest.parent.glob("*/DONE"))[:sample]:
            q = done.parent
            try:
                t = pl.read_parquet(q / "timings.parquet")
                rr = pl.read_parquet(q / "rerank.parquet")
                notes = pl.read_parquet(q / "notes.parquet")
            except (OSError, pl.exceptions.PolarsError):
                continue
            ms = dict(zip(t["stage"].to_list(), t["ms"].to_list()))
            per_query.append(sum(v for k, v in ms.items() if k not in ("expand", "rerank", "select")) / 1e3)
            expand_notes = notes.filter(pl.col("stage") == "expand")["message"].to_list()
            if "expand" in ms and expand_notes and not any("from cache" in m for m in expand_notes):
                expand_s.append(ms["expand"] / 1e3)
            # a retuned trace (:func:`_retuned`) holds more rerank rows than its recorded rerank time scored
            if rr.height and "rerank" in ms and "retune" not in ms and not rr["cached"].any():
                rerank_s.append((ms["rerank"] + ms.get("select", 0.0)) / 1e3 / rr.height)
    return per_query, expand_s, rerank_s


# -- saved run directories -------------------------------------------------------------------
def load_run_dir(directory: str | Path) -> tuple[Trace, pl.DataFrame, PipelineConfig]:
    """``(trace, qrels, config)`` of a results directory written by :func:`qmdlab.eval.runner.run_suite`."""
    from qmdlab.errors import QmdlabError

    d = Path(directory)
    if not (d / "qrels.parquet").exists():
        raise QmdlabError(f"{d}: not a qmdlab eval results directory (no qrels.parquet); run `qmdlab eval` first")
    trace = Trace.from_parquet(d / "traces")
    config = PipelineConfig.from_yaml(d / "config.yaml") if (d / "config.yaml").exists() else PipelineConfig()
    return trace, pl.read_parquet(d / "qrels.parquet"), config

"""The quality–latency frontier of a suite: every configuration a user chooses between, scored on
held-out queries and timed on this machine (``qmdlab eval SUITE --frontier``).

Two recordings, made (or loaded from the trace cache) by :func:`qmdlab.eval.record.record`, the one every
``qmdlab eval`` and ``make demo`` uses — same configs and model roles, so the same cache keys:

- the **retrieval recording** of every judged query (expansion and rerank off) gives, as cuts of one
  trace (:mod:`qmdlab.eval.ablation`'s :class:`~qmdlab.eval.ablation.Variant` rows, :meth:`qmdlab.eval.study.Study.evaluate`):
  ``bm25``, ``vector``, and BM25 + vectors under each fusion method (``hybrid <method>``); plus the
  k-fold rows: ``tuned`` (:func:`qmdlab.eval.optimise.cross_validate`, the folds and seed of ``qmdlab tune``)
  and ``learned fusion`` (:func:`qmdlab.eval.learn.cross_validate_learned`, when LightGBM is installed);
  and, when the suite's index has doc expansions written (``qmdlab expand-docs``), ``bm25 + doc expansions``
  and ``hybrid <fusion> + doc expansions``: the same rows with the doc-queries column weighted
  (:data:`qmdlab.eval.ablation.DOC_QUERY_WEIGHT`), their BM25 lists re-run on the index
  (:class:`qmdlab.eval.lexical.LexicalStudy`);
- the **LLM recording** of the first ``llm_queries`` judged queries (the preset's expander and
  reranker, ``candidates`` documents reranked) gives ``+lex``, ``+lex+vec``, ``+lex+vec+hyde`` and
  ``+rerank``; their ``n`` column says how many queries they stand on;
- a **trained reranker** (a finished ``qmdlab train reranker`` run of the suite under ``runs/``, or
  ``--reranker-run DIR``): its held-out scores — each query reranked by the fold model that never saw
  it — under qmd's position blend, timed live on three queries with the trained model. The model is
  not a pipeline option (``QMDLAB_RERANK_MODEL`` selects it), so the row is never written by ``--pick``.

**Held-out.** A row with nothing fitted to the labels scores every query out of sample; ``tuned``
and ``learned fusion`` score each query with a configuration tuned or trained without it. The
p-values pair a row's per-query nDCG@10 with the **best cheaper configuration** (the highest-scoring
row with a lower median s/query, on the same queries): paired t-test and Fisher randomisation
(:func:`qmdlab.eval.significance.paired_pvalues`).

**Seconds per query**, median over the timed queries, measured on this machine: the retrieval rows
by running each query through a fresh :class:`qmdlab.Lab` now (``bm25``: vectors off; every hybrid,
vector and tuned row: BM25 + vectors — ``timed as`` says which run a row's time is); the LLM rows
from the LLM recording's stage timings (expansion and the expansion lists for the ``+lex…`` rows,
the whole pipeline for ``+rerank``; snippet building left out, the recording built it for its
evaluation depth of 100 results). A stage whose answer came from the LLM cache when it was
recorded is priced at the model's measured speed instead (:mod:`qmdlab.pipeline.speed`, else the
medians of earlier recordings with the same models); with no measurement the row has no time and
stays off the plot. Before the LLM recording runs, its cost is estimated the way the tune notebook
does (:func:`eval.record.estimate`) and logged.

The Pareto front: rows no other row beats on both axes (nDCG@10 compared on the queries both stand
on). :func:`pick` chooses ``best`` (highest nDCG@10) or ``fastest-within D`` (the fastest row within
``D`` of the best) among rows a query config can express, and :func:`write_pick` writes it for
``qmdlab query --config``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.config import FUSION_METHODS, PipelineConfig

from .ablation import DOC_QUERY_WEIGHT, ORIGINAL, Variant, variants
from .metrics import HEADLINE
from .significance import paired_pvalues

LLM_ROWS = ("+lex", "+lex+vec", "+lex+vec+hyde", "+rerank")


@dataclass
class Point:
    """One configuration of the frontier.

    ``per_query``: ``qid`` and the metric (held-out); ``config``: the query config that runs it
    (``None`` when no query config can: vector only, the lex-only expansion cuts); ``timed_as``: the
    run its seconds come from; ``seconds``: median s/query, ``None`` when not measured.
    """

    name: str
    description: str
    per_query: pl.DataFrame
    held_out: str
    config: PipelineConfig | None
    timed_as: str
    seconds: float | None
    recording: str = "retrieval"
    files: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.per_query.height

    def mean(self, metric: str, qids: Sequence[str] | None = None) -> float:
        pq = self.per_query if qids is None else self.per_query.filter(pl.col("qid").is_in(list(qids)))
        return float(cast(float, pq[metric].mean())) if pq.height else float("nan")


@dataclass
class Frontier:
    """What :func:`frontier` measured: the points, the table and where the files went."""

    suite: str
    metric: str
    points: list[Point]
    table: pl.DataFrame
    llm_queries: int
    queries: int
    out_dir: Path | None = None
    notes: list[str] = field(default_factory=list)
    candidates: int = 0
    timed_queries: int = 0

    def point(self, name: str) -> Point:
        for p in self.points:
            if p.name == name:
                return p
        raise KeyError(name)


# -- timing ----------------------------------------------------------------------------------------
def time_queries(lab, queries: pl.DataFrame) -> list[float]:
    """Wall seconds of each query through ``lab`` (one run each, in order)."""
    out = []
    for r in queries.iter_rows(named=True):
        t0 = time.perf_counter()
        lab.query(r["query"], intent=r.get("intent") or None, qid=str(r["qid"]))
        out.append(time.perf_counter() - t0)
    return out


def time_interleaved(labs: dict, queries: pl.DataFrame, warmup: int = 2) -> dict[str, list[float]]:
    """Wall seconds of each query through each lab, the labs taken in a rotating order per query so
    that a change of the machine's load during the run falls on all of them alike; each lab first
    answers ``warmup`` queries untimed (first-call costs: imports, caches, a model's load)."""
    rows = list(queries.iter_rows(named=True))
    for lab in labs.values():
        for r in rows[:warmup]:
            lab.query(r["query"], intent=r.get("intent") or None, qid=str(r["qid"]))
    names = list(labs)
    out: dict[str, list[float]] = {n: [] for n in names}
    for i, r in enumerate(rows):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            t0 = time.perf_counter()
            labs[name].query(r["query"], intent=r.get("intent") or None, qid=str(r["qid"]))
            out[name].append(time.perf_counter() - t0)
    return out


def recorded_seconds(
    trace,
    qid: str,
    stages: Sequence[str] | None,
    models: Any = None,
    measured: tuple[Sequence[float], Sequence[float]] = ((), ()),
) -> float | None:
    """Seconds of one recorded query's stages (all when ``stages`` is None); a model stage answered
    from the LLM cache when it was recorded is priced at the model's measured speed — this process's
    and ``speeds.json``'s running mean (:mod:`qmdlab.pipeline.speed`), else ``measured``: the medians of
    earlier recordings with the same models (expansion s/query, rerank s/document:
    :func:`eval.record._measured_seconds`) — ``None`` when there is no measurement."""
    from qmdlab.pipeline import speed

    t = trace.timings.filter(pl.col("qid") == qid)
    if stages is not None:
        t = t.filter(pl.col("stage").is_in(list(stages)))
    ms = dict(zip(t["stage"].to_list(), t["ms"].to_list()))
    total = sum(ms.values()) / 1000.0
    expander, reranker = (models[1], models[2]) if models is not None else (None, None)
    notes = trace.notes.filter((pl.col("qid") == qid) & (pl.col("stage") == "expand"))["message"].to_list()
    if "expand" in ms and any("(from cache)" in m for m in notes):
        per = speed.estimate(expander, "expand", persist=True) if expander is not None else None
        per = per if per is not None else _median(list(measured[0]))
        if per is None:
            return None
        total += per - ms["expand"] / 1000.0
    if "rerank" in ms:
        rr = trace.rerank.filter(pl.col("qid") == qid)
        cached = int(rr["cached"].sum()) if rr.height else 0
        if cached:
            per = speed.estimate(reranker, "rerank", persist=True) if reranker is not None else None
            per = per if per is not None else _median(list(measured[1]))
            if per is None:
                return None
            total += per * cached
    return total


def _median(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


# -- the frontier ----------------------------------------------------------------------------------
def frontier(
    suite,
    preset: str | None = None,
    *,
    base: PipelineConfig | None = None,
    llm_queries: int | None = 10,
    candidates: int | None = None,
    folds: int = 5,
    seed: int = 0,
    trials: int = 200,
    learned: bool = True,
    time_limit: int = 50,
    metric: str = HEADLINE,
    out: str | Path | None = None,
    progress: bool = False,
    log: Callable[[str], None] = print,
    load_models: Callable | None = None,
    reranker_runs: Sequence[str | Path] | None = (),
    limit: int | None = None,
) -> Frontier:
    """Record, evaluate and time every configuration of the module table on ``suite``.

    Parameters
    ----------
    suite : qmdlab.eval.suites.Suite
    preset : str, optional
        Model preset (``None``: ``$QMDLAB_PRESET`` / the model config / ``offline``).
    base : PipelineConfig, optional
        The suite's config (default :func:`qmdlab.eval.record.suite_config`). Its ``expand``/``rerank``
        say which stages the LLM recording measures (``qmdlab eval --frontier`` plans them with
        :func:`qmdlab.pipeline.stages.plan_stages`, each on unless a flag or the config turns it off).
    llm_queries : int or None
        Judged queries of the LLM recording (the first N; ``None`` = all, 0 = no LLM rows).
    candidates : int, optional
        Fused documents reranked per query in the LLM recording (default: ``base.candidate_limit``).
    folds, seed, trials : int
        The k-fold rows' cross-validation (``qmdlab tune``'s defaults: 5 folds, seed 0, 200 trials).
    learned : bool
        Add the learned-fusion row when LightGBM is installed.
    time_limit : int
        Retrieval rows are timed on the first ``time_limit`` judged queries.
    out : path, optional
        Where ``frontier.csv``, ``frontier.png`` and the written learned model go (default
        ``$QMDLAB_HOME/eval/<suite>/results/frontier``).
    limit : int, optional
        Only the first ``limit`` judged queries (a smoke run; ``llm_queries`` stays at most this).
    reranker_runs : sequence of path, optional
        Finished ``qmdlab train reranker`` runs to add (besides those of this suite under ``runs/``);
        ``None`` = none at all. Each adds a ``trained reranker`` row: its held-out k-fold scores
        under the position blend, timed live on a few queries with the trained model.
    """
    from .record import judged_queries, record, suite_config
    from .study import Study

    if load_models is None:
        from qmdlab.models import load_models as default_load_models

        load_models = default_load_models
    base = base or suite_config(suite)
    out_dir = Path(out) if out else suite.workdir() / "results" / "frontier"
    out_dir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    trained_runs = _reranker_runs(suite, reranker_runs)  # a bad --reranker-run fails before any work
    retrieval_models = load_models(preset, expand="none", rerank="none")
    retrieval_cfg = base.replace(expand=False, rerank=False)
    rec = record(
        suite, retrieval_models, retrieval_cfg, limit=limit, name="frontier-retrieval", progress=progress, log=log
    )
    if limit and (llm_queries is None or llm_queries > limit):
        llm_queries = limit
    study = Study.from_recording(rec, metrics=[metric])
    # a collection with an official split (SciFact): every row is reported on its test queries, and the
    # tuned and learned rows fit the training queries (Study.folds)
    reported = suite.report_qids()
    unfitted = "test split (nothing fitted)" if reported else "all queries (nothing fitted)"
    fitted = "fitted on train, scored on test" if reported else f"{folds}-fold"
    hybrid = study.config
    has_vector = bool(study.trace.lists.filter(pl.col("source") == "vec").height)
    points: list[Point] = []
    rows = [
        v
        for v in variants(hybrid, has_vector=has_vector, has_expansion=False, has_rerank=False)
        if v.name in ("bm25", "vector")
    ]
    if has_vector:
        rows += [
            Variant(f"hybrid {m}", ORIGINAL, {"fusion": m, "rerank": False}, f"BM25 + vectors, {m} fusion")
            for m in FUSION_METHODS
        ]
    else:
        notes.append("no vectors in the suite's index (no embedder?): vector and hybrid rows left out")
    configs = {"bm25": hybrid.replace(vector=False), "vector": None}
    for v in rows:
        ev = study.evaluate(hybrid.replace(**v.overrides), lists=v.lists)
        cfg = configs.get(v.name, hybrid.replace(**v.overrides))
        points.append(
            Point(
                v.name,
                v.description,
                ev.per_query.select("qid", metric),
                unfitted,
                cfg,
                "bm25" if v.name == "bm25" else "bm25+vector",
                None,
            )
        )
    # the doc-queries column (doc2query), when the index has one written: the bm25 and hybrid rows with it weighted
    from qmdlab.store.doc_expansions import has_doc_expansions

    expanded = hybrid.replace(bm25_weight_doc_queries=DOC_QUERY_WEIGHT)
    with_doc_expansions = has_doc_expansions(rec.lab.index)
    if with_doc_expansions:
        from .lexical import LexicalStudy

        lex_study = LexicalStudy(study, rec.lab.index)
        for v in [r for r in rows if r.name in ("bm25", f"hybrid {hybrid.fusion}")]:
            bm25_only = v.name == "bm25"
            cfg = expanded.replace(vector=False) if bm25_only else expanded.replace(**v.overrides)
            ev = lex_study.evaluate(expanded.replace(**v.overrides), lists=v.lists)
            points.append(
                Point(
                    f"{v.name} + doc expansions",
                    f"{v.description}, + the generated-query column (weight {DOC_QUERY_WEIGHT:g})",
                    ev.per_query.select("qid", metric),
                    unfitted,
                    cfg,
                    "bm25+doc-expansions" if bm25_only else "bm25+vector+doc-expansions",
                    None,
                )
            )
    # k-fold rows: tuned knobs and learned fusion, each query scored by a model fitted without it
    from .optimise import cross_validate

    log(f"frontier: tuning {len(study.qids)} queries ({folds} folds, {trials} trials, seed {seed})")
    report = cross_validate(study, base=hybrid, trials=trials, folds=folds, seed=seed, metric=metric)
    points.append(
        Point(
            "tuned",
            f"knobs tuned by `qmdlab tune` ({fitted})",
            report.held_out.select("qid", pl.col("tuned").alias(metric)),
            fitted,
            report.config,
            "bm25+vector",
            None,
        )
    )
    learned_cfg = None
    if learned:
        try:
            import lightgbm  # noqa: F401
        except ImportError:
            notes.append("learned fusion left out: pip install 'qmdlab[learn]' (LightGBM)")
        else:
            from .learn import LearnConfig, cross_validate_learned, save, suite_docs

            log("frontier: learned fusion")
            study.docs = suite_docs(suite)
            lcfg = LearnConfig(folds=folds, seed=seed)
            lrep = cross_validate_learned(study, base=hybrid, cfg=lcfg, metric=metric)
            paths = save(
                lrep,
                out_dir / "learned",
                hybrid,
                cfg=lcfg,
                docid=suite.docid,
                header=f"qmdlab eval {suite.name} --frontier: learned fusion, {lrep.summary(metric)}",
            )
            learned_cfg = PipelineConfig.from_file(paths["config"])
            points.append(
                Point(
                    "learned fusion",
                    f"LightGBM lambdarank fusion ({fitted})",
                    lrep.held_out.select("qid", pl.col("learned").alias(metric)),
                    fitted,
                    learned_cfg,
                    "learned fusion",
                    None,
                    files={"config": paths["config"]},
                )
            )
    # timing the retrieval rows, now, on this machine
    timed = judged_queries(suite).join(study.trace.queries.select("qid"), on="qid", how="semi").head(time_limit)
    from qmdlab.pipeline.lab import Lab

    runs = {"bm25": hybrid.replace(vector=False), "bm25+vector": hybrid}
    if learned_cfg is not None:
        runs["learned fusion"] = learned_cfg
    if with_doc_expansions:
        runs["bm25+doc-expansions"] = expanded.replace(vector=False)
        if has_vector:
            runs["bm25+vector+doc-expansions"] = expanded
    # timed at a query's own result count (10), not the recording's evaluation depth: snippets are built per result
    shown = PipelineConfig().limit
    labs = {name: Lab(rec.lab.index, retrieval_models, cfg.replace(limit=shown)) for name, cfg in runs.items()}
    seconds = {name: _median(v) for name, v in time_interleaved(labs, timed).items()}
    for p in points:
        p.seconds = seconds.get(p.timed_as)
    # trained rerankers of this suite (`qmdlab train reranker` runs): their held-out k-fold scores, timed live
    for run in trained_runs:
        got = _trained_reranker(run, rec, retrieval_models, hybrid, timed.head(3), preset, load_models, metric, log)
        if got is not None:
            points.append(got)
    # the LLM rows
    n_llm = cands = 0
    if llm_queries != 0:
        from qmdlab.pipeline.stages import model_roles

        models = load_models(preset, **model_roles(base))  # a stage planned off loads no model
        if models.expander is None and models.reranker is None:
            notes.append("the preset has no expander or reranker: no LLM rows")
        else:
            cands = candidates or base.candidate_limit
            llm_cfg = base.replace(candidate_limit=cands)
            from .record import _measured_seconds, estimate, model_fingerprints

            cost = estimate(suite, models, llm_cfg, limit=llm_queries or None)
            log(f"frontier: LLM recording, {llm_queries or 'all'} queries, top {cands} reranked: {cost.summary()}")
            rec2 = record(
                suite,
                models,
                llm_cfg,
                limit=llm_queries or None,
                qids=reported,
                name="frontier-llm",
                progress=progress,
                log=log,
            )
            s2 = Study.from_recording(rec2, metrics=[metric])
            n_llm = len(s2.qids)
            lists = s2.trace.lists
            llm_rows = [
                v
                for v in variants(
                    s2.config,
                    has_vector=has_vector,
                    has_expansion=bool(lists.filter(~ORIGINAL).height),
                    has_rerank=bool(s2.trace.rerank.drop_nulls("rerank_score").height),
                )
                if v.name in LLM_ROWS
            ]
            # the recording built snippets for its evaluation depth (100 results), a query shows 10: left out
            stages_all = [s for s in s2.trace.timings["stage"].unique().to_list() if s != "snippets"]
            stages_no_rerank = [s for s in stages_all if s not in ("select", "rerank")]
            _, exp_s, rr_s = _measured_seconds(suite, model_fingerprints(models))
            for v in llm_rows:
                ev = s2.evaluate(s2.config.replace(**v.overrides), lists=v.lists)
                rerank_row = v.name == "+rerank"
                secs = _median(
                    [
                        recorded_seconds(
                            s2.trace, q, stages_all if rerank_row else stages_no_rerank, models, (exp_s, rr_s)
                        )
                        for q in s2.qids
                    ]
                )
                cfg = {"+lex+vec+hyde": s2.config.replace(rerank=False), "+rerank": s2.config}.get(v.name)
                points.append(
                    Point(
                        v.name,
                        v.description + f" ({n_llm} queries)",
                        ev.per_query.select("qid", metric),
                        unfitted,
                        cfg,
                        "recorded pipeline" if rerank_row else "recorded, rerank stages left out",
                        secs,
                        recording="llm",
                    )
                )
            if not llm_rows:
                notes.append("the LLM recording has no expansion or rerank output (see its notes)")
            elif models.expander is not None and not lists.filter(~ORIGINAL).height:
                notes.append(f"no expansion rows: the expander gave no usable lines on the {n_llm} LLM queries")
    if reported is not None:
        for p in points:
            p.per_query = p.per_query.filter(pl.col("qid").is_in(list(reported)))
    table = _table(points, metric)
    n_reported = len(study.qids) if reported is None else len(set(study.qids) & set(reported))
    result = Frontier(suite.name, metric, points, table, n_llm, n_reported, out_dir, notes, cands, timed.height)
    table.write_csv(out_dir / "frontier.csv")
    pl.concat([p.per_query.with_columns(pl.lit(p.name).alias("config")) for p in points]).write_parquet(
        out_dir / "per_query.parquet"
    )
    plot(result, out_dir / "frontier.png")
    return result


def _reranker_runs(suite, extra: Sequence[str | Path] | None) -> list[Path]:
    if extra is None:
        return []
    try:
        from qmdlab.training import reranker_study
    except ImportError:  # the training extra is not installed
        return [Path(e) for e in extra]
    found = reranker_study.finished_runs(suite.name, extra=extra)
    for e in extra:
        if Path(e).resolve() not in {f.resolve() for f in found}:
            raise ConfigError(
                f"--reranker-run {e}: not a finished `qmdlab train reranker` run of suite "
                f"{suite.name!r} (needs DONE, heldout_scores.parquet and recorded/); train one with "
                f"`qmdlab train reranker --suite {suite.name} --out {e} --folds 5`, or drop the flag"
            )
    return found


def _trained_reranker(
    run: Path,
    rec,
    retrieval_models,
    hybrid: PipelineConfig,
    timed: pl.DataFrame,
    preset,
    load_models: Callable,
    metric: str,
    log: Callable[[str], None],
) -> Point | None:
    """The row of a trained reranker run: held-out scores (each query reranked by the fold model that never
    saw it, qmd's position blend) and the live s/query of retrieval + the trained model on ``timed``."""
    from qmdlab.models.base import ModelSet
    from qmdlab.pipeline.lab import Lab
    from qmdlab.training import reranker_study
    from qmdlab.training.reranker import load_report

    held = reranker_study.load_heldout_study(run)
    ev = held.study.evaluate(held.start)
    report = load_report(run)
    ref = report.model if report is not None else None
    secs, timed_as = None, "not timed (the run saved no model)"
    if ref:
        log(f"frontier: timing the trained reranker {ref}")
        model = load_models(preset, expand="none", rerank=str(ref)).reranker
        cfg = hybrid.replace(
            rerank=True,
            candidate_limit=held.fused.candidate_limit,
            blend=held.start.blend,
            limit=PipelineConfig().limit,
        )
        lab = Lab(rec.lab.index, ModelSet(retrieval_models.embedder, None, model), cfg)
        lab.reranker = model  # every pair computed: the LLM cache would answer repeats for free
        secs = _median(time_queries(lab, timed))
        timed_as = f"trained reranker, {timed.height} queries"
    return Point(
        "trained reranker",
        f"{run} (held-out folds, position blend; QMDLAB_RERANK_MODEL={ref})",
        ev.per_query.select("qid", metric),
        "k-fold (trained)",
        None,
        timed_as,
        secs,
        recording="trained",
    )


def _table(points: list[Point], metric: str) -> pl.DataFrame:
    """Per point: n, mean, s/query, the best cheaper point, Δ and paired p-values against it, front."""
    rows = []
    for p in points:
        cheaper = [
            c
            for c in points
            if c is not p and c.seconds is not None and p.seconds is not None and c.seconds < p.seconds
        ]
        best, common = None, None
        for c in cheaper:
            qids = sorted(set(p.per_query["qid"]) & set(c.per_query["qid"]))
            if not qids:
                continue
            if best is None or c.mean(metric, qids) > best.mean(metric, qids):
                best, common = c, qids
        delta = p_t = p_f = None
        if best is not None and common is not None:  # set together
            a = best.per_query.filter(pl.col("qid").is_in(common)).sort("qid")[metric].to_numpy()
            b = p.per_query.filter(pl.col("qid").is_in(common)).sort("qid")[metric].to_numpy()
            p_t, p_f = paired_pvalues(a, b)
            delta = float(b.mean() - a.mean())
        rows.append(
            {
                "config": p.name,
                "n": p.n,
                metric: p.mean(metric),
                "held_out": p.held_out,
                "s_per_query": p.seconds,
                "timed_as": p.timed_as,
                "vs_cheaper": best.name if best else None,
                "delta": delta,
                "p_ttest": p_t,
                "p_fisher": p_f,
                "pareto": _on_front(p, points, metric),
                "writable": p.config is not None,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "config": pl.String,
            "n": pl.Int64,
            metric: pl.Float64,
            "held_out": pl.String,
            "s_per_query": pl.Float64,
            "timed_as": pl.String,
            "vs_cheaper": pl.String,
            "delta": pl.Float64,
            "p_ttest": pl.Float64,
            "p_fisher": pl.Float64,
            "pareto": pl.Boolean,
            "writable": pl.Boolean,
        },
    )


def _on_front(p: Point, points: list[Point], metric: str) -> bool:
    """No other timed point is at least as fast and at least as good (on the queries both stand on),
    and strictly better on one axis."""
    if p.seconds is None:
        return False
    for c in points:
        if c is p or c.seconds is None:
            continue
        qids = sorted(set(p.per_query["qid"]) & set(c.per_query["qid"]))
        if not qids:
            continue
        mp, mc = p.mean(metric, qids), c.mean(metric, qids)
        if c.seconds <= p.seconds and mc >= mp and (c.seconds < p.seconds or mc > mp):
            return False
    return True


# -- output ----------------------------------------------------------------------------------------
def format_frontier(result: Frontier) -> str:
    """The frontier as fixed-width text (what ``qmdlab eval --frontier`` prints)."""
    m = result.metric
    t = result.table
    width = max([16, *(len(c) for c in t["config"].to_list())])
    lines = [
        f"{'configuration':<{width}} {'n':>4} {m + ' (held-out)':>18} {'s/query':>9}  {'vs best cheaper':<22}"
        f" {'Δ':>7} {'p(t)':>7} {'p(F)':>7}  front"
    ]
    for r in t.iter_rows(named=True):
        secs = "—" if r["s_per_query"] is None else format_seconds(r["s_per_query"])
        vs = r["vs_cheaper"] or "— (fastest)"
        d = "" if r["delta"] is None else f"{r['delta']:+.4f}"
        pt = "" if r["p_ttest"] is None else f"{r['p_ttest']:.3g}"
        pf = "" if r["p_fisher"] is None else ("<0.001" if r["p_fisher"] == 0 else f"{r['p_fisher']:.3g}")
        lines.append(
            f"{r['config']:<{width}} {r['n']:>4} {r[m]:>18.4f} {secs:>9}  {vs:<22} {d:>7} {pt:>7} {pf:>7}  "
            f"{'*' if r['pareto'] else ''}"
        )
    lines.append(
        "held-out: rows with nothing fitted score every query; tuned/learned rows are k-fold. p: paired "
        "t-test / Fisher against the best cheaper row on the same queries. s/query: median, this machine "
        f"(retrieval rows timed now{f' on {result.timed_queries} queries' if result.timed_queries else ''}; "
        "LLM rows from their recording). * = on the Pareto front."
    )
    if result.llm_queries:
        lines.append(
            f"LLM rows (+lex … +rerank) stand on the first {result.llm_queries} of {result.queries} judged "
            f"queries (--llm-queries), top {result.candidates} fused documents reranked (--candidates)."
        )
    lines += result.notes
    return "\n".join(lines)


def format_seconds(s: float) -> str:
    """``12.3 ms`` below a second, ``1.23 s`` from one on.

    >>> format_seconds(0.0123), format_seconds(1.234)
    ('12.3 ms', '1.23 s')
    """
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def plot(result: Frontier, path: Path) -> Path | None:
    """nDCG@10 against s/query (log scale), the Pareto front drawn and marked, into ``path`` (PNG)."""
    from .frontier_plot import figure

    fig = figure(result.table, result.metric, title=_title(result))
    if fig is None:
        return None
    fig.savefig(path)
    return path


def _title(result: Frontier) -> str:
    llm = f"; squares: first {result.llm_queries} queries" if result.llm_queries else ""
    return f"{result.suite}: quality vs latency ({result.queries} queries{llm})"


__all__ = [
    "Point",
    "Frontier",
    "frontier",
    "format_frontier",
    "plot",
    "format_seconds",
    "time_queries",
    "time_interleaved",
    "recorded_seconds",
    "LLM_ROWS",
]

"""CLI verbs of the evaluation area: ``qmdlab eval`` and ``qmdlab tune``.

Both are thin front ends over :mod:`eval` (suites, runner, ablation, optimise). They live here,
above the core, and reach ``qmdlab/cli.py`` through the ``qmdlab.commands`` entry points in
``pyproject.toml`` (one per verb), so the core never imports :mod:`qmdlab.eval`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import click

from qmdlab.errors import ConfigError, import_extra
from qmdlab.role_options import model_options
from qmdlab.scale.cli_options import ray_options, ray_options_from


def _to_stderr(message: str) -> None:
    """Where the verbs' progress and notes go (stdout holds their results)."""
    click.echo(message, err=True)


def _check_folds(folds: int) -> None:
    """``--folds`` of ``tune`` and ``eval --frontier``: at least 2."""
    if folds < 2:
        raise ConfigError("--folds must be at least 2 (the held-out check needs a test fold)")


class SuiteChoice(NamedTuple):
    """SUITE and the options of :func:`suite_options`, as the verb was given them: which suite, how
    to read it, the ``--config`` file and the ``--expand``/``--rerank`` flags."""

    name: str
    fmt: str | None
    corpus: str | None
    grades: str | None
    config_path: str | None
    expand: bool | None
    rerank: bool | None

    def open(self, preset: str | None, **kw):
        """The suite, read now (once), and the run's config — the ``--config`` file, else the suite's
        own — with its stages planned by the rule of every front end
        (:func:`qmdlab.pipeline.stages.plan_stages`: flag, config, preset; ``kw`` goes to it), the plan
        said first on stderr, as ``qmdlab query`` says it. Returns ``(suite, config, plan, config path)``."""
        from qmdlab.eval.suites import get_suite
        from qmdlab.pipeline.config import PipelineConfig
        from qmdlab.pipeline.stages import plan_stages, preset_name

        root = click.get_current_context().find_root().obj or {}
        suite = get_suite(self.name, self.fmt, corpus=self.corpus, index=root.get("index"), grades=self.grades)
        suite.data()  # a malformed file is the one error line, before the stage plan's
        path = self.config_path or (str(suite.config) if suite.config else None)
        cfg = PipelineConfig.from_file(path) if path else PipelineConfig()
        cfg, plan = plan_stages(cfg, preset_name(preset), expand=self.expand, rerank=self.rerank, **kw)
        click.echo(plan.line(), err=True)
        return suite, cfg, plan, path


def _roles(cfg, roles: dict) -> dict:
    """``load_models`` roles: the ``--*-model`` overrides, and ``none`` for a stage planned off."""
    from qmdlab.pipeline.stages import model_roles

    return {**roles, **model_roles(cfg)}


def _models(plan, cfg, roles: dict):
    from qmdlab.models import load_models

    return load_models(plan.preset, **_roles(cfg, roles))


_EXPAND_HELP = (
    "Run query expansion, or skip it [default: the preset's — off for offline, offline-gemma and tiny, "
    "on for qmd — unless the config sets 'expand'], as on `qmdlab query`."
)
_RERANK_HELP = (
    "Rerank the fused candidates with the LLM reranker, or keep the fusion order [default: the preset's — "
    "off for offline, offline-gemma and tiny, on for qmd — unless the config sets 'rerank'], as on `qmdlab query`."
)


_FORMATS = ["qmdlab", "smart", "trec", "beir", "jsonl", "qmd-bench"]
_GRADES_HELP = (
    "How a SMART collection's relevance codes are read: gain (the code is the gain; default, or "
    "$QMDLAB_SMART_GRADES) or rank (1 = complete answer: gain = max_code + 1 - code, codes < 1 not "
    "relevant)."
)
_CORPUS_HELP = (
    "With --format qmd-bench: the markdown folder the fixture's expected_files are relative to "
    "(default: the qmdlab collection the fixture names)."
)


def suite_options(config_help: str) -> Callable:
    """SUITE and the options that say how to read it and which stages run — ``--format``, ``--corpus``,
    ``--grades``, ``--config``, ``--expand/--no-expand``, ``--rerank/--no-rerank`` — spelt once for every
    verb over a suite (``eval``, ``tune``), which gets them as one :class:`SuiteChoice`, its ``suite``
    parameter; ``config_help`` says what the verb does with ``--config``."""
    decorators = [
        click.argument("suite"),
        click.option(
            "--format",
            "fmt",
            type=click.Choice(_FORMATS),
            default=None,
            help="Format of a suite directory (detected when omitted); qmd-bench: a qmd bench fixture file.",
        ),
        click.option("--corpus", type=click.Path(file_okay=False), default=None, help=_CORPUS_HELP),
        click.option("--grades", type=click.Choice(["gain", "rank"]), default=None, help=_GRADES_HELP),
        click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None, help=config_help),
        click.option("--expand/--no-expand", "expand", default=None, help=_EXPAND_HELP),
        click.option("--rerank/--no-rerank", "rerank", default=None, help=_RERANK_HELP),
    ]

    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)  # the help text and the options declared below stay the command's
        def with_suite(*args, suite, fmt, corpus, grades, config_path, expand, rerank, **kwargs):
            return fn(*args, suite=SuiteChoice(suite, fmt, corpus, grades, config_path, expand, rerank), **kwargs)

        for decorator in reversed(decorators):  # click lists options in the order they are written
            with_suite = decorator(with_suite)
        return with_suite

    return deco


def _tune_learn(
    suite, study, *, folds: int, seed: int, metric: str, out: str, explain_qid: str | None, limit: int
) -> None:
    """``qmdlab tune --learn``: cross-validated learned fusion (all logic in :mod:`qmdlab.eval.learn`)."""
    from qmdlab.eval.learn import (
        LearnConfig,
        cross_validate_learned,
        explain_query,
        format_explain,
        save,
        suite_docs,
        timing,
    )

    study.docs = suite_docs(suite)
    cfg = LearnConfig(folds=folds, seed=seed)
    report = cross_validate_learned(study, cfg=cfg, metric=metric, progress=_to_stderr)
    click.echo(report.folds)
    click.echo(report.summary(metric))
    header = (
        f"qmdlab tune {suite.name} --learn: {report.summary(metric)}\n"
        f"LightGBM lambdarank, {folds} folds, seed {seed}; model trained on all judged queries"
    )
    # evaluation ran deeper (recall@100); the written config keeps the user's limit
    paths = save(report, out, study.config.replace(limit=limit), cfg=cfg, header=header, docid=suite.docid)
    click.echo(
        f"re-fusion of all {len(study.qids)} queries: {timing(study, report.booster, study.config, prior_scale=report.prior_scale):.1f} ms "
        "(features + predict + blend)"
    )
    click.echo(f"wrote {paths['model']}, {paths['config']} (use: qmdlab eval {suite.name} --config {paths['config']})")
    click.echo(f"held-out run: {paths['heldout']}  default run: {paths['default']}  (collection ids)")
    if explain_qid is not None:
        click.echo(
            format_explain(
                explain_query(study, report.booster, explain_qid, prior_scale=report.prior_scale), explain_qid
            )
        )
    if report.gain <= 0:
        click.echo(
            "note: learned fusion did not improve held-out queries; the default config is the safer choice", err=True
        )


def _row_names(
    value: str | None, ablate: bool, flag: str, every: tuple[str, ...], check: Callable[[str, str], str]
) -> tuple[str, ...]:
    """An ablation flag's ``all|NAME,…`` → names: ``all`` is ``every``, each other name passes ``check``
    (which names the flag in its error); the flag adds ablation rows, so it needs ``--ablate``."""
    if not value:
        return ()
    if not ablate:
        raise click.UsageError(f"{flag} adds ablation rows: give --ablate too")
    if value.strip() == "all":
        return every
    return tuple(check(v.strip(), flag) for v in value.split(",") if v.strip())


def _chunkers(value: str | None, ablate: bool) -> tuple[str, ...]:
    """``--chunkers`` → names (``all`` = every chunker); it needs ``--ablate``.

    >>> _chunkers("all", True), _chunkers("headings, breakpoints", True), _chunkers(None, False)
    (('breakpoints', 'headings', 'fences-and-tables'), ('headings', 'breakpoints'), ())
    """
    from qmdlab.store.chunkers import CHUNKERS, check_chunker

    return _row_names(value, ablate, "--chunkers", CHUNKERS, check_chunker)


def _variants(value: str | None, ablate: bool) -> tuple[str, ...]:
    """``--variants`` → recorded-variant names (``all`` = every one); it needs ``--ablate``.

    >>> _variants("all", True)[:3], _variants("like, no-skip", True), _variants(None, False)
    (('phrase', 'like', 'trigram'), ('like', 'no-skip'), ())
    """
    from qmdlab.eval.ablation import RECORDED_VARIANTS, check_variant

    return _row_names(value, ablate, "--variants", tuple(RECORDED_VARIANTS), check_variant)


def _frontier(
    *,
    suite: SuiteChoice,
    preset,
    roles,
    out,
    progress,
    llm_queries,
    candidates,
    folds,
    seed,
    write_config_path,
    pick_rule,
    extra: list[str],
    ablation_flags: bool,
    reranker_runs=(),
    limit: int | None = None,
    **_eval_only,
) -> None:
    """``qmdlab eval SUITE --frontier``: all logic in :mod:`qmdlab.eval.frontier`. Takes ``eval``'s
    parameters by name (those of the other modes are ignored); ``ablation_flags``: any of
    --ablate/--chunkers/--variants given, which the frontier refuses."""
    from functools import partial

    from qmdlab.eval.frontier import format_frontier, frontier
    from qmdlab.eval.frontier_pick import parse_pick, pick, write_pick
    from qmdlab.models import load_models

    if ablation_flags:
        raise click.UsageError(
            "--frontier runs its own configurations: drop --ablate/--chunkers/--variants "
            "(--llm-queries N limits the LLM rows, --limit N every row)"
        )
    rule, delta = parse_pick(pick_rule, extra)
    if extra and rule != "fastest-within" or len(extra) > 1:
        raise click.UsageError(f"Got unexpected extra argument(s) ({' '.join(extra)})")
    text = str(llm_queries).strip().lower()
    if text == "all":
        n_llm = None
    elif text.isdigit():
        n_llm = int(text)
    else:
        raise click.BadParameter(f"{llm_queries!r}: give a number of queries or 'all'", param_hint="--llm-queries")
    _check_folds(folds)
    # the LLM rows are there to measure expansion and rerank: each is on unless a flag or the config says off
    s, cfg, plan, _ = suite.open(
        preset,
        defaults={"expand": True, "rerank": True},
        default_reason=f"the frontier's LLM rows measure it on {n_llm if n_llm is not None else 'all'} queries",
    )
    if not (cfg.expand or cfg.rerank):
        n_llm = 0
    click.echo(f"suite {s.name}: frontier, {s.grades_note()}")
    res = frontier(
        s,
        plan.preset,
        base=cfg,
        llm_queries=n_llm,
        candidates=candidates,
        folds=folds,
        seed=seed,
        out=out,
        progress=progress,
        log=_to_stderr,
        reranker_runs=reranker_runs,
        limit=limit,
        load_models=partial(load_models, **roles),
    )
    click.echo(format_frontier(res))
    assert res.out_dir is not None  # frontier() always writes its picture and table
    click.echo(f"plot: {res.out_dir / 'frontier.png'}  table: {res.out_dir / 'frontier.csv'}")
    if write_config_path:
        chosen = pick(res, rule, delta)
        path = write_pick(res, chosen, write_config_path, rule, delta)
        click.echo(
            f"picked {chosen.name} ({'best' if rule == 'best' else f'fastest within {delta:g}'}): wrote {path} "
            f"(use: qmdlab query --config {path})"
        )


def register(group: click.Group) -> None:
    @group.command("eval", context_settings={"allow_extra_args": True})
    @suite_options("Pipeline config (YAML/TOML) — e.g. the file `qmdlab tune` writes.")
    @click.option("--ablate", is_flag=True, help="Also print the ablation matrix (cut from the same traces).")
    @click.option(
        "--baseline",
        default="best-leg",
        show_default=True,
        help="Ablation row the p-values compare against (best-leg = the better of bm25/vector; "
        "chunker=breakpoints with --chunkers).",
    )
    @click.option(
        "--chunkers",
        default=None,
        metavar="all|NAME,…",
        help="With --ablate: a row per chunker (breakpoints, headings, fences-and-tables), each from its "
        "own index and recording of the same queries.",
    )
    @click.option(
        "--variants",
        "variant_names",
        default=None,
        metavar="all|NAME,…",
        help="With --ablate: a row per feature that changes retrieval (phrase, like, trigram, heading, "
        "two-unit-gate, field-weights, no-skip, doc-queries), each the same queries recorded again with it.",
    )
    @click.option(
        "--out",
        "out",
        type=click.Path(file_okay=False),
        default=None,
        help="Write <run>.trec files, metrics.json, traces, … into this directory.",
    )
    @model_options()
    @click.option("--limit", type=int, default=None, help="Only the first N judged queries (a smoke run).")
    @click.option("--per-query", is_flag=True, help="Print every query's metrics too.")
    @click.option("--progress/--no-progress", default=True, help="Progress bars on stderr.")
    @click.option(
        "--frontier",
        is_flag=True,
        help="The quality-latency frontier: BM25, vector, hybrid under each fusion, tuned and learned "
        "fusion (k-fold), +lex/+vec/+hyde and +rerank; held-out nDCG@10, paired p against the best "
        "cheaper row, median s/query on this machine, the Pareto front (frontier.png).",
    )
    @click.option(
        "--llm-queries",
        default="10",
        show_default=True,
        metavar="N|all",
        help="With --frontier: judged queries of the LLM rows (expansion, rerank); 0 leaves them out.",
    )
    @click.option(
        "--candidates",
        type=int,
        default=None,
        help="With --frontier: documents reranked per query in the LLM rows [default: the config's candidate_limit].",
    )
    @click.option(
        "--folds",
        type=int,
        default=5,
        show_default=True,
        help="With --frontier: folds of the tuned and learned rows (as `qmdlab tune`).",
    )
    @click.option("--seed", type=int, default=0, show_default=True, help="With --frontier: the folds' seed.")
    @click.option(
        "--reranker-run",
        "reranker_runs",
        multiple=True,
        type=click.Path(file_okay=False),
        help="With --frontier: a finished `qmdlab train reranker` run to add as a row (runs/* of the "
        "suite are added anyway).",
    )
    @click.option(
        "--write-config",
        "write_config_path",
        type=click.Path(dir_okay=False),
        default=None,
        help="With --frontier: write the --pick configuration for `qmdlab query --config`.",
    )
    @click.option(
        "--pick",
        "pick_rule",
        default="best",
        show_default=True,
        metavar="best|fastest-within D",
        help="With --write-config: the highest held-out nDCG@10, or the fastest row within D of it "
        "(--pick fastest-within 0.005).",
    )
    @ray_options
    @click.pass_context
    def eval_cmd(
        ctx,
        suite,
        ablate,
        baseline,
        chunkers,
        variant_names,
        out,
        preset,
        roles,
        limit,
        per_query,
        progress,
        frontier,
        llm_queries,
        candidates,
        folds,
        seed,
        reranker_runs,
        write_config_path,
        pick_rule,
        ray_address,
        ray_actors,
        ray_cpus,
        ray_gpus,
    ) -> None:
        """Run every judged query of SUITE (a registered suite — default, cisi — or a directory)
        through the pipeline and report nDCG@10, MRR@10, recall@10/100 and P@5 (ranx definitions).
        With --ray, Ray actors compute the traces not yet cached (same cache, run files and metrics).
        With --frontier, every configuration a user chooses between, held-out and timed."""
        from qmdlab.eval.ablation import format_ablation
        from qmdlab.eval.runner import run_name, run_suite

        import_extra("ranx", "eval")  # before any query runs, not after the last one
        extra = list(ctx.args)
        if frontier:
            flags = {**ctx.params, "suite": suite, "roles": roles}  # SUITE as one choice, the --<role>-model options
            _frontier(**flags, extra=extra, ablation_flags=ablate or bool(chunkers) or bool(variant_names))
            return
        if extra:
            raise click.UsageError(f"Got unexpected extra argument{'s' if len(extra) > 1 else ''} ({' '.join(extra)})")
        if write_config_path:
            raise click.UsageError("--write-config writes the frontier's pick: give --frontier too")
        ray_opts = ray_options_from(ray_address, ray_actors, ray_cpus, ray_gpus)
        names = _chunkers(chunkers, ablate)  # flags first: a typo fails before any suite or model is loaded
        recorded_variants = _variants(variant_names, ablate)
        s, cfg, plan, path = suite.open(preset)
        models = _models(plan, cfg, roles)
        remote = None
        if ray_opts is not None:
            from qmdlab.scale.ray_queries import ModelSpec, RayQueries

            spec = ModelSpec.resolve(plan.preset, **_roles(cfg, roles))
            remote = RayQueries(spec, ray_opts, models=models, progress=progress)
        res = run_suite(
            s,
            models,
            cfg,
            out=out,
            name=run_name(cfg, path),
            ablate=ablate,
            baseline=baseline,
            limit=limit,
            progress=progress,
            log=_to_stderr,
            remote=remote,
            chunkers=names,
            recorded_variants=recorded_variants,
        )
        if per_query:
            click.echo(res.per_query.filter(res.per_query["run"] == res.name).drop("run"))
        n = res.timings["queries"]
        click.echo(
            f"suite {s.name}: {n} judged queries, {s.grades_note()} ({res.timings['queries_cached']} traces "
            f"from cache), {res.timings['query_s']:.1f} s"
        )
        for metric, value in res.metrics[res.name].items():
            click.echo(f"{res.name:<24} {metric:<12} {value:.4f}")
        if s.format == "qmd-bench":
            from qmdlab.eval.qmdbench import print_bench

            print_bench(s, res, echo=click.echo, warn=_to_stderr)
        if res.ablation is not None:
            click.echo("")
            click.echo(format_ablation(res.ablation))
        click.echo(f"saved: {res.out_dir}")

    @group.command("tune")
    @suite_options("Starting pipeline config (the traces are recorded with it).")
    @click.option("--trials", type=int, default=200, show_default=True, help="Objective evaluations per search.")
    @click.option("--folds", type=int, default=5, show_default=True, help="Cross-validation folds over queries.")
    @click.option(
        "--method",
        type=click.Choice(["coordinate", "random", "grid", "tpe"]),
        default="coordinate",
        show_default=True,
        help="Search method (tpe needs Optuna: pip install 'qmdlab[tune]').",
    )
    @click.option("--metric", default="ndcg@10", show_default=True, help="Objective metric.")
    @click.option("--seed", type=int, default=0, show_default=True)
    @model_options()
    @click.option(
        "--out",
        "out",
        type=click.Path(),
        default=None,
        help="Where to write the tuned config (default config.yaml; read by `qmdlab query --config` "
        "and `qmdlab eval --config`). With --learn: a directory (default learned/) for the model, "
        "config.yaml, learned-heldout.trec and default.trec.",
    )
    @click.option(
        "--learn",
        is_flag=True,
        help="Train fusion=learned (LightGBM lambdarank over trace features) with k-fold CV over queries "
        "instead of searching knobs (needs: pip install 'qmdlab[learn]').",
    )
    @click.option(
        "--lexical",
        is_flag=True,
        help="Also tune the BM25 column weights (bm25_weight_title/body/filepath, and bm25_weight_doc_queries "
        "when the suite's index has expansions); each new setting re-runs the recorded BM25 lists against the "
        "suite's index (slower).",
    )
    @click.option(
        "--explain",
        "explain_qid",
        default=None,
        metavar="QID",
        help="With --learn: print each feature's contribution (pred_contrib) to the top results of query QID.",
    )
    @click.option("--progress/--no-progress", default=True)
    def tune_cmd(
        suite,
        trials,
        folds,
        method,
        metric,
        seed,
        preset,
        roles,
        out,
        learn,
        lexical,
        explain_qid,
        progress,
    ) -> None:
        """Tune fusion weights, rrf_k, bonuses, candidate limit and blend bands on SUITE with
        k-fold cross-validation; print the held-out gain and write the best config.
        With --learn, train a learned fusion model instead (same folds, held-out report)."""
        from qmdlab.eval.optimise import cross_validate, write_config
        from qmdlab.eval.runner import run_suite
        from qmdlab.eval.study import Study

        import_extra("ranx", "eval")  # before any query runs, not after the last one
        _check_folds(folds)
        if explain_qid is not None and not learn:
            raise ConfigError("--explain QID needs --learn (it explains the learned model's scores)")
        out = out or ("learned" if learn else "config.yaml")
        if learn and Path(out).suffix in (".yaml", ".yml", ".toml"):
            raise ConfigError(f"--out {out}: with --learn, --out is a directory (model, config.yaml, run files)")
        s, cfg, plan, _ = suite.open(preset)
        click.echo(f"suite {s.name}: {s.grades_note()}", err=True)
        res = run_suite(
            s,
            _models(plan, cfg, roles),
            cfg,
            name="tune-base",
            progress=progress,
            log=_to_stderr,
            all_queries=True,
        )
        # the recorded config (eval depth 100); a suite's official split makes the folds train -> test
        study = Study(res.trace, res.qrels, metrics=[metric], split=s.split)
        if learn:
            _tune_learn(
                s, study, folds=folds, seed=seed, metric=metric, out=out, explain_qid=explain_qid, limit=cfg.limit
            )
            return
        space = None
        if lexical:
            from qmdlab.eval.lexical import LexicalStudy, lexical_space
            from qmdlab.eval.optimise import default_space
            from qmdlab.store import Index

            lexical_study = LexicalStudy(study, Index.open(s.workdir() / "index"))
            space = default_space(study.config) + lexical_space(lexical_study.index)
            searched: Study | LexicalStudy = lexical_study
        else:
            searched = study
        report = cross_validate(
            searched,
            base=study.config,
            space=space,
            method=method,
            trials=trials,
            folds=folds,
            seed=seed,
            metric=metric,
            progress=_to_stderr,
        )
        click.echo(report.folds)
        click.echo(report.summary(metric))
        header = (
            f"qmdlab tune {s.name}: {report.summary(metric)}\n"
            f"method {method}, {trials} trials, {folds} folds, seed {seed}"
        )
        tuned = report.config.replace(limit=cfg.limit)  # evaluation ran deeper (recall@100); keep the user's limit
        write_config(tuned, Path(out), header=header)
        click.echo(f"changed options:\n{tuned.diff(cfg)}")
        click.echo(f"wrote {out}  (use: qmdlab eval {suite.name} --config {out})")
        if report.gain <= 0:
            click.echo(
                "note: tuning did not improve held-out queries; the default config is the safer choice", err=True
            )

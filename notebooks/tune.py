"""Tune the fusion and blend knobs live against labelled queries.

Run it:  marimo edit notebooks/tune.py   |   marimo run notebooks/tune.py
         python notebooks/tune.py --suite default --preset fake   (headless)

Arguments (after ``--`` for marimo): ``--suite NAME|DIR`` (default ``default``, the embedded
corpus), ``--preset offline|offline-mini|offline-gemma|qmd|tiny|fake`` (default ``$QMDLAB_PRESET`` / ``offline``),
``--limit N`` (only the first N judged queries: smoke runs), ``--save PATH`` (where
"Save config" writes; default ``$QMDLAB_HOME/configs/tuned.yaml``), ``--reranker DIR`` (a finished
``qmdlab train reranker`` run of the suite: start with its held-out scores as the rerank source).

The notebook opens what is already recorded (``qmdlab.eval.record``'s trace cache, shared with
``qmdlab eval`` and ``make demo``): after ``make demo`` the retrieval tier on every query and
the LLM tier on the queries it ran, loaded in seconds with no model. Recording more is a
button with its cost (measured from earlier recordings) and a progress bar; ``--record``
records what is missing without asking (headless runs). Every control change re-fuses and
re-blends the recorded traces with ``qmdlab.eval.study.Study`` — no model call, no index access.
The headline numbers (nDCG@10, MRR@10, recall@10) are one small cell that runs first on each change;
below it the per-query counts, the per-query table and the configuration diff (in a closed
accordion: mounted when opened) and the per-query plots (``qmdlab.eval.tune_view.DeltaFigure``:
drawn once per study, then given new points and bar heights). ``benchmarks/notebook_live_time.py``
times a control move to the new nDCG@10 on screen.

Rerank source: the recording's own rerank scores, or — when a finished ``qmdlab train reranker``
run of the suite exists (``runs/*``, e.g. ``make train-reranker``'s ``runs/reranker``, or
``--reranker DIR``) — that trained cross-encoder's held-out scores
(``qmdlab.training.reranker_study``): every query scored by the fold model that never saw it, only
those queries, deltas against the fused order. The blend controls then move nDCG@10 on
held-out queries only.
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="qmdlab · tune")

with app.setup(hide_code=True):
    from pathlib import Path

    import marimo as mo
    import polars as pl

    from qmdlab import models as qmodels
    from qmdlab.eval import choices, optimise, record, suites, tune_view
    from qmdlab.eval.lexical import LexicalStudy
    from qmdlab.eval.study import Study
    from qmdlab.paths import home
    from qmdlab.pipeline.config import BLEND_METHODS, BM25_MODES, FUSION_METHODS
    from qmdlab.store import Index
    from qmdlab.training import reranker_study


@app.cell(hide_code=True)
def _():
    _title = mo.md(r"""
    # Tune fusion and blend

    Pick a suite, then move any control: the labelled queries are re-fused and re-blended
    from their recorded traces and re-scored at once. Deltas are against the suite's
    default configuration.
    """)
    args = mo.cli_args()
    suite_arg = str(args.get("suite") or "default")
    preset = args.get("preset") or None
    limit = int(args.get("limit") or 0) or None
    save_path_arg = str(args.get("save") or home() / "configs" / "tuned.yaml")
    auto_record = "record" in args  # a bare flag: its value is ""
    reranker_arg = str(args.get("reranker") or "") or None
    suite_picker = mo.ui.dropdown(sorted({*suites.REGISTRY, suite_arg}), value=suite_arg, label="suite")
    _title
    return auto_record, limit, preset, reranker_arg, save_path_arg, suite_picker


@app.cell(hide_code=True)
def _(available, cost, record_button, record_queries, recording_picker, rerank_source, suite, tier_picker):
    _old = 0 if available else record.outdated(suite)
    mo.vstack(
        [
            mo.hstack([recording_picker, rerank_source], justify="start"),
            mo.accordion(
                {
                    "record more (model calls)": mo.vstack(
                        [
                            mo.hstack([tier_picker, record_queries, record_button], justify="start"),
                            mo.md(f"_{cost.summary()}_"),
                        ]
                    )
                },
                lazy=False,
            )
            if available
            else mo.vstack(
                [
                    mo.callout(
                        mo.md(
                            (
                                f"{_old} recording(s) of this suite are from an older qmdlab (its pipeline options "
                                "changed), so they cannot be reused. "
                                if _old
                                else "Nothing is recorded for this suite yet. "
                            )
                            + "`make demo` records the retrieval tier on every query in about a minute (its LLM tier "
                            "replays from the LLM cache when the models already answered); or pick what to record here."
                        ),
                        kind="info",
                    ),
                    mo.hstack([tier_picker, record_queries, record_button], justify="start"),
                    mo.md(f"_{cost.summary()}_"),
                ]
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _(auto_record, cost, record_button, record_queries, suite, tier, tier_models):
    # Runs only on the button (or --record in a headless run); traces go to the shared cache.
    new_key = None
    if record_button.value or auto_record:
        with mo.status.progress_bar(
            total=max(cost.to_run, 1), title=f"Recording {tier.name}", subtitle=cost.summary(), remove_on_exit=True
        ) as _bar:

            def _step(p):
                if p.phase == "index":
                    _bar.update(increment=0, subtitle="indexing and embedding the suite")
                elif p.phase == "query" and p.qid is not None:
                    _bar.update(subtitle=f"query {p.qid} ({p.done}/{p.total})")

            new_key = record.record(
                suite,
                tier_models,
                tier.config,
                limit=int(record_queries.value),
                on_progress=_step,
                log=lambda _msg: None,
            ).cache_dir.name
    return (new_key,)


@app.cell(hide_code=True)
def _(baseline, baseline_label, evaluation, heldout, study):
    # The headline, first and small: it depends only on the re-scored evaluation (one cell above
    # the recorded data), so its output reaches the page before the per-query views below.
    def _stat(metric, label):
        now, then = evaluation.metrics[metric], baseline.metrics[metric]
        delta = now - then
        return mo.stat(
            f"{now:.4f}",
            label=label,
            caption=f"{delta:+.4f} vs {baseline_label}",
            bordered=True,
            direction=None if abs(delta) < 1e-12 else ("increase" if delta > 0 else "decrease"),
        )

    _cards = mo.hstack(
        [_stat("ndcg@10", "nDCG@10"), _stat("mrr@10", "MRR@10"), _stat("recall@10", "recall@10")], justify="start"
    )
    _notes = []
    if evaluation.unscored:
        _notes.append(
            mo.callout(
                mo.md(
                    f"{evaluation.unscored} results were never reranked (this config promotes documents outside the "
                    "recorded candidates); their blend uses the position score alone."
                ),
                kind="warn",
            )
        )
    if heldout is not None:
        _notes.insert(
            0,
            mo.callout(
                mo.md(
                    f"Rerank scores: the trained cross-encoder of `{heldout.out}` on **held-out queries only** — each of "
                    f"these {len(heldout.qids)} queries was scored by the fold model that never saw it. Deltas are against "
                    "the fused order of the same traces; the blend controls (method, bands, weights) act on these scores."
                ),
                kind="info",
            ),
        )
    mo.vstack([_cards, mo.md(f"{len(study.qids)} labelled queries"), *_notes])
    return


@app.cell(hide_code=True)
def _(baseline, config, defaults, evaluation, queries):
    # The per-query table and the configuration diff sit in a closed accordion: the page mounts
    # the data grid (and asks the kernel for its column summaries) only while it is open, so a
    # control change does not re-render a grid nobody looks at. Not lazy=True: an HTML export
    # has no kernel to load lazy content from, and building the table here costs ~1 ms.
    per_query_delta = tune_view.per_query_delta(baseline.per_query, evaluation.per_query, queries)
    _changed = tune_view.changed(per_query_delta)
    _better, _worse, _same = tune_view.delta_counts(per_query_delta)
    _table = mo.ui.table(
        _changed if _changed.height else per_query_delta,
        selection=None,
        page_size=10,
        format_mapping={c: "{:.4f}" for c in ("ndcg_default", "ndcg_now", "delta")},
    )
    mo.vstack(
        [
            mo.md(f"**Per query:** {_better} better, {_worse} worse, {_same} unchanged (nDCG@10)."),
            mo.accordion(
                {
                    "per-query table (changed queries, worst first)": _table,
                    "configuration vs defaults": mo.md(f"```\n{config.diff(defaults)}\n```"),
                }
            ),
        ]
    )
    return (per_query_delta,)


@app.cell(hide_code=True)
def _(baseline_label, study):
    # Drawn once per study; each control change only gives it new points and bar heights.
    delta_figure = tune_view.DeltaFigure(baseline_label)
    return (delta_figure,)


@app.cell(hide_code=True)
def _(delta_figure, per_query_delta):
    delta_figure.update(per_query_delta)
    # One PNG draw at 100 dpi (marimo's Figure display draws twice, at twice the resolution).
    mo.image(delta_figure.png(), width=delta_figure.width_px)
    return


@app.cell(hide_code=True)
def _(defaults, rerank_source, start, suite_picker):
    # Every knob in one dictionary, named as the optimiser names them (`config` is
    # optimise.apply_params(defaults, knobs.value)); one cell, not one per control: `marimo edit`
    # renders each cell with its code editor, so the page takes longer to become live per cell.
    def _slider(name, lo, hi, step, label):
        return mo.ui.slider(lo, hi, step=step, value=start.flat(name), debounce=True, show_value=True, label=label)

    knobs = mo.ui.dictionary(
        {
            "fusion": mo.ui.dropdown(list(FUSION_METHODS), value=start.fusion, label="fusion method"),
            "rrf_k": _slider("rrf_k", 0, 200, 1, "RRF k"),
            "weight_original_fts": _slider("weight_original_fts", 0.0, 4.0, 0.1, "weight: original BM25"),
            "weight_original_vec": _slider("weight_original_vec", 0.0, 4.0, 0.1, "weight: original vector"),
            "weight_lex": _slider("weight_lex", 0.0, 4.0, 0.1, "weight: lex lines"),
            "weight_vec": _slider("weight_vec", 0.0, 4.0, 0.1, "weight: vec lines"),
            "weight_hyde": _slider("weight_hyde", 0.0, 4.0, 0.1, "weight: hyde lines"),
            "bonus_rank1": _slider("bonus_rank1", 0.0, 0.2, 0.005, "bonus: rank 1"),
            "bonus_rank23": _slider("bonus_rank23", 0.0, 0.2, 0.005, "bonus: rank 2–3"),
            # Only the recorded candidates have rerank scores, so the limit cannot grow past them.
            "candidate_limit": mo.ui.slider(
                1,
                defaults.candidate_limit,
                step=1,
                value=min(start.candidate_limit, defaults.candidate_limit),
                debounce=True,
                show_value=True,
                label="candidates reranked",
            ),
            "norm_weight_fts": _slider("norm_weight_fts", 0.0, 2.0, 0.05, "norm_sum: BM25 channel"),
            "norm_weight_vec": _slider("norm_weight_vec", 0.0, 2.0, 0.05, "norm_sum: vector channel"),
            "gate_margin": _slider("gate_margin", 0.0, 1.0, 0.01, "gated_rrf: cosine margin"),
            "gate_max_take": _slider("gate_max_take", 1, 40, 1, "gated_rrf: max vector hits"),
            "blend": mo.ui.dropdown(list(BLEND_METHODS), value=start.blend, label="blend method"),
            "blend_band_1": _slider("blend_band_1", 1, 20, 1, "band 1 ends at fused rank"),
            "blend_band_2": _slider("blend_band_2", 1, 40, 1, "band 2 ends at fused rank"),
            "blend_weight_1": _slider("blend_weight_1", 0.0, 1.0, 0.05, "position weight, band 1"),
            "blend_weight_2": _slider("blend_weight_2", 0.0, 1.0, 0.05, "position weight, band 2"),
            "blend_weight_3": _slider("blend_weight_3", 0.0, 1.0, 0.05, "position weight, band 3"),
            "min_score": _slider("min_score", 0.0, 1.0, 0.01, "min score"),
            # which expansion lists are fused, and the gate: drop them for a query whose expansions
            # find little of what the query alone finds (overlap), or let them only re-rank the query's
            # own top k (rerank); re-run on the recorded lists
            "expand_types": mo.ui.dropdown(
                list(optimise.EXPAND_TYPE_CHOICES), value=start.expand_types, label="expansion types fused"
            ),
            "expand_gate": mo.ui.dropdown(list(optimise.EXPAND_GATES), value=start.expand_gate, label="expansion gate"),
            "expand_gate_min_overlap": _slider("expand_gate_min_overlap", 0.0, 1.0, 0.05, "gate: min top-k overlap"),
            "expand_gate_k": _slider("expand_gate_k", 1, 100, 1, "gate: top k compared / re-ranked"),
            "expand": mo.ui.switch(value=start.expand, label="expansion lists"),
            "hyde": mo.ui.switch(value=start.hyde, label="hyde lists"),
            "vector": mo.ui.switch(value=start.vector, label="vector lists"),
            "rerank": mo.ui.switch(value=start.rerank, label="rerank"),
            # BM25 knobs: changing one re-runs the recorded BM25 lists against the suite's index
            # (qmdlab.eval.lexical.LexicalStudy; ~2 ms per query on the default corpus, ~15 ms on CISI).
            "bm25_weight_title": _slider("bm25_weight_title", 0.0, 10.0, 0.5, "title weight"),
            "bm25_weight_body": _slider("bm25_weight_body", 0.0, 4.0, 0.25, "body weight"),
            "bm25_weight_filepath": _slider("bm25_weight_filepath", 0.0, 4.0, 0.25, "file path weight"),
            # the generated queries of `qmdlab expand-docs` (no effect on an index without them)
            "bm25_weight_doc_queries": _slider(
                "bm25_weight_doc_queries", 0.0, 4.0, 0.25, "doc-queries weight (doc2query)"
            ),
            "bm25_prefix": mo.ui.switch(value=start.bm25_prefix, label="prefix terms"),
            "bm25_stopwords": mo.ui.switch(value=start.bm25_stopwords, label="drop stopwords"),
            "bm25_query_tf": mo.ui.switch(value=start.bm25_query_tf, label="repeated words count again"),
            "bm25_mode": mo.ui.dropdown(list(BM25_MODES), value=start.bm25_mode, label="mode"),
            "bm25_min_match": _slider("bm25_min_match", 0.0, 5.0, 0.1, "msm: terms to match (share if < 1)"),
        }
    )

    def _k(*names):
        return [knobs[n] for n in names]

    mo.sidebar(
        [
            mo.md("### Suite"),
            suite_picker,
            mo.md("### Fusion"),
            *_k(
                "fusion",
                "rrf_k",
                "weight_original_fts",
                "weight_original_vec",
                "weight_lex",
                "weight_vec",
                "weight_hyde",
                "bonus_rank1",
                "bonus_rank23",
                "candidate_limit",
            ),
            mo.accordion(
                {
                    "other fusion methods": mo.vstack(
                        _k("norm_weight_fts", "norm_weight_vec", "gate_margin", "gate_max_take")
                    )
                }
            ),
            mo.md("### Blend"),
            rerank_source,
            *_k(
                "blend",
                "blend_band_1",
                "blend_band_2",
                "blend_weight_1",
                "blend_weight_2",
                "blend_weight_3",
                "min_score",
            ),
            mo.md("### Stages"),
            *_k("expand", "hyde", "vector", "rerank"),
            mo.accordion(
                {
                    "expansion types and gate": mo.vstack(
                        _k("expand_types", "expand_gate", "expand_gate_min_overlap", "expand_gate_k")
                    )
                }
            ),
            mo.md("### BM25 (re-runs BM25 on the index)"),
            *_k(
                "bm25_weight_title",
                "bm25_weight_body",
                "bm25_weight_filepath",
                "bm25_weight_doc_queries",
                "bm25_prefix",
                "bm25_stopwords",
                "bm25_query_tf",
                "bm25_mode",
                "bm25_min_match",
            ),
        ],
        width="22rem",
    )
    return (knobs,)


@app.cell(hide_code=True)
def _():
    _intro = mo.md(r"""
    ## Optimise (cross-validated)

    Tunes the fusion (and, with rerank on, blend) knobs from the suite defaults on k−1 folds
    and scores the held-out fold, so the reported gain is one the tuned config did not see.
    The config tuned on all queries is then loaded into the controls.
    """)
    optimise_method = mo.ui.dropdown(["coordinate", "random", "grid", "tpe"], value="coordinate", label="search method")
    optimise_folds = mo.ui.slider(2, 10, step=1, value=5, debounce=True, show_value=True, label="folds")
    optimise_trials = mo.ui.number(10, 2000, step=10, value=120, label="trials per fold")
    optimise_button = mo.ui.run_button(label="Optimise", kind="success")
    mo.vstack([_intro, mo.hstack([optimise_method, optimise_folds, optimise_trials, optimise_button], justify="start")])
    return optimise_button, optimise_folds, optimise_method, optimise_trials


@app.cell
def _(defaults, optimise_button, optimise_folds, optimise_method, optimise_trials, set_start, study):
    mo.stop(not optimise_button.value, mo.md("_Press the button to run the optimiser._"))
    with mo.status.progress_bar(
        total=optimise_folds.value + 1,
        title="Cross-validated tuning",
        subtitle=f"{optimise_folds.value} folds",
        remove_on_exit=True,
    ) as _bar:
        cv_report = optimise.cross_validate(
            study,
            base=defaults,
            method=optimise_method.value,
            trials=int(optimise_trials.value),
            folds=optimise_folds.value,
            progress=lambda msg: _bar.update(subtitle=msg),
        )
        _bar.update(subtitle="done")
    set_start(cv_report.config)
    mo.vstack(
        [
            mo.md(
                f"**{cv_report.summary()}** — tuned on all queries and loaded into the controls "
                f"({cv_report.seconds:.1f} s)."
            ),
            mo.ui.table(
                cv_report.folds,
                selection=None,
                format_mapping={c: "{:.4f}" for c in ("train_base", "train_tuned", "test_base", "test_tuned")},
            ),
        ]
    )
    return (cv_report,)


@app.cell(hide_code=True)
def _(suite):
    # The quality-latency frontier of `qmdlab eval SUITE --frontier`, drawn from its frontier.csv when it ran.
    from qmdlab.eval import frontier_plot as _frontier

    _csv = suite.workdir() / "results" / "frontier" / "frontier.csv"
    frontier_table = pl.read_csv(_csv) if _csv.is_file() else None
    _fig = (
        None if frontier_table is None else _frontier.figure(frontier_table, title=f"{suite.name}: quality vs latency")
    )
    mo.vstack(
        [
            mo.md("## Quality against latency (the frontier)"),
            mo.md(f"_No frontier yet: `qmdlab eval {suite.name} --frontier` measures it._")
            if _fig is None
            else mo.vstack([_fig, mo.ui.table(frontier_table, selection=None, page_size=20)]),
        ]
    )
    return (frontier_table,)


@app.cell(hide_code=True)
def _(save_path_arg):
    save_path = mo.ui.text(value=save_path_arg, label="save to", full_width=True)
    save_button = mo.ui.run_button(label="Save config")
    mo.hstack([save_path, save_button], justify="start", widths=[4, 1])
    return save_button, save_path


@app.cell
def _(config, evaluation, save_button, save_path, suite_picker):
    mo.stop(not save_button.value)
    saved_to = Path(save_path.value).expanduser()
    saved_to.parent.mkdir(parents=True, exist_ok=True)
    optimise.write_config(
        config,
        saved_to,
        header=(
            f"qmdlab tuned config (notebooks/tune.py), suite {suite_picker.value}: "
            f"nDCG@10 {evaluation.metrics['ndcg@10']:.4f}"
        ),
    )
    mo.callout(mo.md(f"Saved to `{saved_to}` — use it with `qmdlab query --config {saved_to}`."), kind="success")
    return (saved_to,)


@app.cell
def _(limit, reranker_arg, suite_picker):
    # From here on: the cells that compute what the cells above show (marimo runs them in
    # dependency order, whatever their place on the page).
    suite = suites.get_suite(suite_picker.value)
    suite.check()
    tier_picker = mo.ui.dropdown(
        {t.name: i for i, t in enumerate(choices.tiers(suite))}, value=choices.tiers(suite)[-1].name, label="record"
    )
    record_queries = mo.ui.number(
        1,
        record.judged_queries(suite).height,
        step=1,
        value=limit or record.judged_queries(suite).height,
        label="queries",
    )
    # Trained cross-encoder runs of this suite (runs/* and --reranker DIR) offered as the rerank source.
    _runs = reranker_study.finished_runs(suite.name, extra=[reranker_arg] if reranker_arg else [])
    _opts = {"recorded traces": "", **{f"trained reranker, held-out: {p}": str(p) for p in _runs}}
    _picked = next(
        (
            label
            for label, p in _opts.items()
            if p and reranker_arg and Path(p).resolve() == Path(reranker_arg).resolve()
        ),
        "recorded traces",
    )
    rerank_source = mo.ui.dropdown(_opts, value=_picked, label="rerank source")
    return record_queries, rerank_source, suite, tier_picker


@app.cell
def _(preset, record_queries, suite, tier_picker):
    # Recording is an explicit choice: what it costs is shown before anything runs.
    tier = choices.tiers(suite)[tier_picker.value]
    tier_models = qmodels.load_models(preset, **tier.roles)  # lazy: no weights loaded here
    cost = record.estimate(suite, tier_models, tier.config, limit=int(record_queries.value))
    record_button = mo.ui.run_button(
        label=f"Record ({cost.to_run} queries)" if cost.to_run else "Load", kind="warn" if cost.to_run else "neutral"
    )
    return cost, record_button, tier, tier_models


@app.cell
def _(new_key, suite):
    available = record.recorded(suite)  # listed again after a recording (new_key)
    return (available,)


@app.cell
def _(available, new_key):
    _choices, _chosen = choices.picker_choices(available, new_key)
    recording_picker = mo.ui.dropdown(_choices, value=_chosen, label="recording")
    return (recording_picker,)


@app.cell
def _():
    @mo.cache
    def open_study(suite_name: str, key: str, n_recorded: int, limit):
        """The recorded traces (no model, no index) as a Study; cached per recording size."""
        return Study.from_recording(record.load_recorded(suites.get_suite(suite_name), key, limit=limit))

    @mo.cache
    def open_heldout(run_dir: str, mtime: float):
        """A trained reranker run's held-out scores over its recorded traces; cached per file version."""
        return reranker_study.load_heldout_study(run_dir)

    return open_heldout, open_study


@app.cell
def _(available, limit, open_heldout, open_study, recording_picker, rerank_source, suite):
    if rerank_source.value:
        # Held-out queries only, each with the scores of the fold model that never saw it;
        # the baseline is the fused order of the same traces.
        _src = Path(rerank_source.value)
        heldout = open_heldout(str(_src), (_src / reranker_study.SCORES).stat().st_mtime)
        study, defaults = heldout.study, heldout.start
        baseline, baseline_label = study.evaluate(heldout.fused), "fused order"
    else:
        mo.stop(recording_picker.value is None, mo.md("_Record a suite (above) to tune it._"))
        _rec = next(r for r in available if r.key == recording_picker.value)
        heldout = None
        study = open_study(suite.name, _rec.key, len(_rec.qids), limit)
        defaults = study.config
        baseline, baseline_label = study.evaluate(defaults), "defaults"
    queries = record.judged_queries(suite).filter(pl.col("qid").is_in(study.qids))
    # The recorded study plus the suite's index: re-runs BM25 only when a BM25 knob changes.
    lexical_study = LexicalStudy(study, Index.open(suite.workdir() / "index"))
    return baseline, baseline_label, defaults, heldout, lexical_study, queries, study


@app.cell
def _():
    # Values the controls start from; the optimiser replaces them with its tuned config.
    get_start, set_start = mo.state(None)
    return get_start, set_start


@app.cell
def _(defaults, get_start):
    start = get_start() or defaults
    return (start,)


@app.cell
def _(defaults, knobs, lexical_study):
    # The optimiser's parameter vocabulary (blend_band_*/blend_weight_* are tuple items);
    # apply_params keeps band 2 >= band 1.
    config = optimise.apply_params(defaults, knobs.value)
    evaluation = lexical_study.evaluate(config)
    return config, evaluation


if __name__ == "__main__":
    app.run()

"""Evaluate the pipeline on a labelled suite: ablation matrix, score distributions, min-score threshold.

Run it:  marimo edit notebooks/evaluate.py   |   marimo run notebooks/evaluate.py
         python notebooks/evaluate.py --suite default --preset fake   (headless)

Arguments: ``--suite NAME|DIR`` (default ``default``), ``--preset offline|offline-mini|offline-gemma|qmd|tiny|fake``,
``--limit N`` (only the first N judged queries: smoke runs), ``--record`` (record what is
missing without asking: headless runs).

Everything is cut from one recorded trace per query (``qmdlab.eval.record``'s cache, shared with
``qmdlab eval`` and ``make demo``; recording is a button with its cost shown): the ablation
rows are ``qmdlab.eval.ablation.ablate``, the distributions ``qmdlab.eval.distributions``, the threshold
curve ``qmdlab.eval.thresholds``.
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="qmdlab · evaluate")

with app.setup:
    import marimo as mo
    import polars as pl
    from matplotlib.figure import Figure

    from qmdlab import models as qmodels
    from qmdlab.eval import choices, record, suites
    from qmdlab.eval.ablation import ablate
    from qmdlab.eval.distributions import score_distributions, summary
    from qmdlab.eval.study import Study
    from qmdlab.eval.thresholds import best_threshold, threshold_curve


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    # Evaluate

    The ablation matrix with paired significance tests, the score distributions of relevant
    vs non-relevant documents at every stage, and a min-score threshold picker.
    """)
    return


@app.cell
def _():
    args = mo.cli_args()
    suite_arg = str(args.get("suite") or "default")
    preset = args.get("preset") or None
    limit = int(args.get("limit") or 0) or None
    auto_record = "record" in args  # a bare flag: its value is ""
    return auto_record, limit, preset, suite_arg


@app.cell
def _(suite_arg):
    suite_picker = mo.ui.dropdown(sorted({*suites.REGISTRY, suite_arg}), value=suite_arg, label="suite")
    return (suite_picker,)


@app.cell
def _(limit, preset, suite_picker):
    # Recording the suite's full pipeline is an explicit choice; its cost is shown first.
    suite = suites.get_suite(suite_picker.value)
    suite.check()
    tier = choices.tiers(suite)[-1]
    tier_models = qmodels.load_models(preset, **tier.roles)  # lazy: no weights loaded here
    cost = record.estimate(suite, tier_models, tier.config, limit=limit)
    record_button = mo.ui.run_button(
        label=f"Record {tier.name} ({cost.to_run} queries)", kind="warn", disabled=not cost.to_run
    )
    return cost, record_button, suite, tier, tier_models


@app.cell
def _(auto_record, cost, limit, record_button, suite, tier, tier_models):
    new_key = None
    if record_button.value or auto_record:
        with mo.status.progress_bar(
            total=max(cost.to_run, 1), title=f"Recording {tier.name}", subtitle=cost.summary(), remove_on_exit=True
        ) as _bar:

            def _step(p):
                if p.phase == "query" and p.qid is not None:
                    _bar.update(subtitle=f"query {p.qid} ({p.done}/{p.total})")

            new_key = record.record(
                suite, tier_models, tier.config, limit=limit, on_progress=_step, log=lambda _msg: None
            ).cache_dir.name
    return (new_key,)


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
def _(cost, record_button, recording_picker, suite_picker):
    mo.vstack(
        [
            mo.hstack([suite_picker, recording_picker], justify="start"),
            mo.hstack([record_button, mo.md(f"_{cost.summary()}_")], justify="start"),
        ]
    )
    return


@app.cell
def _():
    @mo.cache
    def open_study(suite_name: str, key: str, n_recorded: int, limit):
        """The recorded traces (no model, no index) as a Study; cached per recording size."""
        return Study.from_recording(record.load_recorded(suites.get_suite(suite_name), key, limit=limit))

    return (open_study,)


@app.cell
def _(available, limit, open_study, recording_picker, suite):
    mo.stop(recording_picker.value is None, mo.md("_Record the suite (above) to evaluate it._"))
    _rec = next(r for r in available if r.key == recording_picker.value)
    study = open_study(suite.name, _rec.key, len(_rec.qids), limit)
    return (study,)


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    ## Ablation matrix

    Each row re-fuses the recorded lists it keeps (no model calls); Δ, p-values and
    wins/ties/losses are paired against the baseline row.
    """)
    return


@app.cell
def _(study):
    metric_picker = mo.ui.dropdown(list(study.metrics), value=study.metrics[0], label="metric")
    return (metric_picker,)


@app.cell
def _(metric_picker, study):
    with mo.status.spinner(title="Evaluating the ablation rows"):
        ablation_best_leg = ablate(study, baseline="best-leg", metric=metric_picker.value)
    return (ablation_best_leg,)


@app.cell
def _(ablation_best_leg):
    # Any row the recorded trace supports can be the baseline; "best-leg" = the better of bm25/vector.
    baseline_picker = mo.ui.dropdown(
        ["best-leg", *ablation_best_leg["config"].to_list()], value="best-leg", label="baseline"
    )
    return (baseline_picker,)


@app.cell
def _(baseline_picker, metric_picker):
    mo.hstack([metric_picker, baseline_picker], justify="start")
    return


@app.cell
def _(ablation_best_leg, baseline_picker, metric_picker, study):
    if baseline_picker.value == "best-leg":
        ablation = ablation_best_leg
    else:
        with mo.status.spinner(title=f"Comparing every row with {baseline_picker.value}"):
            ablation = ablate(study, baseline=baseline_picker.value, metric=metric_picker.value)
    return (ablation,)


@app.cell
def _(ablation, metric_picker):
    _metric = metric_picker.value
    _shown = ablation.with_columns(
        pl.when(pl.col("config") == pl.col("baseline"))
        .then(pl.lit("baseline"))
        .when(pl.col("p_ttest") < 0.05)
        .then(pl.lit("p < 0.05"))
        .otherwise(pl.lit(""))
        .alias("significant")
    )
    mo.ui.table(
        _shown.select(
            "config",
            _metric,
            "delta",
            "p_ttest",
            "p_fisher",
            "wins",
            "ties",
            "losses",
            "significant",
            "unscored",
            "description",
        ),
        selection=None,
        page_size=25,
        format_mapping={_metric: "{:.4f}", "delta": "{:+.4f}", "p_ttest": "{:.3g}", "p_fisher": "{:.3g}"},
    )
    return


@app.cell
def _(ablation, metric_picker):
    _metric = metric_picker.value
    _fig = Figure(figsize=(10, 0.32 * ablation.height + 1.2), layout="constrained")
    _ax = _fig.subplots()
    _colors = [
        "tab:grey" if c == b else ("tab:green" if p < 0.05 and d > 0 else "tab:red" if p < 0.05 else "tab:blue")
        for c, b, p, d in ablation.select("config", "baseline", "p_ttest", "delta").iter_rows()
    ]
    _ax.barh(ablation["config"].to_list(), ablation[_metric].to_list(), color=_colors)
    _ax.invert_yaxis()
    _ax.set(
        xlabel=_metric,
        title=f"{_metric} per configuration (green/red: significant vs {ablation['baseline'][0]}, p < 0.05)",
    )
    _fig
    return


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    ## Score distributions

    Every score the recorded traces hold, split by judgment. A stage whose relevant and
    non-relevant distributions overlap cannot be thresholded; the AUC says how well it
    separates them.
    """)
    return


@app.cell
def _(study):
    distributions = score_distributions(study.trace, study.qrels)
    dist_summary = summary(distributions)
    return dist_summary, distributions


@app.cell
def _(distributions):
    _stages = distributions["stage"].unique(maintain_order=True).to_list()
    _cols = 3
    _rows = max(1, -(-len(_stages) // _cols))
    _fig = Figure(figsize=(11, 2.6 * _rows), layout="constrained")
    _axes = _fig.subplots(_rows, _cols, squeeze=False).ravel()
    for _ax, _stage in zip(_axes, _stages):
        _part = distributions.filter(pl.col("stage") == _stage)
        for _rel, _label, _color in ((True, "relevant", "tab:green"), (False, "non-relevant", "tab:grey")):
            _vals = _part.filter(pl.col("relevant") == _rel)["score"].to_numpy()
            if len(_vals):
                _ax.hist(_vals, bins=30, alpha=0.55, density=True, label=_label, color=_color)
        _ax.set_title(_stage, fontsize=9)
        _ax.tick_params(labelsize=7)
    for _ax in _axes[len(_stages) :]:
        _ax.set_visible(False)
    if _stages:
        _axes[0].legend(fontsize=7)
    _fig
    return


@app.cell
def _(dist_summary):
    mo.ui.table(
        dist_summary,
        selection=None,
        page_size=30,
        format_mapping={c: "{:.4f}" for c in ("mean", "p10", "median", "p90", "auc")},
    )
    return


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    ## Min-score threshold

    Keep only results scoring at least *t*: the precision and recall (pooled over the
    judged queries) that buys. Set the chosen value as `min_score` on a score that means
    the same across queries.
    """)
    return


@app.cell
def _():
    score_picker = mo.ui.dropdown(
        {"final (blended)": "final", "rerank probability": "rerank", "fused score": "fused"},
        value="rerank probability",
        label="score",
    )
    return (score_picker,)


@app.cell
def _(score_picker, study):
    threshold_run = getattr(study.trace, score_picker.value)
    threshold_col = {"final": "final_score", "rerank": "rerank_score", "fused": "fused_score"}[score_picker.value]
    threshold_full = threshold_curve(threshold_run, study.qrels, score_col=threshold_col)
    return threshold_col, threshold_full, threshold_run


@app.cell
def _(threshold_full):
    mo.stop(threshold_full.height == 0, mo.callout("No scores of this kind were recorded.", kind="warn"))
    # Candidate thresholds: the curve's own change points, thinned to at most ~200 steps.
    _ts = threshold_full["threshold"].to_list()
    _steps = sorted({round(t, 6) for t in _ts[:: max(1, len(_ts) // 200)]} | {round(_ts[0], 6)})
    suggested = best_threshold(threshold_full, by="f1")
    threshold = mo.ui.slider(
        steps=_steps,
        value=min(_steps, key=lambda t: abs(t - suggested)),
        debounce=True,
        show_value=True,
        label="min score t",
        full_width=True,
    )
    return suggested, threshold


@app.cell
def _(score_picker, threshold):
    mo.hstack([score_picker, threshold], justify="start", widths=[1, 3])
    return


@app.cell
def _(study, suggested, threshold, threshold_col, threshold_run):
    _point = threshold_curve(threshold_run, study.qrels, score_col=threshold_col, thresholds=[threshold.value]).row(
        0, named=True
    )
    mo.hstack(
        [
            mo.stat(f"{_point['precision']:.3f}", label="precision", bordered=True),
            mo.stat(f"{_point['recall']:.3f}", label="recall", bordered=True),
            mo.stat(f"{_point['f1']:.3f}", label="F1", bordered=True),
            mo.stat(
                f"{_point['kept']}", label="results kept", caption=f"{_point['relevant_kept']} relevant", bordered=True
            ),
            mo.stat(f"{suggested:.4f}", label="best-F1 threshold", bordered=True),
        ],
        justify="start",
    )
    return


@app.cell
def _(threshold, threshold_col, threshold_full):
    _fig = Figure(figsize=(10, 3.4), layout="constrained")
    _ax = _fig.subplots()
    for _m in ("precision", "recall", "f1"):
        _ax.plot(threshold_full["threshold"].to_list(), threshold_full[_m].to_list(), label=_m)
    _ax.axvline(threshold.value, color="black", lw=1, ls="--")
    _ax.set(xlabel=f"threshold on {threshold_col}", ylabel="value", title="keep results with score ≥ t")
    _ax.legend(fontsize=8)
    _fig
    return


if __name__ == "__main__":
    app.run()

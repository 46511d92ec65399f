"""Inspect query-expander training: data, reward, curves, before/after retrieval quality.

Run it:  marimo edit notebooks/train.py   |   marimo run notebooks/train.py
         python notebooks/train.py --preset fake --run runs/sft   (headless)

Arguments: ``--data FILE`` (examples JSONL; default ``data/training/seed.jsonl``), ``--run DIR``
(a training run directory with ``metrics.jsonl``; directories under ``./runs`` are offered too),
``--evaluation DIR`` (output of ``python -m qmdlab.training.evaluate``), ``--reranker DIR`` (a
``qmdlab train reranker`` run, default ``runs/reranker``), ``--recipe DIR`` (a CPU-recipe run,
``make train-demo``; default ``runs/cpu-small``), ``--expander REF`` (GGUF path or
model reference for the "evaluate now" button), ``--suite NAME|DIR``, ``--preset`` and ``--limit N``
(the button evaluates only the first N judged queries: smoke runs).

The reward is ``qmdlab.training.reward`` — the very function GRPO optimises — and the curves are the
``metrics.jsonl`` lines that ``qmdlab.training.rundir`` writes during SFT/GRPO.
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="qmdlab · train")

with app.setup:
    import json
    from pathlib import Path

    import marimo as mo
    import polars as pl
    from matplotlib.figure import Figure

    from qmdlab import models as qmodels
    from qmdlab.eval import record, suites
    from qmdlab.paths import home
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.pipeline.stages import model_roles, plan_stages
    from qmdlab.training import rundir
    from qmdlab.training.data import SEED_PATH, load_examples
    from qmdlab.training.evaluate import EvaluateConfig, run_evaluate
    from qmdlab.training.reward import RetrievalReward, combined_reward, pipeline_scorer, score_expansion


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    # Train the query expander: inspect

    1. the training examples (line types, lengths, reward distribution);
    2. the reward breakdown of an expansion you type;
    3. training curves from a run directory;
    4. nDCG@10 before/after an expander, on the labelled suite.
    """)
    return


@app.cell
def _():
    args = mo.cli_args()
    data_arg = str(args.get("data") or SEED_PATH)
    run_arg = str(args.get("run") or "")
    evaluation_arg = str(args.get("evaluation") or "")
    expander_arg = str(args.get("expander") or "")
    suite_arg = str(args.get("suite") or "default")
    preset = args.get("preset") or None
    limit = int(args.get("limit") or 0) or None
    return data_arg, evaluation_arg, expander_arg, limit, preset, run_arg, suite_arg


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    ## 1. Training data
    """)
    return


@app.cell
def _(data_arg):
    data_path = mo.ui.text(value=data_arg, label="examples file (JSONL)", full_width=True)
    data_path
    return (data_path,)


@app.cell
def _(data_path):
    examples = load_examples(data_path.value)
    example_lines = pl.DataFrame(
        [
            {"example": i, "query": ex.query, "type": t, "text": text, "chars": len(text), "words": len(text.split())}
            for i, ex in enumerate(examples)
            for t, text in ex.output
        ],
        schema={
            "example": pl.Int64,
            "query": pl.Utf8,
            "type": pl.Utf8,
            "text": pl.Utf8,
            "chars": pl.Int64,
            "words": pl.Int64,
        },
    )
    return example_lines, examples


@app.cell
def _(data_path, examples):
    # Rule score of every example's target completion.
    _rows = []
    for _ex in mo.status.progress_bar(
        examples, title="Scoring examples", subtitle=data_path.value, remove_on_exit=True
    ):
        _s = score_expansion(_ex.query, _ex.completion)
        _rows.append({"query": _ex.query, "total": _s.total, "gate": _s.gate, **_s.parts})
    rewards = pl.DataFrame(_rows)
    return (rewards,)


@app.cell
def _(example_lines, rewards):
    _counts = (
        example_lines.group_by("type")
        .agg(
            pl.len().alias("lines"),
            pl.col("chars").mean().alias("mean_chars"),
            pl.col("words").mean().alias("mean_words"),
        )
        .sort("type")
    )
    _fig = Figure(figsize=(11, 3.2), layout="constrained")
    _a1, _a2, _a3 = _fig.subplots(1, 3)
    _color = {"hyde": "tab:purple", "lex": "tab:blue", "vec": "tab:orange"}
    _a1.bar(_counts["type"].to_list(), _counts["lines"].to_list(), color=[_color[t] for t in _counts["type"]])
    _a1.set(title="lines per type", ylabel="lines")
    for _t in _counts["type"].to_list():
        _a2.hist(
            example_lines.filter(pl.col("type") == _t)["chars"].to_numpy(),
            bins=25,
            alpha=0.6,
            label=_t,
            color=_color[_t],
        )
    _a2.set(title="line length", xlabel="characters")
    _a2.legend(fontsize=8)
    _a3.hist(rewards["total"].to_numpy(), bins=20, range=(0, 1), color="tab:green")
    _a3.set(title="rule reward of the targets", xlabel="score (0–1)")
    _fig
    return


@app.cell
def _(example_lines, examples, rewards):
    mo.vstack(
        [
            mo.md(
                f"**{len(examples)} examples**, {example_lines.height} lines; "
                f"{rewards.filter(pl.col('gate').is_not_null()).height} targets fail the format gate."
            ),
            mo.ui.table(
                example_lines.group_by("type")
                .agg(
                    pl.len().alias("lines"),
                    pl.col("chars").mean().alias("mean_chars"),
                    pl.col("words").mean().alias("mean_words"),
                )
                .sort("type"),
                selection=None,
                format_mapping={"mean_chars": "{:.1f}", "mean_words": "{:.1f}"},
            ),
        ]
    )
    return


@app.cell
def _(rewards):
    mo.accordion({"reward parts per example": mo.ui.table(rewards, selection=None, page_size=10)})
    return


@app.cell(hide_code=True)
def _():
    mo.md("""
    ## 2. Reward breakdown

    Pick a labelled query and type an expansion (`lex:` / `vec:` / `hyde:` lines). The rule
    score is split into its parts; the retrieval term is nDCG@10 of the pipeline searching
    with these lines minus nDCG@10 of the original query alone.
    """)
    return


@app.cell
def _():
    @mo.cache
    def open_suite(suite_name: str, preset):
        """The suite's index with the preset's models, and its labelled queries/qrels."""
        suite = suites.get_suite(suite_name)
        suite.check()
        # Expansion on, rerank off (flags of the stage rule): the retrieval term measures the expansion, as in training.
        config, _ = plan_stages(PipelineConfig(), preset, expand=True, rerank=False)
        models = qmodels.load_models(preset, **model_roles(config))
        with mo.status.progress_bar(
            total=1, title=f"Opening suite {suite.name!r}", subtitle="indexing and embedding", remove_on_exit=True
        ) as bar:
            lab = record.open_lab(suite, models, config, log=lambda _msg: None)
            bar.update()
        from qmdlab.eval.metrics import qrels_dict

        qrels = qrels_dict(suite.qrels_docnos())
        return suite, lab, suite.data().judged_queries().sort("qid"), qrels

    return (open_suite,)


@app.cell
def _(open_suite, preset, suite_arg):
    suite, reward_lab, labelled, qrels = open_suite(suite_arg, preset)
    return labelled, qrels, reward_lab, suite


@app.cell
def _(labelled):
    reward_query = mo.ui.dropdown(
        {f"{q}: {t}": q for q, t in labelled.select("qid", "query").iter_rows()},
        value=f"{labelled['qid'][0]}: {labelled['query'][0]}",
        searchable=True,
        label="labelled query",
    )
    return (reward_query,)


@app.cell
def _(labelled, reward_query):
    _text = labelled.filter(pl.col("qid") == reward_query.value)["query"][0]
    expansion_box = mo.ui.text_area(
        value=f"lex: {_text}\nvec: how to {_text}\nhyde: A note explaining {_text} step by step, with the commands "
        "and settings involved.",
        rows=6,
        full_width=True,
        label="expansion",
    ).form(submit_button_label="Score")
    return (expansion_box,)


@app.cell
def _(expansion_box, reward_query):
    mo.vstack([reward_query, expansion_box])
    return


@app.cell
def _(expansion_box, labelled, qrels, reward_lab, reward_query):
    reward_qid = reward_query.value
    reward_text = labelled.filter(pl.col("qid") == reward_qid)["query"][0]
    # Before "Score" is pressed the form holds None: score the prefilled expansion.
    completion = expansion_box.value if expansion_box.value is not None else expansion_box.element.value
    rule = score_expansion(reward_text, completion)
    with mo.status.spinner(title="Searching with and without the expansion"):
        retrieval = RetrievalReward(pipeline_scorer(reward_lab), qrels)(reward_text, reward_qid, completion)
    total = combined_reward(reward_text, completion, retrieval=retrieval)
    return retrieval, rule, total


@app.cell
def _(rule):
    _parts = pl.DataFrame({"part": list(rule.parts), "points": [float(v) for v in rule.parts.values()]})
    _fig = Figure(figsize=(7, 2.8), layout="constrained")
    _ax = _fig.subplots()
    _ax.barh(
        _parts["part"].to_list(),
        _parts["points"].to_list(),
        color=["tab:red" if v < 0 else "tab:green" for v in _parts["points"].to_list()],
    )
    _ax.invert_yaxis()
    _ax.set(xlabel="points", title="rule score parts")
    _fig
    return


@app.cell
def _(retrieval, rule, total):
    mo.hstack(
        [
            mo.stat(
                f"{rule.total:.3f}", label="rule score", caption=rule.gate or "passes the format gate", bordered=True
            ),
            mo.stat(
                "—" if retrieval is None else f"{retrieval:+.4f}",
                label="retrieval term (ΔnDCG@10)",
                caption="undefined: gate failed" if retrieval is None else "vs the query alone",
                bordered=True,
            ),
            mo.stat(f"{total:.3f}", label="combined reward", bordered=True),
        ],
        justify="start",
    )
    return


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    ## 3. Training curves
    """)
    return


@app.cell
def _(run_arg):
    _found = sorted(
        {
            str(p.parent)
            for root in (Path("runs"), Path(run_arg) if run_arg else None)
            if root
            for p in (list(root.glob("**/metrics.jsonl")) if root.is_dir() else [])
        }
    )
    run_picker = mo.ui.dropdown(
        _found,
        value=run_arg if run_arg in _found else (_found[0] if _found else None),
        label="run directory",
        allow_select_none=True,
    )
    run_picker
    return (run_picker,)


@app.cell
def _(run_picker):
    mo.stop(
        not run_picker.value,
        mo.md(
            "_No run directory with a `metrics.jsonl` found: train with "
            "`qmdlab train sft` / `grpo`, or pass `--run DIR`._"
        ),
    )
    _records = rundir.read_metrics(run_picker.value)
    curves = pl.DataFrame([r for r in _records if "step" in r and not r.get("final")], infer_schema_length=None)
    final_records = [r for r in _records if r.get("final")]
    curve_metrics = [
        c
        for c, t in curves.schema.items()
        if t.is_numeric() and c not in ("step", "time", "epoch") and curves[c].drop_nulls().len() > 0
    ]
    return curve_metrics, curves, final_records


@app.cell
def _(curve_metrics):
    _default = [m for m in curve_metrics if m in ("loss", "reward", "eval_loss", "kl")] or curve_metrics[:2]
    curve_picker = mo.ui.multiselect(curve_metrics, value=_default, label="metrics")
    curve_picker
    return (curve_picker,)


@app.cell
def _(curve_picker, curves):
    mo.stop(not curve_picker.value, mo.md("_Pick at least one metric._"))
    _names = curve_picker.value
    _fig = Figure(figsize=(11, 2.8 * len(_names)), layout="constrained")
    _axes = _fig.subplots(len(_names), 1, squeeze=False).ravel()
    _stages = curves["stage"].unique(maintain_order=True).to_list() if "stage" in curves.columns else [None]
    for _ax, _m in zip(_axes, _names):
        for _s in _stages:
            _part = curves if _s is None else curves.filter(pl.col("stage") == _s)
            _part = _part.drop_nulls(_m).sort("step")
            if _part.height:
                _ax.plot(_part["step"].to_list(), _part[_m].to_list(), marker=".", label=_s or _m)
        _ax.set(title=_m, xlabel="step")
        _ax.legend(fontsize=8)
    _fig
    return


@app.cell
def _(final_records):
    mo.accordion(
        {"final results": mo.md("```json\n" + json.dumps(final_records, indent=1, default=str) + "\n```")}
    ) if final_records else None
    return


@app.cell(hide_code=True)
def _():
    mo.md("""
    ## 4. Before/after nDCG@10

    `none` is the pipeline with expansion off; each other variant searches with that
    expander's lines (same embedder, rerank off). Load a `qmdlab.training.evaluate` output
    directory, or evaluate an expander (GGUF path or model reference) now.
    """)
    return


@app.cell
def _(expander_arg):
    expander_ref = mo.ui.text(value=expander_arg, label="expander (GGUF path or model reference)", full_width=True)
    return (expander_ref,)


@app.cell
def _():
    evaluate_button = mo.ui.run_button(label="Evaluate this expander")
    return (evaluate_button,)


@app.cell
def _(evaluate_button, expander_ref):
    mo.hstack([expander_ref, evaluate_button], justify="start", widths=[4, 1])
    return


@app.cell
def _(evaluation_arg):
    # The evaluation shown: --evaluation DIR at first, then whatever the button produced.
    get_eval_dir, set_eval_dir = mo.state(Path(evaluation_arg) if evaluation_arg else None)
    return get_eval_dir, set_eval_dir


@app.cell
def _(evaluate_button, expander_ref, limit, preset, set_eval_dir, suite):
    mo.stop(not evaluate_button.value or not expander_ref.value.strip())
    evaluated_dir = home() / "train" / "notebook-evaluate"
    with mo.status.spinner(title="Evaluating", subtitle=f"{expander_ref.value} on suite {suite.name!r}"):
        evaluated = run_evaluate(
            EvaluateConfig(
                expander=expander_ref.value.strip(),
                suite=str(suite.path),
                collection=suite.collection,
                index=str(suite.workdir() / "index"),
                models_preset=preset or "offline-mini",
                rerank=False,
                max_queries=limit,
                output_dir=str(evaluated_dir),
            )
        )
    set_eval_dir(evaluated_dir)
    return evaluated, evaluated_dir


@app.cell
def _(get_eval_dir):
    eval_dir = get_eval_dir()
    mo.stop(
        eval_dir is None or not (Path(eval_dir) / "per_query.jsonl").exists(),
        mo.md("_No evaluation yet: pass `--evaluation DIR` or evaluate an expander above._"),
    )
    eval_variants = pl.DataFrame([r for r in rundir.read_metrics(eval_dir) if r.get("stage") == "evaluate"])
    _rows = [
        json.loads(line)
        for line in (Path(eval_dir) / "per_query.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    eval_per_query = pl.DataFrame([r for r in _rows if "ndcg@10" in r]).select("variant", "qid", "ndcg@10")
    return eval_dir, eval_per_query, eval_variants


@app.cell
def _(eval_per_query):
    _wide = eval_per_query.pivot(on="variant", index="qid", values="ndcg@10")
    _others = [c for c in _wide.columns if c not in ("qid", "none")]
    _fig = Figure(figsize=(5 * max(1, len(_others)), 4), layout="constrained")
    _axes = _fig.subplots(1, max(1, len(_others)), squeeze=False).ravel()
    for _ax, _v in zip(_axes, _others):
        _ax.scatter(_wide["none"].to_list(), _wide[_v].to_list(), s=14, alpha=0.7)
        _ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--")
        _ax.set(
            xlabel="nDCG@10, no expansion",
            ylabel=f"nDCG@10, {_v}",
            title=f"{_v} vs none (per query)",
            xlim=(-0.02, 1.02),
            ylim=(-0.02, 1.02),
        )
    _fig
    return


@app.cell
def _(eval_dir, eval_variants):
    _cols = [
        c
        for c in ("variant", "ndcg@10", "delta_vs_none", "wins", "losses", "rule_score", "gate_failures", "n_queries")
        if c in eval_variants.columns
    ]
    mo.vstack(
        [
            mo.md(f"From `{eval_dir}`:"),
            mo.ui.table(
                eval_variants.select(_cols),
                selection=None,
                format_mapping={c: "{:.4f}" for c in ("ndcg@10", "delta_vs_none", "rule_score") if c in _cols},
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    mo.md("""
    ## 5. Cross-encoder reranker (held-out)

    What `qmdlab train reranker` (`make train-reranker`) measured: each fold's model reranked
    queries it never saw. Rows are the fused order and each blend with the trained reranker
    (`rerank-tuned`: blend tuned on the training folds only; `weak-*`: the label-free
    in-collection model); p-values are paired tests against `fused`. Its training curve is in
    section 3 (pick the run directory, stages `weak`, `fold-k`, `final`).
    """)
    return


@app.cell
def _():
    from qmdlab.training.reranker import load_report
    from qmdlab.training.reranker_eval import format_reranker_table

    reranker_arg = str(mo.cli_args().get("reranker") or "runs/reranker")
    reranker_report = load_report(reranker_arg)
    mo.stop(
        reranker_report is None or reranker_report.heldout is None,
        mo.md(
            f"_No finished reranker run in `{reranker_arg}`: run `make train-reranker` "
            "(or `qmdlab train reranker --suite default --output-dir runs/reranker`), or pass `--reranker DIR`._"
        ),
    )
    mo.vstack(
        [
            mo.md(f"From `{reranker_arg}`; serving model `{reranker_report.model}`"),
            mo.ui.table(
                reranker_report.heldout,
                selection=None,
                format_mapping={c: "{:.4f}" for c in ("mean", "delta", "p_ttest", "p_fisher")},
            ),
            mo.md(
                "AUC on held-out candidates: "
                + ", ".join(f"{k} **{v:.3f}**" for k, v in reranker_report.auc.items() if v is not None)
            ),
        ]
    )
    return format_reranker_table, load_report, reranker_arg, reranker_report


@app.cell(hide_code=True)
def _():
    mo.md("""
    ## 6. CPU recipe

    What `make train-demo` (`python -m qmdlab.training.cpu_run`) measured: a small expander trained here
    (SFT, then GRPO with the ΔnDCG@10 retrieval reward on *training* queries), scored on held-out
    queries only. p-values are paired against no expansion; s/query is one uncached expansion.
    """)
    return


@app.cell
def _():
    recipe_dir = mo.ui.text(
        value=str(mo.cli_args().get("recipe") or "runs/cpu-small"), label="recipe run directory", full_width=True
    )
    recipe_dir
    return (recipe_dir,)


@app.cell
def _(recipe_dir):
    from qmdlab.training.cpu_run import load_run
    from qmdlab.training.evaluate import format_results

    recipe_run = load_run(recipe_dir.value.strip() or "runs/cpu-small")
    mo.stop(
        recipe_run is None,
        mo.md(
            f"_No finished recipe run in `{recipe_dir.value}` (no `summary.json`): run `make train-demo` "
            "(or `python -m qmdlab.training.cpu_run --config qmdlab/training/configs/cpu-small/recipe.yaml`), "
            "or type another run directory._"
        ),
    )
    mo.vstack(
        [mo.md(f"From `{recipe_run.run_dir}`, base `{recipe_run.summary.get('base')}`.")]
        + [
            mo.md(f"### {_s} ({recipe_run.heldout.get(_s) or '?'} held-out queries)\n\n" + format_results(_r))
            for _s, _r in recipe_run.results.items()
        ]
        + [mo.image(str(recipe_run.rewards_png)), mo.image(str(recipe_run.heldout_png))]
    )
    return format_results, load_run, recipe_run


if __name__ == "__main__":
    app.run()

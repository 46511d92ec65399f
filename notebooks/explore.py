"""Explain one query, stage by stage.

Run it:  marimo edit notebooks/explore.py   |   marimo run notebooks/explore.py
         python notebooks/explore.py --suite default --preset fake --query "undo a git rebase"

Arguments: ``--suite NAME|DIR`` (default ``default``), ``--preset offline|offline-mini|offline-gemma|qmd|tiny|fake``,
``--query TEXT`` (otherwise the first labelled query), ``--intent TEXT``, ``--chunker NAME``.

"pipeline options" holds the retrieval options of ``qmdlab query`` (extra keyword channels, BM25
mode, strong-signal skip, min score and its fallback, required and preferred tags), named as the
:class:`~qmdlab.pipeline.config.PipelineConfig` fields they set for the live query.

Every table below is a table of the :class:`qmdlab.pipeline.trace.Trace` that
``Lab.query`` returns; the notebook only arranges and plots them.
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full", app_title="qmdlab · explore")

with app.setup:
    import marimo as mo
    import polars as pl
    from matplotlib.figure import Figure

    from qmdlab import models as qmodels
    from qmdlab.eval import record, suites
    from qmdlab.pipeline.config import BM25_MODES, DEFAULT_TAG_LIFT, PipelineConfig
    from qmdlab.pipeline.fuse import contributions
    from qmdlab.pipeline.stages import plan_stages, preset_name
    from qmdlab.search import SearchFilters
    from qmdlab.search.hit_context import breadcrumbs
    from qmdlab.store.chunkers import CHUNKERS, DEFAULT_CHUNKER


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    # Explore one query

    Type a query (or pick a labelled one): expansions, every retrieval list, the fusion
    contributions, rerank scores, the blend, the final list with snippets, timings and notes.
    """)
    return


@app.cell
def _():
    args = mo.cli_args()
    suite_arg = str(args.get("suite") or "default")
    preset = args.get("preset") or None
    query_arg = str(args.get("query") or "")
    intent_arg = str(args.get("intent") or "")
    chunker_arg = str(args.get("chunker") or DEFAULT_CHUNKER)
    return chunker_arg, intent_arg, preset, query_arg, suite_arg


@app.cell
def _(chunker_arg, suite_arg):
    suite_picker = mo.ui.dropdown(sorted({*suites.REGISTRY, suite_arg}), value=suite_arg, label="suite")
    # the suite's own index per chunker (qmdlab.eval.record.index_dir); another chunker indexes and embeds once
    chunker_picker = mo.ui.dropdown(list(CHUNKERS), value=chunker_arg, label="chunker")
    return chunker_picker, suite_picker


@app.cell
def _():
    @mo.cache
    def open_lab(suite_name: str, preset, chunker: str = DEFAULT_CHUNKER):
        """The suite's index for ``chunker`` (built and embedded on first use) with the preset's models;
        expansion and rerank by the preset's defaults (``qmdlab query``'s rule, the switches below)."""
        suite = suites.get_suite(suite_name)
        suite.check()
        config = record.suite_config(suite).replace(chunker="" if chunker == DEFAULT_CHUNKER else chunker)
        name = preset_name(preset)
        staged, plan = plan_stages(config, name)
        with mo.status.spinner(title=f"Opening suite {suite.name!r}", subtitle="indexing and embedding"):
            lab = record.open_lab(suite, qmodels.load_models(name), staged, log=lambda _msg: None)
        lab.plan = plan
        return lab, record.judged_queries(suite), config

    return (open_lab,)


@app.cell
def _(chunker_picker, open_lab, preset, suite_picker):
    lab, labelled, stage_base = open_lab(suite_picker.value, preset, chunker_picker.value)
    return lab, labelled, stage_base


@app.cell
def _(labelled, query_arg):
    _options = {f"{qid}: {text}": text for qid, text in labelled.select("qid", "query").iter_rows()}
    _initial = next((k for k, v in _options.items() if v == query_arg), None)
    labelled_picker = mo.ui.dropdown(
        _options, value=_initial, label="labelled query", searchable=True, allow_select_none=True
    )
    return (labelled_picker,)


@app.cell
def _(labelled, labelled_picker, query_arg):
    # Picking a labelled query refills the box; typing a query needs "Explain".
    default_query = labelled_picker.value or query_arg or labelled["query"][0]
    return (default_query,)


@app.cell
def _(default_query):
    query_form = mo.ui.text(value=default_query, label="query", full_width=True).form(submit_button_label="Explain")
    return (query_form,)


@app.cell
def _(intent_arg):
    intent_box = mo.ui.text(value=intent_arg, label="intent (optional)", full_width=True)
    return (intent_box,)


@app.cell(hide_code=True)
def _(lab):
    # The retrieval options of `qmdlab query` in one dictionary, keyed by the PipelineConfig field each
    # sets (plus the tag filter); they start at the suite's config, where every extra channel is off.
    _c = lab.config

    def _slider(name, lo, hi, step, label):
        value = getattr(_c, name)
        return mo.ui.slider(lo, max(hi, value), step=step, value=value, debounce=True, show_value=True, label=label)

    pipeline_options = mo.ui.dictionary(
        {
            "expand": mo.ui.switch(value=_c.expand, label="query expansion (LLM)"),
            "rerank": mo.ui.switch(value=_c.rerank, label="rerank (LLM)"),
            "weight_original_phrase": _slider("weight_original_phrase", 0.0, 4.0, 0.1, "channel: verbatim phrase"),
            "weight_original_like": _slider("weight_original_like", 0.0, 4.0, 0.1, "channel: substring (LIKE)"),
            "weight_original_trigram": _slider("weight_original_trigram", 0.0, 4.0, 0.1, "channel: CJK trigram"),
            "weight_original_heading": _slider("weight_original_heading", 0.0, 4.0, 0.1, "channel: headings"),
            "bm25_mode": mo.ui.dropdown(list(BM25_MODES), value=_c.bm25_mode, label="BM25 mode"),
            "bm25_min_match": _slider("bm25_min_match", 0.0, 5.0, 0.1, "msm: terms to match (share if < 1)"),
            "strong_signal": mo.ui.switch(value=_c.strong_signal, label="strong-signal skip"),
            "min_score": _slider("min_score", 0.0, 1.0, 0.01, "min score"),
            "min_score_fallback": _slider("min_score_fallback", 0.0, 1.0, 0.01, "fallback: this far below min score"),
            "fallback_max": _slider("fallback_max", 0, 10, 1, "fallback: results at most"),
            "require_tags": mo.ui.text(value="", label="require tags (all; comma-separated)"),
            "prefer_tags": mo.ui.text(value=", ".join(_c.tags), label="prefer tags (comma-separated)"),
            "tag_lift": mo.ui.slider(
                0, 20, step=1, value=_c.tag_lift or DEFAULT_TAG_LIFT, show_value=True, label="tag lift (places)"
            ),
        }
    )
    return (pipeline_options,)


@app.cell
def _(lab, pipeline_options, stage_base):
    # The live query's config: the suite's with these options (Lab.query applies the overrides with
    # PipelineConfig.replace), the tag lift by `qmdlab query --prefer-tag`'s rule and `--tag`'s filter;
    # a stage switch moved off the preset's default counts as a flag (plan_stages, the trace's first note).
    _o = dict(pipeline_options.value)
    _flags = {s: _o[s] if _o[s] != getattr(lab.plan, s) else None for s in ("expand", "rerank")}
    _, query_plan = plan_stages(stage_base, lab.plan.preset, **_flags)
    _require = tuple(t.strip() for t in _o.pop("require_tags").split(",") if t.strip())
    _prefer = [t.strip() for t in _o.pop("prefer_tags").split(",") if t.strip()]
    _lift = _o.pop("tag_lift")
    query_overrides = {
        **_o,
        "fallback_max": int(_o["fallback_max"]),
        **lab.config.tag_preference(_prefer, _lift if _prefer else None),
    }
    query_config = lab.config.replace(**query_overrides)
    query_filters = SearchFilters(_require) if _require else None
    return query_config, query_filters, query_overrides, query_plan


@app.cell
def _(chunker_picker, intent_box, lab, labelled_picker, pipeline_options, query_config, query_form, suite_picker):
    mo.vstack(
        [
            mo.hstack([suite_picker, chunker_picker, labelled_picker], justify="start"),
            query_form,
            intent_box,
            mo.accordion(
                {
                    "pipeline options": mo.vstack(
                        [pipeline_options, mo.md(f"vs the suite's config:\n```\n{query_config.diff(lab.config)}\n```")]
                    )
                }
            ),
        ]
    )
    return


@app.cell
def _(default_query, query_form):
    query_text = (query_form.value or default_query).strip()
    return (query_text,)


@app.cell
def _(intent_box, lab, query_filters, query_overrides, query_plan, query_text):
    mo.stop(not query_text, mo.md("_Type a query and press **Explain**._"))
    with mo.status.spinner(title="Running the pipeline", subtitle=query_text):
        trace = lab.query(
            query_text,
            intent=intent_box.value.strip() or None,
            qid="q",
            filters=query_filters,
            plan=query_plan,
            **query_overrides,
        )
    return (trace,)


@app.cell
def _(trace):
    mo.md(f"""
    ## Expansions

    {trace.expansions.filter(pl.col("kept")).height} kept, {trace.expansions.filter(~pl.col("kept")).height} dropped
    (the stage notes say whether the strong-signal probe skipped expansion).
    """)
    return


@app.cell
def _(trace):
    mo.ui.table(trace.expansions.drop("qid"), selection=None, page_size=12)
    return


@app.cell
def _(trace):
    _lists = trace.lists.with_columns(
        (pl.col("source") + "/" + pl.col("query_type") + " #" + pl.col("list_id").cast(pl.Utf8)).alias("list")
    )
    _meta = _lists.group_by("list", maintain_order=True).agg(
        pl.first("subquery"), pl.first("weight"), pl.len().alias("hits")
    )
    side_by_side = (
        _lists.select("list", "rank", pl.format("{} ({})", "docno", pl.col("score").round(3)).alias("hit"))
        .pivot(on="list", index="rank", values="hit")
        .sort("rank")
    )
    mo.vstack(
        [
            mo.md(
                f"## Retrieval lists\n\n{_meta.height} lists; one column per list, one row per rank "
                "(document and normalised score)."
            ),
            mo.ui.table(_meta, selection=None, page_size=12),
            mo.ui.table(side_by_side, selection=None, page_size=20),
        ]
    )
    return


@app.cell
def _(lab, trace):
    _cfg = PipelineConfig.from_dict(trace.config) if trace.config else lab.config
    contrib = contributions(trace.lists, _cfg).with_columns(
        (pl.col("source") + "/" + pl.col("query_type")).alias("list_type")
    )
    return (contrib,)


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    ## Fusion

    What each retrieval list added to the top documents' fused score, plus the top-rank bonus.
    """)
    return


@app.cell
def _(contrib, trace):
    _top = trace.fused.sort("fused_rank").head(15)
    _docs = _top["docno"].to_list()
    _by_type = (
        contrib.filter(pl.col("docno").is_in(_docs))
        .group_by("docno", "list_type")
        .agg(pl.col("contribution").sum())
        .pivot(on="list_type", index="docno", values="contribution")
        .fill_null(0.0)
    )
    _by_type = _top.select("docno", "bonus").join(_by_type, on="docno", how="left").fill_null(0.0)
    _fig = Figure(figsize=(10, 0.35 * max(len(_docs), 4) + 1.2), layout="constrained")
    _ax = _fig.subplots()
    _left = [0.0] * len(_docs)
    for _col in [c for c in _by_type.columns if c not in ("docno", "bonus")] + ["bonus"]:
        _vals = _by_type[_col].to_list()
        _ax.barh(_docs, _vals, left=_left, label=_col, hatch="//" if _col == "bonus" else None)
        _left = [a + b for a, b in zip(_left, _vals)]
    _ax.invert_yaxis()
    _ax.set(xlabel=f"fused score ({trace.config.get('fusion', 'qmd_rrf')})", title="fusion contributions per document")
    _ax.legend(fontsize=8, loc="lower right")
    _fig
    return


@app.cell
def _(trace):
    mo.ui.table(trace.fused.drop("qid").sort("fused_rank"), selection=None, page_size=15)
    return


@app.cell
def _(trace):
    mo.vstack(
        [
            mo.md(
                f"## Rerank\n\n{trace.rerank.height} candidates scored "
                f"({trace.rerank.filter(pl.col('cached')).height} from the cache)."
            ),
            mo.ui.table(
                trace.rerank.drop("qid").sort("rerank_score", descending=True, nulls_last=True),
                selection=None,
                page_size=15,
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    ## Blend

    Position score (from the fused rank), rerank score and the blended final score, by final rank.
    """)
    return


@app.cell
def _(trace):
    _final = trace.final.sort("final_rank")
    _fig = Figure(figsize=(10, 3.4), layout="constrained")
    _ax = _fig.subplots()
    _x = list(range(1, _final.height + 1))
    _ax.plot(_x, _final["position_score"].to_list(), marker="o", label="position score")
    _ax.plot(_x, _final["rerank_score"].to_list(), marker="s", label="rerank score")
    _ax.plot(_x, _final["final_score"].to_list(), marker="^", label="final (blended)")
    _ax.set(xlabel="final rank", ylabel="score", title=f"blend: {trace.config.get('blend', 'position')}")
    _ax.legend(fontsize=8)
    _fig
    return


@app.cell
def _(trace):
    mo.ui.table(trace.final.sort("final_rank").drop("qid"), selection=None, page_size=15)
    return


@app.cell
def _(lab, trace):
    # the heading breadcrumb of each snippet's line (qmdlab.search.navigate, as on the CLI)
    _rows = trace.result_rows()
    _crumb = dict(zip([r.docno for r in _rows], breadcrumbs(lab.index, _rows)))
    results_table = (
        trace.results.drop("qid")
        .sort("final_rank")
        .with_columns(breadcrumb=pl.col("docno").replace_strict(_crumb, default="", return_dtype=pl.Utf8))
    )
    mo.vstack(
        [mo.md("## Results"), mo.ui.table(results_table, selection=None, page_size=10, wrapped_columns=["snippet"])]
    )
    return (results_table,)


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    ## Timings and notes
    """)
    return


@app.cell
def _(trace):
    _t = trace.timings
    _fig = Figure(figsize=(6, 0.35 * max(_t.height, 3) + 1), layout="constrained")
    _ax = _fig.subplots()
    _ax.barh(_t["stage"].to_list(), _t["ms"].to_list())
    _ax.invert_yaxis()
    _ax.set(xlabel="ms", title=f"timings ({_t['ms'].sum():.1f} ms in all)")
    _fig
    return


@app.cell
def _(trace):
    mo.ui.table(trace.notes.drop("qid"), selection=None, page_size=12, label="stage notes")
    return


if __name__ == "__main__":
    app.run()

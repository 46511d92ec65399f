"""``qmdlab query``: the traced hybrid pipeline from the command line (thin front end).

The query is plain text or a qmd query document (``intent:``/``lex:``/``vec:``/``hyde:``
lines, e.g. ``$'lex: rebase\\nvec: rewrite history'``). ``--json`` and the other formats print
qmd's result shapes; ``--trace-json`` prints the whole trace. Flags map one-to-one onto
:class:`~qmdlab.pipeline.config.PipelineConfig` fields; ``--config FILE`` loads the rest.
"""

from __future__ import annotations

import click

from qmdlab.commands.common import collections_option, pipeline_config_option, query_argument
from qmdlab.commands.result_options import ResultOptions, result_options
from qmdlab.errors import QmdlabError
from qmdlab.pipeline.config import BLEND_METHODS, FUSION_METHODS
from qmdlab.role_options import model_options


def register(group: click.Group) -> None:
    """Add ``query`` to the ``qmdlab`` group."""

    @group.command("query")
    @query_argument("text")
    @click.option("-n", "limit", type=int, default=None, help="Number of results [default: 5, or the --config file's].")
    @collections_option()
    @click.option("--intent", default=None, help="Disambiguating context (disables the strong-signal skip).")
    @click.option(
        "--expand/--no-expand",
        "expand",
        default=None,
        help="Run query expansion, or skip it [default: the preset's — off for offline and tiny, "
        "on for qmd — unless the --config file sets 'expand'].",
    )
    @click.option(
        "--rerank/--no-rerank",
        "rerank",
        default=None,
        help="Rerank the fused candidates with the LLM reranker, or keep the fusion order [default: "
        "the preset's — off for offline and tiny, on for qmd — unless the --config file sets "
        "'rerank'].",
    )
    @click.option("-C", "--candidate-limit", type=int, default=None, help="Candidates reranked (default 40).")
    @click.option(
        "--budget",
        "budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="A deadline for the whole query: a model stage (expansion, rerank) that would not fit in "
        "what is left, judged from the model's measured speed on this machine, is skipped before it "
        "starts and noted; one that runs is cut at the deadline [default: none, or the config's "
        "budget_s].",
    )
    @click.option("--fusion", type=click.Choice(FUSION_METHODS), default=None, help="Fusion method (default qmd_rrf).")
    @click.option("--blend", type=click.Choice(BLEND_METHODS), default=None, help="Blend method (default position).")
    @click.option("--min-score", type=float, default=None, help="Drop results whose final score is below this.")
    @click.option(
        "--min-score-fallback",
        type=float,
        default=None,
        help="When nothing reaches --min-score, keep up to 3 results within this much below it "
        "(the fallback probe; noted in the trace).",
    )
    @pipeline_config_option("Pipeline options from a YAML or TOML file (flags win).")
    @model_options()
    @click.option("--explain", is_flag=True, help="Print each result's list contributions, fusion, rerank and blend.")
    @click.option(
        "--tag", "tags", multiple=True, help="Require a front-matter tag (repeatable; all required), as on `search`."
    )
    @click.option(
        "--prefer-tag",
        "prefer_tags",
        multiple=True,
        help="Lift results carrying this tag (repeatable) by --tag-lift places.",
    )
    @click.option(
        "--tag-lift",
        type=int,
        default=None,
        help="Places a --prefer-tag result moves up [default: 3 with --prefer-tag, else the config's].",
    )
    @click.option("--no-strong-signal", is_flag=True, help="Always expand (turn the strong-signal skip off).")
    @click.option(
        "--trace-json",
        "trace_json",
        is_flag=True,
        help="The whole trace as one JSON object: results with their explanations, expansions, notes "
        "and timings (--json prints qmd's array of results).",
    )
    @result_options()
    @click.pass_context
    def query(
        ctx,
        text,
        limit,
        collections,
        intent,
        expand,
        rerank,
        candidate_limit,
        budget,
        fusion,
        blend,
        min_score,
        min_score_fallback,
        config_file,
        preset,
        roles,
        explain,
        tags,
        prefer_tags,
        tag_lift,
        no_strong_signal,
        trace_json,
        result: ResultOptions,
    ) -> None:
        """Hybrid search: BM25 + vectors, fusion, and — per preset or flag — expansion and rerank, with a trace.

        The first line on stderr says which stages ran and why (the preset's measured default, the
        config or a flag)."""
        from qmdlab.display import json_text, printable_text
        from qmdlab.models import load_models
        from qmdlab.pipeline.config import PipelineConfig
        from qmdlab.pipeline.expand import check_query_document
        from qmdlab.pipeline.stages import model_roles, plan_stages, preset_name
        from qmdlab.search import SearchFilters
        from qmdlab.store import Index
        from qmdlab.store.index import creates_index

        text = check_query_document(text)  # qmd's grammar: a line-numbered error, expand: TEXT read as TEXT
        if trace_json and result != ResultOptions(all_results=result.all_results):
            raise QmdlabError(
                "--trace-json prints the whole trace; the result formats and --context, --full, "
                "--max-chars and --line-numbers shape results (drop --trace-json for those)"
            )
        base = PipelineConfig.from_file(config_file) if config_file else PipelineConfig(limit=5)
        flags = {
            "limit": result.limit(limit),
            "candidate_limit": candidate_limit,
            "fusion": fusion,
            "blend": blend,
            "min_score": min_score,
            "min_score_fallback": min_score_fallback,
            "strong_signal": False if no_strong_signal else None,
            "budget_s": budget,
        }
        cfg = base.replace(
            **{k: v for k, v in flags.items() if v is not None}, **base.tag_preference(prefer_tags, tag_lift)
        )
        cfg, plan = plan_stages(cfg, preset_name(preset), expand=expand, rerank=rerank)
        idx = Index.open(ctx.obj.get("index") if ctx.obj else None, create=creates_index(ctx))
        ctx.call_on_close(idx.close)
        models = load_models(plan.preset, **{**roles, **model_roles(cfg)})  # a stage off loads no model
        load_in_background = getattr(models.embedder, "load_in_background", None)
        if cfg.vector and load_in_background is not None:
            load_in_background()  # the weights load while the pipeline's modules import and BM25 runs
        from qmdlab.pipeline.explain import format_explain, result_explain, to_json
        from qmdlab.pipeline.lab import Lab

        filters = SearchFilters(tuple(tags), None, None) if tags else None
        trace = Lab(idx, models, cfg, plan=plan).query(
            text, intent=intent, collections=list(collections) or None, filters=filters
        )
        for line in trace.notes_for("stages")[:1]:
            click.echo(line, err=True)
        if trace_json:
            click.echo(json_text(to_json(trace, cfg)))
            return
        rows = trace.result_rows()
        explains = None
        fmt = result.fmt
        if explain and fmt == "json":  # one explain block per result, inside the array
            blocks = {docno: block for (_, docno), block in result_explain(trace, cfg).items()}
            explains = [blocks.get(r.docno) for r in rows]
        click.echo(result.render(idx, rows, explains=explains))
        if explain and fmt in ("cli", "md"):
            click.echo("")
            click.echo(printable_text(format_explain(trace, cfg)))
        elif explain and fmt != "json":  # csv, xml, files: stdout stays parseable
            click.echo(printable_text(format_explain(trace, cfg)), err=True)

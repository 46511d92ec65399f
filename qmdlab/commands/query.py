"""``qmdlab query``: the traced hybrid pipeline from the command line (thin front end).

The query is plain text or a qmd query document (``intent:``/``lex:``/``vec:``/``hyde:``
lines, e.g. ``$'lex: rebase\\nvec: rewrite history'``). Flags map one-to-one onto
:class:`~qmdlab.pipeline.config.PipelineConfig` fields; ``--config FILE`` loads the rest.
"""
from __future__ import annotations

import json

import click

from qmdlab.pipeline.config import BLEND_METHODS, FUSION_METHODS


def register(group: click.Group) -> None:
    """Add ``query`` to the ``qmdlab`` group."""

    @group.command("query")
    @click.argument("text")
    @click.option("-n", "limit", type=int, default=None, help="Number of results [default: 5, or the --config file's].")
    @click.option("-c", "--collection", "collections", multiple=True, help="Restrict to a collection (repeatable).")
    @click.option("--intent", default=None, help="Disambiguating context (disables the strong-signal skip).")
    @click.option("--no-expand", is_flag=True, help="Skip query expansion.")
    @click.option("--no-rerank", is_flag=True, help="Skip the reranker (fusion order).")
    @click.option("-C", "--candidate-limit", type=int, default=None, help="Candidates reranked (default 40).")
    @click.option("--fusion", type=click.Choice(FUSION_METHODS), default=None, help="Fusion method (default qmd_rrf).")
    @click.option("--blend", type=click.Choice(BLEND_METHODS), default=None, help="Blend method (default position).")
    @click.option("--min-score", type=float, default=None, help="Drop results whose final score is below this.")
    @click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                  help="Pipeline options from a YAML or TOML file (flags win).")
    @click.option("--preset", default=None, help="Model preset: offline, qmd, tiny, fake (default $QMDLAB_PRESET "
                                                 "or offline).")
    @click.option("--explain", is_flag=True, help="Print each result's list contributions, fusion, rerank and blend.")
    @click.option("--json", "as_json", is_flag=True, help="JSON with results, explanations, expansions and notes.")
    @click.option("--format", "fmt", default="cli", show_default=True,
                  type=click.Choice(["cli", "csv", "md", "xml", "files"]), help="Result format (without --json).")
    @click.pass_context
    def query(ctx, text, limit, collections, intent, no_expand, no_rerank, candidate_limit, fusion, blend,
              min_score, config_file, preset, explain, as_json, fmt) -> None:
        """Hybrid search: expansion, BM25 + vectors, fusion, rerank, blend — with a trace."""
        from qmdlab.models import load_models
        from qmdlab.output import format_results
        from qmdlab.pipeline.config import PipelineConfig
        from qmdlab.pipeline.explain import format_explain, to_json
        from qmdlab.pipeline.lab import Lab
        from qmdlab.store import Index

        base = PipelineConfig.from_file(config_file) if config_file else PipelineConfig(limit=5)
        flags = {"limit": limit, "candidate_limit": candidate_limit, "fusion": fusion, "blend": blend,
                 "min_score": min_score, "expand": False if no_expand else None,
                 "rerank": False if no_rerank else None}
        cfg = base.replace(**{k: v for k, v in flags.items() if v is not None})
        idx = Index.open(ctx.obj.get("index") if ctx.obj else None)
        ctx.call_on_close(idx.close)
        roles = {"expand": "none"} if not cfg.expand else {}
        if not cfg.rerank:
            roles["rerank"] = "none"
        models = load_models(preset, **roles)
        trace = Lab(idx, models, cfg).query(text, intent=intent, collections=list(collections) or None)
        if as_json:
            click.echo(json.dumps(to_json(trace, cfg), ensure_ascii=False, indent=2))
            return
        click.echo(format_results(trace.result_rows(), fmt))
        if explain:
            click.echo("")
            click.echo(format_explain(trace, cfg))

"""What the index verbs share: the index named by ``--index``, an update report for people, and
the ``--config`` option of the verbs that run the pipeline (``query``, ``mcp``).

Below :mod:`qmdlab.commands.store` (which registers the ``collection`` group) and
:mod:`qmdlab.commands.collections` (qmd's further collection verbs), so neither imports the other
for these.
"""

from __future__ import annotations

import click


def open_index(ctx: click.Context):
    """The :class:`~qmdlab.store.Index` named by ``--index`` (opened once per invocation)."""
    from qmdlab.store import Index
    from qmdlab.store.index import creates_index

    obj = ctx.find_root().ensure_object(dict)
    if obj.get("_store_index") is None:  # a reading verb never creates an index
        obj["_store_index"] = Index.open(obj.get("index"), create=creates_index(ctx))
        ctx.call_on_close(obj["_store_index"].close)
    return obj["_store_index"]


def query_argument(name: str = "query"):
    """The query of ``search``/``vsearch``/``query``: every word after the options, joined by spaces
    as qmd joins them (``qmdlab search redis cache``); none, or only spaces, is a usage error."""

    def joined(ctx: click.Context, param: click.Parameter, words: tuple[str, ...]) -> str:
        text = " ".join(words)
        if not text.strip():
            raise click.UsageError(f"give a query: qmdlab {ctx.info_name} [options] QUERY", ctx=ctx)
        return text

    return click.argument(name, nargs=-1, callback=joined, metavar="QUERY")


def pipeline_config_option(help: str):
    """``--config FILE`` (the ``config_file`` parameter): pipeline options from a YAML or TOML file."""
    return click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None, help=help)


def print_report(rep) -> None:
    """An :class:`~qmdlab.store.UpdateReport` for people: the summary, skip counts by reason,
    the first 20 skipped paths; capacity warnings go to stderr."""
    click.echo(rep.summary())
    if rep.skipped:
        click.echo("  skipped by reason: " + ", ".join(f"{r} {n}" for r, n in rep.skip_counts().items()))
    details = dict(getattr(rep, "skip_details", ()))
    for docno, reason in rep.skipped_paths[:20]:
        detail = details.get(docno)
        click.echo(f"  skipped ({reason}{': ' + detail if detail else ''}): {docno}")
    if len(rep.skipped_paths) > 20:
        click.echo(f"  … and {len(rep.skipped_paths) - 20} more skipped")
    for w in rep.warnings:
        click.echo(f"warning: {w}", err=True)

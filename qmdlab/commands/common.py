"""What the index verbs share: the index named by ``--index``, an update report for people, the
``--config`` option of the verbs that run the pipeline (``query``, ``mcp``), and the options that
several verbs declare alike (``-c/--collection``, ``-n``, ``--json``, ``--line-numbers``,
``--progress``, ``--threads``).

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


def collections_option(help: str = "Restrict to a collection (repeatable)."):
    """``-c/--collection NAME``, repeatable (the ``collections`` parameter): the collections a verb
    reads or works on, every one when none is named; ``help`` says which for the verb."""
    return click.option("-c", "--collection", "collections", multiple=True, help=help)


def limit_option():
    """``-n N`` (the ``limit`` parameter) of ``search`` and ``vsearch``: how many results."""
    return click.option("-n", "limit", default=10, show_default=True, help="Number of results.")


def json_option():
    """``--json`` (the ``as_json`` parameter): the verb's report as JSON instead of text."""
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def line_numbers_option():
    """``--line-numbers/--no-line-numbers`` of ``get`` and ``multi-get`` (off by default)."""
    return click.option("--line-numbers/--no-line-numbers", default=False, help="Prefix each line with its number.")


def progress_option(help: str = "Progress bar on stderr."):
    """``--progress/--no-progress`` (on by default) of the verbs that work through a collection."""
    return click.option("--progress/--no-progress", default=True, help=help)


def llama_threads_option():
    """``--threads`` of the verbs that run a local model over a collection (``embed``, ``expand-docs``)."""
    return click.option(
        "--threads", type=int, default=None, help="llama.cpp threads (default $QMDLAB_THREADS or min(4, cpus))."
    )


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


def watch_options(f):
    """``--watch``, ``--embed``, ``--debounce`` and ``--poll`` (``update`` and ``mcp``)."""
    from qmdlab.store.watch import DEFAULT_DEBOUNCE_S

    f = click.option("--poll", is_flag=True, help="--watch: poll the folders instead of OS change events.")(f)
    f = click.option(
        "--debounce",
        type=click.FloatRange(min=0),
        default=DEFAULT_DEBOUNCE_S,
        show_default=True,
        help="--watch: seconds of quiet after a change before the index is updated.",
    )(f)
    f = click.option("--embed", is_flag=True, help="--watch: also embed the new chunks after each update.")(f)
    return click.option(
        "--watch", is_flag=True, help="Keep the collections fresh: update them whenever their files change."
    )(f)


def default_embedder():
    """The embedder of the index's preset and models (as ``qmdlab embed`` with no model options)."""
    from qmdlab.errors import ModelError
    from qmdlab.models import load_models

    emb = load_models(None, expand="none", rerank="none").embedder
    if emb is None:
        raise ModelError("the embed role is disabled ('none'); --embed needs an embedder (see `qmdlab models`)")
    return emb


def watch_pass_printer(embedder=None):
    """``(after_pass, on_error)`` for a :class:`~qmdlab.store.watch.Watcher`, writing to stderr only
    (stdout may be an MCP stdio stream): each pass that changed something is reported, and with an
    ``embedder`` (a callable that returns the embedder, loaded on first use) its new chunks are
    embedded; a failed pass says so and that it is tried again."""
    from qmdlab.errors import QmdlabError

    loaded: list = []

    def after_pass(p) -> None:
        if p.changed or p.number == 1:
            click.echo(f"watch: {', '.join(p.collections)}: {p.report.summary()}", err=True)
        if embedder is not None and (p.report.chunks_added or p.number == 1):
            from qmdlab.models.batching import embed_missing

            if not loaded:
                loaded.append(embedder())
            count = embed_missing(p.watcher_index, loaded[0], p.collections)
            if count.done:
                click.echo(f"watch: embedded {count.stored} chunk(s) with {loaded[0].model_id}", err=True)

    def on_error(p) -> None:
        what = str(p.error) if isinstance(p.error, QmdlabError) else f"{type(p.error).__name__}: {p.error}"
        click.echo(f"watch: update of {', '.join(p.collections)} failed ({what}); trying again", err=True)

    return after_pass, on_error


def run_watch(ctx: click.Context, idx, collections, *, embed: bool, debounce: float, poll: bool, allow_vanish: bool):
    """``update --watch``: watch in this thread until Ctrl-C or SIGTERM, then stop cleanly (exit 0)."""
    import signal

    from qmdlab.store.watch import Watcher

    after_pass, on_error = watch_pass_printer(default_embedder if embed else None)
    watcher = Watcher(
        idx,
        collections,
        debounce=debounce,
        poll=poll,
        allow_vanish=allow_vanish,
        after_pass=after_pass,
        on_error=on_error,
    )
    previous = signal.signal(signal.SIGTERM, lambda *_: watcher.stop.set())
    click.echo(
        f"watching {', '.join(c.name for c in idx.collections() if collections is None or c.name in collections)}"
        f" (debounce {debounce:g} s{', polling' if poll else ''}); Ctrl-C stops",
        err=True,
    )
    try:
        watcher.run()
    except KeyboardInterrupt:
        watcher.stop.set()
    finally:
        signal.signal(signal.SIGTERM, previous)
    click.echo(f"watch: stopped after {len(watcher.passes)} pass(es)", err=True)


def start_watch_thread(index_name: str | None, *, embed: bool, debounce: float, poll: bool):
    """``mcp --watch``: a :class:`~qmdlab.store.watch.Watcher` on its own connection to the index,
    in a daemon thread beside the server; returns its stop event (set it to end the thread)."""
    import threading

    from qmdlab.store import Index
    from qmdlab.store.watch import Watcher

    stop = threading.Event()
    after_pass, on_error = watch_pass_printer(default_embedder if embed else None)

    def run() -> None:
        try:
            with Index.open(index_name, create=False) as idx:
                Watcher(idx, debounce=debounce, poll=poll, after_pass=after_pass, on_error=on_error, stop=stop).run()
        except Exception as err:  # the server goes on without the watcher, and says so
            click.echo(f"watch: stopped ({err}); the index is no longer kept fresh", err=True)

    threading.Thread(target=run, name="qmdlab-watch", daemon=True).start()
    return stop

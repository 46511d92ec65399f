"""The ``qmdlab`` command line: a thin front end over the Python API.

Each area registers its verbs from ``qmdlab/commands/<area>.py`` (a ``register(group)``
function), so the CLI holds no logic of its own. Verbs of the packages above the core
(``qmdlab eval``/``tune`` from :mod:`eval`, ``qmdlab train`` from :mod:`training`) are
discovered through the ``qmdlab.commands`` entry-point group (name = verb, value = a
``register(group)``), so the core never imports them. User errors (:class:`QmdlabError`)
print one line and exit 1; ``--debug`` shows the traceback. Usage errors exit 1 too, and qmd's
command line is accepted as qmd accepts it (:mod:`qmdlab.qmd_argv`).
"""

from __future__ import annotations

import importlib
import os
import sqlite3
import sys
from typing import TYPE_CHECKING

import click

from qmdlab.errors import QmdlabError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

# Areas of the core whose commands are registered; a missing module (area not built yet, or an
# optional extra not installed) must not break the other verbs.
COMMAND_MODULES = ("store", "navigate", "models", "query", "mcp", "doctor", "expand_docs")

# Which core area registers each top-level verb, so that ``qmdlab search`` imports only
# ``qmdlab.commands.store`` (cold start: ``import qmdlab.cli`` loads no area at all). A verb
# missing here and from the entry points still works (every area is loaded to find it);
# ``tests/test_cli_startup.py`` checks that this table matches what the areas register.
COMMAND_VERBS = {
    "collection": "store",
    "context": "store",
    "get": "store",
    "ls": "store",
    "multi-get": "store",
    "search": "store",
    "status": "store",
    "update": "store",
    "cleanup": "store",
    "trust": "store",
    "init": "store",
    "refs": "navigate",
    "jump": "navigate",
    "chunks": "navigate",
    "embed": "models",
    "expand-docs": "expand_docs",
    "models": "models",
    "pull": "models",
    "vsearch": "models",
    "query": "query",
    "mcp": "mcp",
    "skill": "mcp",
    "doctor": "doctor",
}

#: Exit status of a usage error (an unknown verb, a missing argument, a bad value): 1, as qmd's.
USAGE_EXIT = 1

#: Entry-point group of verbs registered from outside the core (see ``pyproject.toml``).
ENTRY_POINT_GROUP = "qmdlab.commands"


def plugin_verbs() -> dict[str, EntryPoint]:
    """``{verb: entry point}`` of the :data:`ENTRY_POINT_GROUP` group (read from the installed
    package metadata only when a verb outside :data:`COMMAND_VERBS` is looked up or ``--help``
    lists every verb: ``importlib.metadata`` is not imported by ``import qmdlab.cli``)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _register_area(group: click.Group, name: str) -> None:
    """Import ``qmdlab.commands.<name>`` and let it add its verbs to ``group`` (skipped when the
    area is absent or its optional extra is not installed)."""
    try:
        mod = importlib.import_module(f"qmdlab.commands.{name}")
    except ModuleNotFoundError as err:  # area not present or its extra missing
        if err.name and err.name.startswith("qmdlab.commands"):
            return
        raise
    mod.register(group)


def _usage_exit(err: click.UsageError) -> None:
    """Give a usage error qmdlab's usage exit status (click's stubs declare ``exit_code`` a class constant)."""
    vars(err)["exit_code"] = USAGE_EXIT


class _Group(click.Group):
    """The root group: areas are imported when one of their verbs is looked up (lazy loading),
    and :class:`QmdlabError` becomes one line on stderr and exit status 1."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._areas_loaded: set[str] = set()
        self._plugins: dict[str, EntryPoint] | None = None

    def _load(self, area: str) -> None:
        if area not in self._areas_loaded:
            self._areas_loaded.add(area)
            _register_area(self, area)

    def _plugin_verbs(self) -> dict[str, EntryPoint]:
        if self._plugins is None:
            self._plugins = plugin_verbs()
        return self._plugins

    def _load_plugin(self, verb: str) -> None:
        """Register the entry point of ``verb`` (once per ``register`` function: one area may
        provide several verbs)."""
        ep = self._plugin_verbs().get(verb)
        if ep is not None and ep.value not in self._areas_loaded:
            self._areas_loaded.add(ep.value)
            ep.load()(self)

    def load_all(self) -> None:
        """Register every area's verbs, the entry points' included (``--help``, an unknown verb)."""
        for area in COMMAND_MODULES:
            self._load(area)
        for verb in self._plugin_verbs():
            self._load_plugin(verb)

    def get_command(self, ctx, cmd_name):
        if cmd_name not in self.commands:
            area = COMMAND_VERBS.get(cmd_name)
            if area is not None:
                self._load(area)
            else:
                self._load_plugin(cmd_name)
            if cmd_name not in self.commands:
                self.load_all()
            if cmd_name not in self.commands and not self._plugin_verbs():
                click.echo(
                    f"note: no '{ENTRY_POINT_GROUP}' entry points are installed, so the verbs of the "
                    "packages above the core are missing; the install predates them: re-run "
                    "`pip install -e .` in the qmdlab checkout",
                    err=True,
                )
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx):
        self.load_all()
        return super().list_commands(ctx)

    def parse_args(self, ctx, args):
        # qmd's command line: --index after the verb, options a verb does not have ignored
        from qmdlab.qmd_argv import qmd_argv

        args, notes = qmd_argv(self, ctx, args)
        for note in notes:
            click.echo(note, err=True)
        return super().parse_args(ctx, args)

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as err:
            _usage_exit(err)
            raise

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as err:  # a verb's own usage error (bad value, missing argument)
            _usage_exit(err)
            raise
        except QmdlabError as err:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"error: {err}", err=True)
            ctx.exit(1)
        except (sqlite3.DatabaseError, OSError, UnicodeEncodeError, OverflowError) as err:
            # a damaged index, a full or read-only disk; an argument that is not UTF-8, a number too large
            from qmdlab.store.failures import as_user_error

            obj = ctx.obj or {}
            mapped = as_user_error(err, obj.get("_store_index") or obj.get("index") or "")
            if mapped is None or obj.get("debug"):
                raise
            click.echo(f"error: {mapped}", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--index",
    "index_name",
    envvar="QMDLAB_INDEX",
    default=None,
    help="Index name or directory (default: $QMDLAB_INDEX, else the project's .qmdlab/ made by "
    "`qmdlab init`, else 'default').",
)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(None, "-v", "--version", package_name="qmdlab")
@click.pass_context
def cli(ctx: click.Context, index_name: str | None, debug: bool) -> None:
    """qmdlab: traced hybrid search over markdown, with evaluation, tuning and training."""
    ctx.ensure_object(dict)
    ctx.obj["index"] = index_name
    ctx.obj["debug"] = debug or bool(os.environ.get("QMDLAB_DEBUG"))
    # the index's own `models:` (collections.yaml) are read over $QMDLAB_HOME/models.yaml
    from qmdlab.paths import resolve_index_dir, set_active_index

    set_active_index(resolve_index_dir(index_name))
    ctx.call_on_close(lambda: set_active_index(None))


def main(argv: list[str] | None = None) -> int:
    try:
        code: int = cli.main(args=argv, prog_name="qmdlab", standalone_mode=True) or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    # A model call stopped by its time budget may still be inside one native step: wait for it
    # before the interpreter frees the models (imported lazily: most verbs never load it).
    budget = sys.modules.get("qmdlab.pipeline.budget")
    if budget is not None:
        code = budget.exit_safely(int(code))
    return int(code)


def run() -> None:
    """The ``qmdlab`` process: :func:`main`, then an exit that skips the interpreter's teardown.

    Tearing down the modules a query loads (polars' and llama.cpp's runtimes, numpy) takes
    ~0.1 s of a one-query process's ~1 s. Once the command has returned, its output is flushed
    and the ``atexit`` handlers have run, nothing is left to free that the operating system does
    not free, so the process leaves with ``os._exit``. A thread that is not a daemon (work that
    must finish) gets the normal exit, which waits for it.
    """
    import atexit
    import threading

    code = main()
    if any(t is not threading.main_thread() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()  # what the normal exit runs first: logging's flush, the budget's drain, …
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: the normal exit would fail to say more too
            code = code or 120  # Python's own status when flushing standard streams fails at exit
    os._exit(code)


if __name__ == "__main__":
    run()

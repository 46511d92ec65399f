"""The ``qmdlab`` command line: a thin front end over the Python API.

Each area registers its verbs from ``qmdlab/commands/<area>.py`` (a ``register(group)``
function), so the CLI holds no logic of its own. User errors (:class:`QmdlabError`)
print one line and exit 1; ``--debug`` shows the traceback.
"""
from __future__ import annotations

import importlib
import os
import sys

import click

from qmdlab.errors import QmdlabError

# Areas whose commands are registered; a missing module (area not built yet, or an
# optional extra not installed) must not break the other verbs.
COMMAND_MODULES = ("store", "models", "query", "eval", "train", "mcp", "doctor")


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except QmdlabError as err:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"error: {err}", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--index", "index_name", envvar="QMDLAB_INDEX", default=None,
              help="Index name or directory (default: $QMDLAB_INDEX or 'default').")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="qmdlab")
@click.pass_context
def cli(ctx: click.Context, index_name: str | None, debug: bool) -> None:
    """qmdlab: traced hybrid search over markdown, with evaluation, tuning and training."""
    ctx.ensure_object(dict)
    ctx.obj["index"] = index_name
    ctx.obj["debug"] = debug or bool(os.environ.get("QMDLAB_DEBUG"))


for _name in COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"qmdlab.commands.{_name}")
    except ModuleNotFoundError as _err:  # area not present or its extra missing
        if _err.name and _err.name.startswith("qmdlab.commands"):
            continue
        raise
    _mod.register(cli)


def main(argv: list[str] | None = None) -> int:
    try:
        return cli.main(args=argv, prog_name="qmdlab", standalone_mode=True) or 0
    except SystemExit as exc:
        return int(exc.code or 0)


if __name__ == "__main__":
    sys.exit(main())

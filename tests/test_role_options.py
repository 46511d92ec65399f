"""The shared model options: one ``--preset`` spelling whose help names exactly the registry's presets,
on every verb that loads a model, and the role overrides beside it."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.models.registry import PRESETS
from qmdlab.role_options import PRESET_HELP, PRESET_NAMES, model_options


def test_preset_names_are_the_registry_presets():
    assert sorted(PRESET_NAMES) == sorted(PRESETS)


def _command(path: str) -> click.Command:
    cmd: click.Command = cli
    ctx = click.Context(cli)
    for name in path.split():
        assert isinstance(cmd, click.Group)
        sub = cmd.get_command(ctx, name)
        assert sub is not None, path
        cmd = sub
    return cmd


@pytest.mark.parametrize("path", ["query", "vsearch", "embed", "models", "pull", "mcp", "doctor", "eval", "tune"])
def test_every_preset_option_is_the_shared_one(path):
    opts = {o.name: o for o in _command(path).params if isinstance(o, click.Option)}
    assert opts["preset"].help == PRESET_HELP, path


def test_model_options_put_preset_before_the_roles_and_gather_them():
    @click.command()
    @model_options("embed", "rerank")
    def cmd(preset, roles):
        click.echo(f"{preset} {sorted(roles.items())}")

    names = [p.name for p in cmd.params]
    assert names == ["preset", "embed_model", "rerank_model"]
    res = CliRunner().invoke(cmd, ["--preset", "tiny", "--rerank-model", "none"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == "tiny [('rerank', 'none')]"

"""``qmdlab mcp``: serve the index to agents over MCP (stdio, or Streamable HTTP + REST; ``--daemon``
in the background, ``--stop``); ``qmdlab skill``: the agent skill (show, install)."""

from __future__ import annotations

import click

from qmdlab.commands.common import pipeline_config_option, start_watch_thread, watch_options
from qmdlab.role_options import preset_option, role_options


def register(group: click.Group) -> None:
    group.add_command(mcp_command)
    group.add_command(skill_group)


@click.command("mcp")
@click.option(
    "--http",
    "use_http",
    is_flag=True,
    help="Serve Streamable HTTP (POST /mcp), POST /query and GET /health instead of stdio.",
)
@click.option(
    "--host",
    envvar="QMD_HOST",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind with --http (loopback by default; qmd's $QMD_HOST when set).",
)
@click.option("--port", default=8181, show_default=True, type=click.IntRange(0, 65535), help="Port for --http.")
@preset_option(envvar="QMDLAB_PRESET")
@role_options()
@pipeline_config_option("Pipeline options of the query tool from a YAML or TOML file (e.g. keyword channel weights).")
@click.option(
    "--daemon",
    is_flag=True,
    help="Run the HTTP server (--http implied) in the background, one per index; its PID "
    "goes to $QMDLAB_HOME/mcp.pid, its output to $QMDLAB_HOME/mcp.log (mcp-NAME.pid, mcp-NAME.log "
    "for another index).",
)
@click.option("--stop", "stop_daemon", is_flag=True, help="Stop the index's background server started with --daemon.")
@watch_options
@click.argument("action", required=False, type=click.Choice(["stop"]), metavar="[stop]")
@click.pass_context
def mcp_command(
    ctx: click.Context,
    use_http: bool,
    host: str,
    port: int,
    preset: str | None,
    roles: dict[str, str],
    config_file: str | None,
    daemon: bool,
    stop_daemon: bool,
    watch: bool,
    embed: bool,
    debounce: float,
    poll: bool,
    action: str | None,
) -> None:
    """Serve the index to agents: read-only tools query/get/multi_get/status/outline/read_section/parent.

    With --http, requests whose Origin is not loopback or whose Host is not the bound
    address get 403; allow more with QMDLAB_ALLOWED_ORIGINS / QMDLAB_ALLOWED_HOSTS
    (comma-separated; qmd's QMD_ALLOWED_ORIGINS / QMD_ALLOWED_HOSTS when unset). On stdio the server exits 0 when stdin closes, after finishing
    the requests in flight. `mcp --daemon` starts the HTTP server in the background
    and returns once it answers; `mcp --stop` (or `mcp stop`) stops it. With --watch the
    server also keeps the collections fresh as their files change (as `update --watch`).
    """
    if stop_daemon or action == "stop":
        if daemon:
            raise click.UsageError("--stop and --daemon exclude each other")
        from qmdlab.mcp_server.daemon import stop

        click.echo(stop(index=(ctx.obj or {}).get("index")))
        return
    if daemon:
        import shlex

        from qmdlab.mcp_server.daemon import log_file, pid_file, start

        extra = (["--preset", preset] if preset else []) + (["--config", config_file] if config_file else [])
        extra += [arg for role, ref in roles.items() for arg in (f"--{role}-model", ref)]
        if watch:
            extra += (
                ["--watch", "--debounce", str(debounce)] + (["--embed"] if embed else []) + (["--poll"] if poll else [])
            )
        index = (ctx.obj or {}).get("index")
        info = start(extra, host=host, port=port, index=index)
        click.echo(
            f"qmdlab MCP: http://{host}:{port}/mcp in the background (PID {info['pid']}; pid file "
            f"{pid_file(index)}, log {log_file(index)}); stop it with "
            + (f"`qmdlab --index {shlex.quote(index)} mcp --stop`" if index else "`qmdlab mcp --stop`")
        )
        return
    try:
        from qmdlab.mcp_server.backend import McpBackend
        from qmdlab.mcp_server.stdio import serve_stdio  # imports the SDK
    except ModuleNotFoundError as err:  # the 'mcp' extra is missing
        from qmdlab.errors import QmdlabError

        if (err.name or "").split(".")[0] not in ("mcp", "mcp_types", "uvicorn", "starlette", "anyio", "pydantic"):
            raise

        raise QmdlabError(
            f"the MCP server needs the 'mcp' extra ({err.name} is missing): pip install 'qmdlab[mcp]'"
        ) from None
    config = None
    if config_file:
        from qmdlab.pipeline.config import PipelineConfig

        config = PipelineConfig.from_file(config_file)
    models = None
    if roles:  # the preset's models with the overridden roles; the stage rule stays the preset's
        from qmdlab.models import load_models
        from qmdlab.pipeline.stages import preset_name

        preset = preset_name(preset)
        models = load_models(preset, embed=roles.get("embed"), expand=roles.get("expand"), rerank=roles.get("rerank"))
    if embed and not watch:
        raise click.UsageError("--embed goes with --watch")
    backend = McpBackend((ctx.obj or {}).get("index"), preset=preset, config=config, models=models)
    if watch:  # the index stays fresh while the server answers; its notes go to stderr (stdout may be MCP)
        start_watch_thread((ctx.obj or {}).get("index"), embed=embed, debounce=debounce, poll=poll)
    if use_http:
        from qmdlab.mcp_server.http import serve_http

        click.echo(f"qmdlab MCP: http://{host}:{port}/mcp  (REST: POST /query, GET /health)", err=True)
        serve_http(backend, host=host, port=port)
    else:
        serve_stdio(backend)


@click.group("skill")
def skill_group() -> None:
    """The agent skill: how to search with qmdlab, for agents that read skills (SKILL.md)."""


@skill_group.command("show")
def skill_show() -> None:
    """Print the skill."""
    from qmdlab.mcp_server.instructions import skill_markdown

    click.echo(skill_markdown(), nl=False)


@skill_group.command("install")
@click.option(
    "--global", "global_", is_flag=True, help="Install into ~/.agents/skills/qmdlab instead of ./.agents/skills/qmdlab."
)
@click.option("--yes", "link_claude", is_flag=True, help="Also link .claude/skills/qmdlab to it.")
@click.option("-f", "--force", is_flag=True, help="Replace an existing SKILL.md or link with other content.")
def skill_install(global_: bool, link_claude: bool, force: bool) -> None:
    """Write SKILL.md into .agents/skills/qmdlab of the current folder (or of the home folder)."""
    from pathlib import Path

    from qmdlab.mcp_server.skill import install_skill

    res = install_skill(Path.home() if global_ else Path.cwd(), force=force, link_claude=link_claude)
    click.echo(f"{'installed' if res.written else 'up to date'}: {res.path}")
    if res.link is not None:
        click.echo(f"linked: {res.link} -> {res.path.parent}")

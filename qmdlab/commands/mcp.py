"""``qmdlab mcp``: serve the index to agents over MCP (stdio, or Streamable HTTP + REST)."""
from __future__ import annotations

import click


def register(group: click.Group) -> None:
    group.add_command(mcp_command)


@click.command("mcp")
@click.option("--http", "use_http", is_flag=True, help="Serve Streamable HTTP (POST /mcp), POST /query and GET /health instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind with --http (loopback by default).")
@click.option("--port", default=8181, show_default=True, type=click.IntRange(0, 65535), help="Port for --http.")
@click.option("--preset", envvar="QMDLAB_PRESET", default=None,
              help="Model preset (offline, qmd, tiny, fake); default $QMDLAB_PRESET or the library default.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Pipeline options of the query tool from a YAML or TOML file (e.g. keyword channel weights).")
@click.pass_context
def mcp_command(ctx: click.Context, use_http: bool, host: str, port: int, preset: str | None,
                config_file: str | None) -> None:
    """Serve the index to agents: read-only tools query/get/multi_get/status/outline/read_section/parent.

    With --http, requests whose Origin is not loopback or whose Host is not the bound
    address get 403; allow more with QMDLAB_ALLOWED_ORIGINS / QMDLAB_ALLOWED_HOSTS
    (comma-separated). On stdio the server exits 0 when stdin closes, after finishing
    the requests in flight.
    """
    try:
        from qmdlab.mcp_server.engine import Engine
        from qmdlab.mcp_server.server import serve_stdio  # imports the SDK
    except ModuleNotFoundError as err:  # the 'mcp' extra is missing
        from qmdlab.errors import QmdlabError

        if (err.name or "").split(".")[0] not in ("mcp", "mcp_types", "uvicorn", "starlette", "anyio", "pydantic"):
            raise

        raise QmdlabError(f"the MCP server needs the 'mcp' extra ({err.name} is missing): pip install 'qmdlab[mcp]'") from None
    config = None
    if config_file:
        from qmdlab.pipeline.config import PipelineConfig

        config = PipelineConfig.from_file(config_file)
    engine = Engine((ctx.obj or {}).get("index"), preset=preset, config=config)
    if use_http:
        from qmdlab.mcp_server.http import serve_http

        click.echo(f"qmdlab MCP: http://{host}:{port}/mcp  (REST: POST /query, GET /health)", err=True)
        serve_http(engine, host=host, port=port)
    else:
        serve_stdio(engine)

"""The SDK's client talks to ``python -m qmdlab.cli mcp`` over stdio."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import pytest

pytestmark = pytest.mark.slow  # a subprocess start-up (imports + index open) takes seconds


def test_stdio_client_lists_and_calls_every_tool(mcp_env, mcp_helpers):
    from mcp import Client

    async def main():
        async with Client(mcp_helpers.stdio_params(mcp_env)) as client:
            await mcp_helpers.check_all_tools(client, mcp_env)

    anyio.run(main)


def _frame(i, method, params=None):
    msg = {"jsonrpc": "2.0", "method": method}
    if i is not None:
        msg["id"] = i
    if params is not None:
        msg["params"] = params
    return json.dumps(msg) + "\n"


SLOW_SERVER = """
import time
from qmdlab.mcp_server.backend import McpBackend
from qmdlab.mcp_server.stdio import serve_stdio
from qmdlab.models import load_models
from qmdlab.models.base import ModelSet

class SlowReranker:  # the fake reranker, slowed down so requests are still running at EOF
    def __init__(self, inner):
        self.inner, self.model_id, self.fingerprint = inner, inner.model_id, inner.fingerprint
    def score(self, query, texts):
        time.sleep(0.4)
        return self.inner.score(query, texts)

m = load_models("fake")
serve_stdio(McpBackend(None, models=ModelSet(m.embedder, m.expander, SlowReranker(m.reranker))))
"""


def test_stdin_eof_finishes_in_flight_requests_then_exits_0(mcp_env, mcp_helpers):
    """Requests written just before stdin closes are all answered, then the process exits 0.

    The reranker sleeps 0.4 s per query, so when stdin closes (at once) all three queries
    are still queued or running; the SDK alone would drop them.
    """
    frames = [
        _frame(
            1,
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "eof-test", "version": "0"}},
        ),
        _frame(None, "notifications/initialized"),
    ] + [_frame(10 + i, "tools/call", {"name": "query", "arguments": {"query": f"pasta dough {i}"}}) for i in range(3)]
    proc = subprocess.run(
        [sys.executable, "-c", SLOW_SERVER],
        input="".join(frames),
        capture_output=True,
        text=True,
        env=dict(mcp_env.env, PATH=""),
        cwd=str(mcp_helpers.repo),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    replies = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines()) if "id" in m}
    assert set(replies) == {1, 10, 11, 12}, proc.stdout[-2000:]
    for i in (10, 11, 12):
        result = replies[i]["result"]
        assert not result.get("isError"), result
        assert result["structuredContent"]["query"] == f"pasta dough {i - 10}"
        assert result["structuredContent"]["results"], result


def test_cli_registers_mcp_with_its_options():
    from click.testing import CliRunner

    from qmdlab.cli import cli

    res = CliRunner().invoke(cli, ["mcp", "--help"])
    assert res.exit_code == 0, res.output
    for opt in ("--http", "--host", "--port", "--preset", "QMDLAB_ALLOWED_ORIGINS"):
        assert opt in res.output

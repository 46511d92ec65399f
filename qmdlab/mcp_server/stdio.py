"""``qmdlab mcp``: MCP over stdin/stdout, finishing the requests in flight when stdin closes.

Every frame is sorted by :func:`qmdlab.mcp_server.frames.check_frame` before the SDK sees it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from qmdlab.mcp_server.backend import McpBackend
from qmdlab.mcp_server.frames import _valid_id, check_frame
from qmdlab.mcp_server.server import build_server

log = logging.getLogger(__name__)


class _DrainingStdio:
    """stdin/stdout for the SDK's stdio transport that finish in-flight requests on EOF.

    The SDK ends its serving loop as soon as stdin closes, dropping requests still being
    worked on. Here the stdin iterator records the id of every request it hands over and
    the stdout writer forgets an id once its response is written; at end of input the
    iterator waits until no request is pending (or ``drain_timeout`` seconds pass) before
    reporting EOF, so every request written before stdin closed gets its answer.

    Every frame is checked first (:func:`check_frame`): one the SDK would reject without an
    answer is answered here with a JSON-RPC error and never handed over, so a bad frame can
    neither end the server nor leave an id pending that would keep it from exiting at EOF.
    """

    def __init__(self, stdin: Any, stdout: Any, drain_timeout: float = 600.0):
        import anyio

        self._in, self._out = stdin, stdout
        self.pending: set[Any] = set()
        self._changed = anyio.Event()
        self._write_lock = anyio.Lock()
        self.drain_timeout = drain_timeout

    def _settle(self, request_id: Any) -> None:
        import anyio

        if _valid_id(request_id) and request_id in self.pending:
            self.pending.discard(request_id)
            self._changed.set()
            self._changed = anyio.Event()

    async def _lines(self):
        import anyio

        async for line in self._in:
            msg, reply = check_frame(line)
            if reply is not None:
                log.warning("answered a malformed frame: %s", reply["error"]["message"])
                await self._send(json.dumps(reply) + "\n")
                continue
            if msg is None:
                continue
            if "method" in msg and "id" in msg:
                self.pending.add(msg["id"])
            elif msg.get("method") == "notifications/cancelled":
                self._settle((msg.get("params") or {}).get("requestId"))
            yield line
        with anyio.move_on_after(self.drain_timeout):
            while self.pending:
                await self._changed.wait()
        if self.pending:
            log.warning("stdin closed; gave up waiting for %d request(s)", len(self.pending))

    def __aiter__(self):
        return self._lines()

    async def _send(self, text: str) -> None:
        async with self._write_lock:
            await self._out.write(text)
            await self._out.flush()

    async def write(self, text: str) -> None:
        async with self._write_lock:
            await self._out.write(text)
        try:
            msg = json.loads(text)
        except (ValueError, RecursionError):
            return
        if isinstance(msg, dict) and "id" in msg and "method" not in msg:
            self._settle(msg["id"])

    async def flush(self) -> None:
        async with self._write_lock:
            await self._out.flush()


def serve_stdio(backend: McpBackend) -> None:
    """Serve MCP over stdin/stdout; on stdin EOF finish the requests in flight, then return.

    While serving, file descriptor 1 points at stderr (the protocol uses a private
    duplicate), so nothing a library prints can corrupt the protocol stream; fd 0 points
    at the null device.
    """
    import os
    import sys

    import anyio
    from mcp.server.stdio import stdio_server

    backend.warm()  # models load once, before the first request, and stay warm
    server = build_server(backend)
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    stdin = open(wire_in, encoding="utf-8", errors="replace", newline="\n")
    stdout = open(wire_out, "w", encoding="utf-8", newline="\n")

    async def main() -> None:
        io = _DrainingStdio(anyio.wrap_file(stdin), anyio.wrap_file(stdout))
        # The low-level server is what MCPServer.run_stdio_async drives; it is driven here
        # so that the draining stdin/stdout can be passed to the SDK's stdio transport.
        lowlevel = server._lowlevel_server
        async with stdio_server(stdin=io, stdout=io) as (read_stream, write_stream):  # type: ignore[arg-type]
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        for f in (stdin, stdout):
            try:
                f.close()
            except OSError:
                pass
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)

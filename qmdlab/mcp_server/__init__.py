"""qmdlab's agent interface: an MCP server (stdio and Streamable HTTP) and a REST query endpoint.

The server holds no retrieval logic: every tool calls qmdlab's own API through one
:class:`~qmdlab.mcp_server.backend.McpBackend` (index + warm models + pipeline).

- :func:`qmdlab.mcp_server.server.build_server` — the :class:`mcp.server.mcpserver.MCPServer`
  with the tools ``query get multi_get status outline read_section parent`` and the
  document resources ``qmd://<collection>/<path>``;
- :func:`qmdlab.mcp_server.stdio.serve_stdio` — ``qmdlab mcp`` (frames sorted by
  :func:`qmdlab.mcp_server.frames.check_frame`);
- :func:`qmdlab.mcp_server.http.build_app` / :func:`~qmdlab.mcp_server.http.serve_http` —
  ``qmdlab mcp --http``: ``POST /mcp``, ``POST /query``, ``GET /health``;
- :mod:`qmdlab.store.outline` (shared with the CLI) — outline / section / parent over a document's headings.
"""

from __future__ import annotations

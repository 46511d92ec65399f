"""JSON-RPC frames as MCP's stdio transport receives them: which to hand to the SDK, which to
answer with an error, which to drop (:func:`check_frame`), and the string check the HTTP server
shares (:func:`has_lone_surrogate`)."""

from __future__ import annotations

import json
from typing import Any

from mcp_types import jsonrpc_message_adapter


def _valid_id(value: Any) -> bool:
    """A JSON-RPC id MCP accepts: a string (of Unicode text) or an integer (not a bool, a float or null)."""
    if isinstance(value, str):
        return not has_lone_surrogate(value)
    return isinstance(value, int) and not isinstance(value, bool)


def has_lone_surrogate(data: Any) -> bool:
    """Does a parsed JSON value hold a string with a lone surrogate (``"\\ud800"`` is valid JSON
    syntax but no Unicode text: it cannot be encoded, so it fails wherever the text is used)?

    >>> has_lone_surrogate({"a": ["ok", {"b": "x\\ud800"}]}), has_lone_surrogate({"a": "\\U0001f642"})
    (True, False)
    """
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _sdk_accepts(line: str) -> bool:
    """Would the SDK's stdio transport accept the frame (its message model)?"""
    try:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        return False
    return True


def check_frame(line: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Sort one stdio frame: ``(message, None)`` to hand to the SDK, ``(None, error)`` to answer
    with the JSON-RPC ``error`` response instead, or ``(None, None)`` to drop (a blank line, or
    a malformed response the client sent to this server — nothing answers a response).

    The JSON-RPC 2.0 rules: text that is not JSON (or nests too deeply) gets ``-32700`` with id
    ``null``; a batch (MCP has none), a ``jsonrpc`` other than ``"2.0"``, a method that is not a
    string, params that are not an object, or an id that is not a string or an integer get
    ``-32600``, with the request's id when it is a valid one. So does a string holding a lone
    surrogate escape (``"\\ud800"``), and any other frame the SDK's own message model refuses:
    the SDK would drop it without an answer, leaving its id pending forever.

    >>> check_frame('{"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}')[1]["error"]["code"]
    -32600
    >>> check_frame('{"jsonrpc": "2.0", "id": 7, "method": "ping"}')[0]["id"], check_frame("{oops")[1]["id"]
    (7, None)
    """
    if not line.strip():
        return None, None

    def error(code: int, message: str, request_id: Any = None) -> tuple[None, dict[str, Any]]:
        return None, {
            "jsonrpc": "2.0",
            "id": request_id if _valid_id(request_id) else None,
            "error": {"code": code, "message": message},
        }

    try:
        data = json.loads(line)
    except RecursionError:
        return error(-32700, "Parse error: JSON nested too deeply")
    except ValueError as err:
        return error(-32700, f"Parse error: {err}")
    if isinstance(data, list):
        return error(-32600, "Invalid Request: batches are not supported; send one message per line")
    if not isinstance(data, dict):
        return error(-32600, "Invalid Request: expected a JSON object")
    request_id = data.get("id")
    if data.get("jsonrpc") != "2.0":
        return error(-32600, 'Invalid Request: "jsonrpc" must be "2.0"', request_id)
    if "method" not in data:
        if "id" in data and _valid_id(request_id) and ("result" in data) != ("error" in data):
            if not _sdk_accepts(line) or has_lone_surrogate(data):
                return None, None  # a malformed response: nothing answers a response
            return data, None  # a response to a request of this server's
        if "result" in data or "error" in data:
            return None, None
        return error(-32600, 'Invalid Request: no "method"', request_id)
    if not isinstance(data["method"], str):
        return error(-32600, 'Invalid Request: "method" must be a string', request_id)
    if "id" in data and not _valid_id(request_id):
        return error(-32600, 'Invalid Request: "id" must be a string or an integer')
    if "params" in data and not isinstance(data["params"], dict):
        return error(-32600, 'Invalid Request: "params" must be an object', request_id)
    if has_lone_surrogate(data):
        return error(
            -32600,
            "Invalid Request: a string holds a lone surrogate escape (such as \\ud800), not Unicode text",
            request_id,
        )
    try:  # what the SDK's stdio transport does with the line; a frame it refuses is answered here
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as err:
        first = err.errors()[0]["msg"] if hasattr(err, "errors") and err.errors() else str(err)
        return error(-32600, f"Invalid Request: {first}", request_id)
    return data, None


__all__ = ["check_frame", "has_lone_surrogate"]

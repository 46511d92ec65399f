"""Every bad stdio frame gets a JSON-RPC error (or is dropped by the spec's rules); the server
keeps serving and exits 0 when stdin closes."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from qmdlab.mcp_server.frames import check_frame

pytestmark = pytest.mark.slow  # one subprocess start-up (imports + index open)

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "frames", "version": "0"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
DEEP = "[" * 100_000 + "]" * 100_000

# (frame, expected error code, id the error must carry)
BAD = [
    ('{"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}', -32600, None),
    ('{"jsonrpc": "2.0", "id": [1], "method": "ping"}', -32600, None),
    (DEEP, -32700, None),
    ('{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', -32600, None),
    ('{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600, None),
    ('{"jsonrpc": "2.0", "id": null, "method": "ping"}', -32600, None),
    ('{"jsonrpc": "2.0", "id": 7, "method": 5}', -32600, 7),
    ('[{"jsonrpc": "2.0", "id": 8, "method": "ping"}]', -32600, None),
    ("[]", -32600, None),
    ('{"jsonrpc": "1.0", "id": 9, "method": "ping"}', -32600, 9),
    ('{"id": 10, "method": "ping"}', -32600, 10),
    ('{"jsonrpc": "2.0", "id": 11, "method": "ping", "params": "x"}', -32600, 11),
    ("not json at all", -32700, None),
    ('{"jsonrpc": "2.0", "id": 12, "meth', -32700, None),
    ('"just a string"', -32600, None),
]


@pytest.mark.parametrize("frame,code,rid", BAD, ids=range(len(BAD)))
def test_check_frame_answers_every_bad_frame(frame, code, rid):
    msg, reply = check_frame(frame)
    assert msg is None and reply["jsonrpc"] == "2.0"
    assert reply["error"]["code"] == code and reply["id"] == rid


def test_check_frame_passes_good_frames_and_drops_stray_responses():
    assert check_frame(json.dumps(INIT))[0] == INIT
    assert check_frame(json.dumps(INITIALIZED))[0] == INITIALIZED
    assert check_frame('{"jsonrpc": "2.0", "id": "a", "result": {}}')[0]["id"] == "a"
    assert check_frame('{"jsonrpc": "2.0", "id": 1.5, "result": {}}') == (None, None)
    assert check_frame("   \n") == (None, None)


def test_stdio_server_survives_every_bad_frame_and_exits_at_eof(mcp_env, mcp_helpers):
    frames = [json.dumps(INIT), json.dumps(INITIALIZED)] + [f for f, _, _ in BAD]
    frames.append(json.dumps({"jsonrpc": "2.0", "id": 99, "method": "ping"}))
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "qmdlab.cli", "mcp"],
        input="\n".join(frames) + "\n",
        capture_output=True,
        text=True,
        env=dict(mcp_env.env, PATH=""),
        cwd=str(mcp_helpers.repo),
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert time.monotonic() - start < 60
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    errors = [(r["error"]["code"], r["id"]) for r in replies if "error" in r]
    assert sorted(errors, key=repr) == sorted([(c, i) for _, c, i in BAD], key=repr), proc.stdout[-2000:]
    by_id = {r["id"]: r for r in replies if "result" in r}
    assert set(by_id) == {1, 99} and by_id[99]["result"] == {}

"""The loopback guard parses Host and Origin exactly: no prefix, suffix or user-info tricks."""

from __future__ import annotations

import pytest

from qmdlab.mcp_server.http import OriginHostGuard

PORT = 8181

HOSTS = [  # (Host header, accepted)
    (f"127.0.0.1:{PORT}", True),
    (f"localhost:{PORT}", True),
    (f"LOCALHOST:{PORT}", True),
    (f"[::1]:{PORT}", True),
    (f"127.0.0.2:{PORT}", True),  # all of 127.0.0.0/8 is loopback
    (f"127.0.0.1.attacker.example:{PORT}", False),
    (f"127.0.0.1.nip.io:{PORT}", False),
    (f"localhost.attacker.example:{PORT}", False),
    (f"[::1].evil.example:{PORT}", False),
    (f"evil.example@127.0.0.1:{PORT}", False),
    (f"127.0.0.1:{PORT}@evil.example", False),
    (f"127.0.0.1:{PORT}/x", False),
    (f"127.0.0.1 :{PORT}", False),
    ("127.0.0.1:9", False),
    (f"evil.example:{PORT}", False),
    (f"127.1:{PORT}", False),
    (f"127.0.0.1:{PORT}:{PORT}", False),
    ("127.0.0.1:99999", False),
    ("", False),
    (None, False),
]

ORIGINS = [  # (Origin header, accepted)
    (None, True),
    (f"http://127.0.0.1:{PORT}", True),
    ("http://localhost:3000", True),
    ("https://[::1]", True),
    ("http://127.0.0.1.attacker.example", False),
    ("http://127.0.0.1.nip.io", False),
    (f"http://127.0.0.1.nip.io:{PORT}", False),
    ("http://[::1].evil.example", False),
    (f"http://[::1].evil.example:{PORT}", False),
    (f"http://evil.example@127.0.0.1:{PORT}", False),
    (f"http://user:pw@localhost:{PORT}", False),
    ("http://localhost.evil.example", False),
    ("http://127.0.0.1/evil", False),
    ("ftp://127.0.0.1", False),
    ("null", False),
    ("http://[::1", False),
    ("https://evil.example", False),
]


@pytest.fixture
def guard():
    return OriginHostGuard(None, host="127.0.0.1", port=PORT, allowed_origins=(), allowed_hosts=())


@pytest.mark.parametrize("host,ok", HOSTS)
def test_host_header(guard, host, ok):
    assert guard.host_ok(host) is ok


@pytest.mark.parametrize("origin,ok", ORIGINS)
def test_origin_header(guard, origin, ok):
    assert guard.origin_ok(origin) is ok


def test_allow_lists_still_match_exactly():
    g = OriginHostGuard(
        None, host="127.0.0.1", port=PORT, allowed_origins=("http://trusted.example",), allowed_hosts=("notes.lan",)
    )
    assert g.origin_ok("http://trusted.example") and not g.origin_ok("http://trusted.example.evil")
    assert g.host_ok("notes.lan:1234") and not g.host_ok("notes.lan.evil:1234")


def _call(guard_app, headers, method="POST"):
    """Drive the guard as uvicorn would; returns the response status (``None``: passed on)."""
    import anyio

    sent = []

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        sent.append({"type": "passed"})

    guard_app.app = app
    scope = {
        "type": "http",
        "method": method,
        "path": "/query",
        "headers": [(k.encode(), v.encode()) for k, v in headers],
    }
    anyio.run(guard_app, scope, receive, send)
    return None if sent[0]["type"] == "passed" else sent[0]["status"]


def test_two_origin_or_host_headers_and_non_json_posts_are_refused(guard):
    host = ("host", f"127.0.0.1:{PORT}")
    json_type = ("content-type", "application/json")
    assert _call(guard, [host, json_type]) is None
    assert _call(guard, [host, json_type, ("origin", "http://localhost"), ("origin", "http://evil.example")]) == 403
    assert _call(guard, [host, json_type, ("origin", "http://evil.example"), ("origin", "http://localhost")]) == 403
    assert _call(guard, [host, host, json_type]) == 403
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = [host] + ([("content-type", ctype)] if ctype else [])
        assert _call(guard, headers) == 415, ctype
    assert _call(guard, [host, ("content-type", "application/json; charset=utf-8")]) is None
    assert _call(guard, [host], method="GET") is None  # /health carries no body


def test_an_oversized_request_head_gets_431(guard):
    from qmdlab.mcp_server.http import MAX_HEADER_BYTES

    host = ("host", f"127.0.0.1:{PORT}")
    assert _call(guard, [host, ("x-big", "a" * (MAX_HEADER_BYTES + 1))], method="GET") == 431
    assert _call(guard, [host, ("x-ok", "a" * 1000)], method="GET") is None

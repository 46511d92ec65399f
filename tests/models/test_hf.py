"""The hf: downloader against a loopback HTTP server: ETag refresh, GGUF magic, offline behaviour."""

import http.server
import threading

import pytest

from qmdlab.errors import ModelError
from qmdlab.models import hf

URI = "hf:org/repo/sub/model.gguf"
BAD = "hf:org/repo/bad.gguf"


class FakeHub:
    """Serves /org/repo/resolve/main/<file> with ETags; counts full downloads and 304s."""

    def __init__(self):
        self.files = {
            "/org/repo/resolve/main/sub/model.gguf": (b"GGUF" + b"\x03\x00" * 100, '"v1"'),
            "/org/repo/resolve/main/bad.gguf": (b"<html>rate limited</html>", '"x"'),
        }
        self.downloads = 0
        self.not_modified = 0
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path not in hub.files:
                    self.send_error(404)
                    return
                body, etag = hub.files[self.path]
                if self.headers.get("If-None-Match") == etag:
                    hub.not_modified += 1
                    self.send_response(304)
                    self.end_headers()
                    return
                hub.downloads += 1
                self.send_response(200)
                self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hub(tmp_path, monkeypatch):
    h = FakeHub()
    monkeypatch.setenv("QMDLAB_CACHE", str(tmp_path / "models"))
    monkeypatch.setenv("HF_ENDPOINT", h.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield h
    h.close()


def test_download_then_local_then_etag_refresh(hub, tmp_path):
    path = hub.files["/org/repo/resolve/main/sub/model.gguf"]
    p = hf.ensure(URI)
    assert p == tmp_path / "models" / "hf" / "org" / "repo" / "sub" / "model.gguf"
    assert p.read_bytes() == path[0]
    assert p.with_name("model.gguf.etag").read_text().strip() == '"v1"'
    assert hub.downloads == 1
    # present: no request at all
    assert hf.ensure(URI) == p and hub.downloads == 1 and hub.not_modified == 0
    # refresh, unchanged on the server: conditional GET answered 304
    assert hf.ensure(URI, refresh=True) == p and hub.downloads == 1 and hub.not_modified == 1
    # the server's file changed: refresh downloads the new body
    hub.files["/org/repo/resolve/main/sub/model.gguf"] = (b"GGUFnew", '"v2"')
    hf.ensure(URI, refresh=True)
    assert p.read_bytes() == b"GGUFnew" and hub.downloads == 2
    assert p.with_name("model.gguf.etag").read_text().strip() == '"v2"'


def test_corrupt_body_is_rejected_and_leaves_nothing(hub, tmp_path):
    with pytest.raises(ModelError, match="not a GGUF file"):
        hf.ensure(BAD)
    folder = tmp_path / "models" / "hf" / "org" / "repo"
    assert not any(folder.glob("bad.gguf*"))


def test_corrupt_update_keeps_the_good_copy(hub):
    p = hf.ensure(URI)
    hub.files["/org/repo/resolve/main/sub/model.gguf"] = (b"<html>", '"v3"')
    with pytest.raises(ModelError, match="bad magic"):
        hf.ensure(URI, refresh=True)
    assert p.read_bytes().startswith(b"GGUF")
    assert not p.with_name("model.gguf.part").exists()


def test_missing_file_names_the_fix(hub):
    with pytest.raises(ModelError, match=r"HTTP 404.*qmdlab pull"):
        hf.ensure("hf:org/repo/nope.gguf")


def test_offline(hub, monkeypatch):
    p = hf.ensure(URI)
    hub.close()
    assert hf.ensure(URI, refresh=True) == p  # keeps the local copy
    with pytest.raises(ModelError, match=r"cannot download .*qmdlab pull --preset"):
        hf.ensure("hf:org/repo/other.gguf")


@pytest.mark.parametrize("bad", ["hf:org/repo", "hf:org//f.gguf", "org/repo/f.gguf"])
def test_bad_uris(bad):
    with pytest.raises(ModelError):
        hf.parse_hf_uri(bad)

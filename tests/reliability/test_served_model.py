"""What a served model (an OpenAI-compatible server named by ``http://…#MODEL``) may do to qmdlab.

Each server here runs on loopback, started by the test, and answers as a hostile or broken one
would: it redirects to another host, drips its answer a byte at a time, streams megabytes,
answers NaN or all-zero vectors, changes its dimension, writes an endless expansion line or
thousands of them, puts terminal escapes in its errors. qmdlab must never send the key to another
origin, wait past ``QMDLAB_HTTP_TIMEOUT`` for one request, read past its answer cap, store a
vector it cannot search, or fail a query because of what the expander wrote
(``qmdlab/models/_http.py``'s module docs state the limits).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qmdlab.errors import ConfigError, ModelError
from qmdlab.models import _http
from qmdlab.models.http_embed import HttpEmbedder
from qmdlab.models.http_expand import HttpExpander

KEY = "sk-served-model-test-key"
DOCS = {
    "git-rebase.md": "# Git rebase\n\nRebase replays each commit onto another branch.\n",
    "git-merge.md": "# Git merge\n\nMerge joins two branch tips with a merge commit.\n",
    "pasta.md": "# Cooking pasta\n\nBoil water, add salt, cook the pasta.\n",
    "sqlite.md": "# SQLite search\n\nFull text search with bm25 in sqlite.\n",
}

Handler = Callable[[BaseHTTPRequestHandler, str, Any], None]


class Server:
    """A loopback HTTP server: ``handle(request, path, body)`` writes each answer; ``requests``
    records ``(method, path, headers)`` and ``got`` is set at the first request."""

    def __init__(self, handle: Handler):
        self.handle = handle
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.got = threading.Event()
        self.stop = threading.Event()
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                outer.requests.append((self.command, self.path, dict(self.headers)))
                outer.got.set()
                try:
                    outer.handle(self, self.path, json.loads(raw) if raw else None)
                except OSError:  # the client hung up (its deadline, its cap)
                    pass

            do_POST = do_GET = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.base = f"{self.origin}/v1"

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Server]]:
    started: list[Server] = []

    def start(handle: Handler) -> Server:
        started.append(Server(handle))
        return started[-1]

    yield start
    for s in started:
        s.close()


def send(h: BaseHTTPRequestHandler, payload: bytes | str | dict, code: int = 200, **headers: str) -> None:
    data = payload if isinstance(payload, bytes) else (payload if isinstance(payload, str) else json.dumps(payload))
    data = data.encode() if isinstance(data, str) else data
    h.send_response(code)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    for k, v in headers.items():
        h.send_header(k.replace("_", "-"), v)
    h.end_headers()
    h.wfile.write(data)


def vector(text: str) -> list[float]:
    return [float(len(text) % 7 + 1), 1.0, float("rebase" in text), 0.5]


def embeddings_json(vectors: list[str]) -> str:
    """An ``/embeddings`` answer whose vectors are given as JSON text (so ``NaN``, ``1e999`` can be written)."""
    rows = ", ".join(f'{{"object": "embedding", "index": {i}, "embedding": {v}}}' for i, v in enumerate(vectors))
    return f'{{"object": "list", "data": [{rows}]}}'


def one_line(msg: str) -> None:
    assert "\n" not in msg and all(ch.isprintable() for ch in msg), repr(msg)


# --- 1. the key never goes to another origin -----------------------------------------------------------


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_never_carries_the_key_to_another_host(serve, monkeypatch, code):
    monkeypatch.setenv("QMDLAB_MODEL_API_KEY", KEY)
    other = serve(lambda h, path, body: send(h, embeddings_json(["[1, 0, 0]"])))
    target = f"{other.origin}/steal"
    first = serve(lambda h, path, body: send(h, b"", code, Location=target))
    emb = HttpEmbedder(f"{first.base}#m", chunking={}, backoff=0.01)
    with pytest.raises(ModelError) as err:
        emb.embed_query("q")
    msg = str(err.value)
    one_line(msg)
    assert f"answered HTTP {code}, a redirect to {other.origin}/steal;" in msg
    assert "QMDLAB_EMBED_MODEL" in msg
    # a followed redirect would have reached the other server before the call returned
    assert not other.got.is_set() and other.requests == []
    assert [r[2].get("Authorization") for r in first.requests] == [f"Bearer {KEY}"]


# --- 2. one deadline for the whole request -------------------------------------------------------------


def drip_body(server_stop: threading.Event) -> Handler:
    def handle(h: BaseHTTPRequestHandler, path: str, body: Any) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        h.wfile.write(b'{"data": [')
        for _ in range(75):  # one byte every 0.2 s, for 15 s at most
            if server_stop.wait(0.2):
                return
            h.wfile.write(b" ")

    return handle


def drip_head(server_stop: threading.Event) -> Handler:
    def handle(h: BaseHTTPRequestHandler, path: str, body: Any) -> None:
        h.wfile.write(b"HTTP/1.0 200 OK\r\nX-Slow: ")
        for _ in range(75):
            if server_stop.wait(0.2):
                return
            h.wfile.write(b"a")

    return handle


@pytest.mark.parametrize("drip", [drip_body, drip_head], ids=["body", "head"])
def test_a_server_dripping_bytes_cannot_outlast_the_timeout(serve, monkeypatch, drip):
    monkeypatch.setenv("QMDLAB_HTTP_TIMEOUT", "1")
    stop = threading.Event()
    server = serve(lambda h, path, body: drip(stop)(h, path, body))
    emb = HttpEmbedder(f"{server.base}#m", chunking={}, backoff=0.01)
    t0 = time.monotonic()
    try:
        with pytest.raises(ModelError) as err:
            emb.embed_query("q")
    finally:
        took = time.monotonic() - t0
        stop.set()
    msg = str(err.value)
    one_line(msg)
    assert "did not answer within 1 s" in msg and "QMDLAB_HTTP_TIMEOUT" in msg
    assert took < 3.0, f"the request took {took:.1f} s under QMDLAB_HTTP_TIMEOUT=1"
    assert len(server.requests) == 1  # a timeout is not retried


# --- 3. a cap on the answer's size ------------------------------------------------------------------------


@pytest.mark.parametrize("declared", [False, True], ids=["streamed", "declared"])
def test_an_answer_over_the_cap_is_refused_without_reading_it(serve, monkeypatch, declared):
    cap = 1024 * 1024
    monkeypatch.setattr(_http, "MAX_REPLY_BYTES", cap, raising=False)
    sent = []
    block = b"[" + b"0," * (64 * 1024)

    def flood(h: BaseHTTPRequestHandler, path: str, body: Any) -> None:
        h.send_response(200)
        if declared:
            h.send_header("Content-Length", str(10**12))
        h.end_headers()
        for _ in range(200):  # 25 MiB, unless the client stops reading
            h.wfile.write(block)
            sent.append(len(block))

    server = serve(flood)
    emb = HttpEmbedder(f"{server.base}#m", chunking={}, backoff=0.01)
    tracemalloc.start()
    try:
        with pytest.raises(ModelError) as err:
            emb.embed_query("q")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(err.value)
    one_line(msg)
    assert msg.startswith(f"{server.base}/embeddings answered more than 1 MiB")
    assert peak < 4 * cap, f"reading the answer took {peak / 2**20:.1f} MiB"
    assert len(server.requests) == 1


# --- 4. vectors are checked before they are stored --------------------------------------------------------

POISONS = {
    "nan": "[NaN, 1, 0, 0]",
    "infinity": "[Infinity, 1, 0, 0]",
    "-infinity": "[1, -Infinity, 0, 0]",
    "1e999": "[1e999, 1, 0, 0]",
    "1e300": "[1e300, 1, 0, 0]",
    "all-zero": "[0, 0, 0.0, 0]",
    "empty": "[]",
    "other-dimension": "[1, 1, 0, 0, 1]",
}
PROBLEMS = {
    "nan": "a NaN value",
    "infinity": "an infinite value",
    "-infinity": "an infinite value",
    "1e999": "an infinite value",
    "1e300": "a value past float32 range",
    "all-zero": "an all-zero vector",
    "empty": "vectors of different dimensions",
    "other-dimension": "vectors of different dimensions (4, 5)",
}


class EmbeddingServer:
    """An ``/embeddings`` server of ``dim``-d vectors; ``poison`` (JSON text) replaces the vector of
    the note about SQLite — the second of the second batch of two (chunks go in path order)."""

    def __init__(self, serve: Callable[[Handler], Server]):
        self.poison: str | None = None
        self.dim = 4
        self.server = serve(self.handle)
        self.ref = f"{self.server.base}#served-embedder"

    def handle(self, h: BaseHTTPRequestHandler, path: str, body: Any) -> None:
        rows = [json.dumps((vector(t) + [0.25] * self.dim)[: self.dim]) for t in body["input"]]
        if self.poison is not None:
            rows = [self.poison if "SQLite" in t else r for t, r in zip(body["input"], rows)]
        send(h, embeddings_json(rows))


@pytest.fixture
def notes(tmp_path) -> Path:
    src = tmp_path / "notes"
    src.mkdir()
    for name, text in DOCS.items():
        (src / name).write_text(text, encoding="utf-8")
    return src


def stored(cli_run) -> tuple[int, set[int]]:
    with sqlite3.connect(Path(cli_run.index_dir) / "index.sqlite") as conn:
        (n,) = conn.execute("SELECT count(*) FROM vectors").fetchone()
        dims = {r[0] for r in conn.execute("SELECT DISTINCT dim FROM vectors")}
    return n, dims


@pytest.mark.parametrize("poison", list(POISONS))
def test_a_poisoned_batch_is_refused_whole_and_embedded_again(serve, notes, cli_run, qmdlab_home, monkeypatch, poison):
    model = EmbeddingServer(serve)
    monkeypatch.setenv("QMDLAB_EMBED_MODEL", model.ref)
    cli_run("collection", "add", str(notes), "--name", "kb")
    model.poison = POISONS[poison]
    res = cli_run("embed", "--batch-size", "2", "--no-progress", ok=False)
    assert res.exit_code == 1, res.output
    line = res.output.strip()
    assert line.count("\n") == 0 and line.startswith(f"error: embed model {model.ref}: "), line
    assert PROBLEMS[poison] in line and "the batch was refused" in line
    assert "2 vector(s) stored by this run" in line  # the first batch was fine and is kept
    assert stored(cli_run) == (2, {4})  # nothing of the second batch: its first vector was fine too
    model.poison = None
    out = cli_run("embed", "--no-progress").output
    assert out.startswith("embedded 2 chunks"), out  # the refused batch's chunks are embedded now
    assert stored(cli_run) == (4, {4})
    assert cli_run("embed", "--no-progress").output.startswith("all chunks already embedded")


def test_a_store_refuses_a_vector_that_is_not_finite_from_any_embedder(tmp_path, notes):
    from qmdlab.store import Index

    idx = Index(tmp_path / "index")
    try:
        idx.add_collection("kb", notes)
        idx.update()
        ids = idx.chunks_needing_vectors("fp")["chunk_id"].to_list()
        mat = np.ones((len(ids), 3), dtype=np.float32)
        mat[-1, 0] = np.nan
        with pytest.raises(
            ModelError, match=r"embedder 'fp' gave a NaN value \(vector 4 of 4\); nothing of this batch"
        ):
            idx.store_vectors(ids, mat, "fp")
        assert idx.vector_fingerprints() == {}
    finally:
        idx.close()


def test_status_counts_stored_vectors_that_are_not_finite_and_search_skips_them(
    serve, notes, cli_run, qmdlab_home, monkeypatch
):
    model = EmbeddingServer(serve)
    monkeypatch.setenv("QMDLAB_EMBED_MODEL", model.ref)
    cli_run("collection", "add", str(notes), "--name", "kb")
    cli_run("embed", "--no-progress")
    st = json.loads(cli_run("status", "--json").output)
    ((fp, v),) = st["vectors"].items()
    assert v["invalid"] == 0
    # a vector stored by an older version that did not check: NaN in the blob
    with sqlite3.connect(Path(cli_run.index_dir) / "index.sqlite") as conn:
        nan = np.array([np.nan, 1, 0, 0], dtype=np.float32).tobytes()
        conn.execute("UPDATE vectors SET blob = ? WHERE chunk_id = (SELECT min(chunk_id) FROM vectors)", (nan,))
    st = json.loads(cli_run("status", "--json").output)
    assert st["vectors"][fp]["invalid"] == 1
    assert "1 vector(s) hold NaN or infinite values" in cli_run("status").output
    from qmdlab.store import Index

    idx = Index(Path(cli_run.index_dir))
    try:
        assert np.isfinite(idx.vector_matrix(fp).matrix).all()  # left out: its row matches nothing
    finally:
        idx.close()
    cli_run("embed", "-f", "--no-progress")
    assert json.loads(cli_run("status", "--json").output)["vectors"][fp]["invalid"] == 0


def test_a_server_that_changed_its_dimension_is_re_embedded_by_embed_f(serve, notes, cli_run, qmdlab_home, monkeypatch):
    model = EmbeddingServer(serve)
    monkeypatch.setenv("QMDLAB_EMBED_MODEL", model.ref)
    cli_run("collection", "add", str(notes), "--name", "kb")
    cli_run("embed", "--no-progress")
    assert stored(cli_run) == (4, {4})
    (notes / "docker.md").write_text("# Docker network\n\nContainers talk over a bridge.\n", encoding="utf-8")
    cli_run("update")
    model.dim = 6  # the same model name now answers 6-d vectors
    res = cli_run("embed", "--no-progress", ok=False)
    assert res.exit_code == 1 and "gives 6-d vectors but the index holds 4-d ones" in res.output
    assert "`qmdlab embed -f`" in res.output and stored(cli_run) == (4, {4})
    out = cli_run("embed", "-f", "--no-progress").output  # what that line says to run works
    assert out.startswith("embedded 5 chunks") and "6-d" in out
    assert stored(cli_run) == (5, {6})


# --- 5. the expander's answer is bounded ---------------------------------------------------------------


def chat_server(serve: Callable[[Handler], Server], text: str) -> Server:
    def handle(h: BaseHTTPRequestHandler, path: str, body: Any) -> None:
        send(h, {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})

    return serve(handle)


LONG_LINE = ("lex: rebase " + "sqlite search " * 2000)[:27_000]
MANY_LINES = "".join(f"lex: rebase w{i}\n" for i in range(10_000))


def test_an_expander_line_of_27000_characters_never_fails_the_query(serve, notes, cli_run, qmdlab_home, monkeypatch):
    server = chat_server(serve, "lex: git rebase\n" + LONG_LINE)
    monkeypatch.setenv("QMDLAB_EXPAND_MODEL", f"{server.base}#expander")
    cli_run("collection", "add", str(notes), "--name", "kb")
    res = cli_run(
        "query",
        "rebase",
        "--preset",
        "fake",
        "--expand",
        "--no-strong-signal",
        "--no-rerank",
        "--format",
        "json",
        ok=False,
    )
    assert res.exit_code == 0, res.output
    assert server.requests and "git-rebase.md" in res.output


@pytest.mark.parametrize("answer", [LONG_LINE, MANY_LINES], ids=["27000-character line", "10000 lines"])
def test_the_trace_keeps_a_bounded_expansion_and_says_what_was_dropped(serve, tmp_path, notes, answer):
    import polars as pl

    from qmdlab.models.base import ModelSet
    from qmdlab.models.fakes import KeywordEmbedder
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.pipeline.lab import Lab
    from qmdlab.store import Index

    server = chat_server(serve, "lex: git rebase\n" + answer)
    idx = Index(tmp_path / "index")
    try:
        idx.add_collection("kb", notes)
        idx.update()
        lab = Lab(
            idx,
            ModelSet(KeywordEmbedder(["git", "rebase"]), HttpExpander(f"{server.base}#x"), None),
            PipelineConfig(strong_signal=False, rerank=False),
        )
        trace = lab.query("rebase", qid="q")
    finally:
        idx.close()
    exp = trace.expansions
    kept = exp.filter(pl.col("kept"))
    assert 1 <= kept.height <= 10 and ("lex", "git rebase") in zip(kept["type"], kept["text"])
    assert exp.height <= 200 and max(len(t) for t in exp["text"]) <= 1000
    reasons = " | ".join(r for r in exp["reason_dropped"].to_list() if r)
    if answer is LONG_LINE:
        assert "longer than 1000 characters" in reasons
    else:
        assert "over the limit of 10 expander lines kept" in reasons and "is not read" in reasons
    notes_text = " | ".join(trace.notes["message"].to_list())
    assert f"{kept.height} of {exp.height} lines kept" in notes_text and "failed" not in notes_text
    assert trace.final.height > 0


# --- 6. settings, escapes, the cache --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "1e999", "86401", "sixty"])
def test_a_bad_timeout_setting_is_one_line_naming_it(monkeypatch, value, notes, cli_run, qmdlab_home):
    cli_run("collection", "add", str(notes), "--name", "kb")
    monkeypatch.setenv("QMDLAB_HTTP_TIMEOUT", value)
    with pytest.raises(ConfigError) as err:
        HttpEmbedder("http://127.0.0.1:9/v1#m", chunking={})
    assert str(err.value) == (
        f"QMDLAB_HTTP_TIMEOUT={value!r} is not a number of seconds above 0 and at most 86400; set it to e.g. 60"
    )
    monkeypatch.setenv("QMDLAB_EMBED_MODEL", "http://127.0.0.1:9/v1#m")
    res = cli_run("vsearch", "rebase", ok=False)
    assert res.exit_code == 1 and res.output == f"error: {err.value}\n"


def test_what_a_server_writes_into_an_error_is_escaped(serve):
    from qmdlab.models.http_rerank import HttpReranker

    hostile = "\x1b]0;owned\x07\x1b[2J\x9b31m \u202eevil"
    shown = "\\x1b]0;owned\\x07\\x1b[2J\\x9b31m \\u202eevil"

    def handle(h: BaseHTTPRequestHandler, path: str, body: Any) -> None:
        if path.endswith("rerank"):
            send(h, b"", 302, Location=f"http://127.0.0.1:9/{hostile[:10]}")
        else:  # an error answer of raw bytes: not even JSON
            send(h, hostile.encode("utf-8"), 400 if path.endswith("embeddings") else 503)

    server = serve(handle)
    for call, expected in (
        (lambda: HttpEmbedder(f"{server.base}#m", chunking={}).embed_query("q"), f"HTTP 400 ({shown})"),
        (lambda: HttpExpander(f"{server.base}#m", backoff=0.01).expand("q"), f"HTTP 503 ({shown}) after 3 tries"),
        (
            lambda: HttpReranker(f"{server.base}#m").score("q", ["t"]),
            "a redirect to http://127.0.0.1:9/\\x1b]0;owned\\x07;",
        ),
    ):
        with pytest.raises(ModelError) as err:
            call()
        one_line(str(err.value))
        assert expected in str(err.value)


POISONED_EXPANSIONS = [
    42,
    "lex: a",
    [["lex", "a"]],
    {"raw": 1, "lines": [], "dropped": []},
    {"raw": "x", "lines": {"lex": "a"}, "dropped": []},
    {"raw": "x", "lines": [["lex"]], "dropped": []},
    {"raw": "x", "lines": [["lex", 3]], "dropped": []},
    {"raw": "x", "lines": []},
]


@pytest.mark.parametrize("entry", POISONED_EXPANSIONS, ids=[json.dumps(e)[:30] for e in POISONED_EXPANSIONS])
def test_a_cache_entry_of_the_wrong_type_is_a_miss(entry):
    from qmdlab.models import CachedExpander, CachedReranker, RuleExpander, TableReranker
    from qmdlab.store.cache import LLMCache

    cache = LLMCache(sqlite3.connect(":memory:", check_same_thread=False))
    exp = CachedExpander(RuleExpander({"q": "lex: a\n"}), cache)
    cache.put(exp.key("q"), "expand", entry)
    assert exp.peek("q") is None
    assert exp.expand("q").lines == [("lex", "a")] and exp.calls == 1  # computed again, and replaced
    assert exp.expand("q").lines == [("lex", "a")] and (exp.calls, exp.last_cached) == (1, True)
    rr = CachedReranker(TableReranker({}, default=lambda q, t: 0.5), cache)
    cache.put(rr.key("q", "t"), "rerank", entry if not isinstance(entry, (int, float)) else float("nan"))
    assert rr.peek_cached("q", ["t"]) is None
    assert rr.score_cached("q", ["t"]) == [(0.5, False)]
    assert rr.score_cached("q", ["t"]) == [(0.5, True)]


def test_the_reliability_page_states_the_limits_of_the_code():
    from qmdlab.models import expansion
    from qmdlab.pipeline import expand

    text = (Path(__file__).resolve().parents[2] / "docs" / "RELIABILITY.md").read_text(encoding="utf-8")
    section = text.split("## What a served model may do to qmdlab", 1)[1].split("\n## ", 1)[0].replace("\n", " ")
    for stated in (
        f"default {_http.DEFAULT_TIMEOUT:g}, at most {_http.MAX_TIMEOUT:,.0f})",
        f"more than {_http.MAX_REPLY_BYTES // 2**20} MiB",
        f"{_http.MAX_ERROR_BYTES // 1024} KiB are read",
        f"at most {expansion.MAX_LINES} lines of at most {expansion.MAX_LINE_CHARS:,} characters are read "
        f"(in the first {expansion.MAX_TEXT_CHARS // 1024} KiB) and at most {expand.MAX_EXPANDER_LINES} kept",
    ):
        assert stated in section, stated

"""The served-model backends (``http://…#MODEL``, ``openai:MODEL``) against a server on loopback
started by each test: the OpenAI-compatible protocol, retries, timeouts, one-line errors, the
stages' degrade-with-a-note, fingerprints — and the bundled suite scored through a server that
serves the local MiniLM GGUF and the overlap reranker, with the local models' nDCG@10."""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from qmdlab.errors import ConfigError, ModelError
from qmdlab.models import fakes
from qmdlab.models._http import parse_ref
from qmdlab.models.base import ModelSet
from qmdlab.models.http_embed import HttpEmbedder
from qmdlab.models.http_expand import HttpExpander
from qmdlab.models.http_rerank import HttpReranker
from qmdlab.models.llama_expand import SamplingConfig, parse_generated
from qmdlab.models.registry import build_model, ref_status, resolve_refs
from qmdlab.models.templates import expand_turns
from qmdlab.pipeline.config import PipelineConfig


class Stub:
    """What the loopback server answers: ``script[path]`` actions first (``("status", code, body,
    headers)``, ``("raw", bytes)``, ``("hang",)`` until :attr:`release`), then the protocol's answer
    computed by ``embed(texts)``, ``rerank(query, documents)`` or ``chat(messages)``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict, dict]] = []
        self.script: dict[str, list[tuple]] = {}
        self.release = threading.Event()
        self.embed = lambda texts: [[float(len(t)), 1.0, 0.0] for t in texts]
        self.rerank = lambda query, docs: {"results": [{"index": i, "relevance_score": 0.5} for i in range(len(docs))]}
        self.chat = lambda messages: ("lex: a\n", "stop")
        self.base = ""

    def answer(self, path: str, body: dict):
        if path == "/v1/embeddings":
            vecs = self.embed(body["input"])
            return {"object": "list", "data": [{"index": i, "embedding": v} for i, v in enumerate(vecs)]}
        if path == "/v1/rerank":
            return self.rerank(body["query"], body["documents"])
        if path == "/v1/chat/completions":
            text, finish = self.chat(body["messages"])
            return {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}]
            }
        return None


def _handler(stub: Stub):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep the test output clean
            pass

        def _send(self, code: int, payload: bytes, headers: dict | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(payload)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            stub.requests.append((self.path, body, dict(self.headers)))
            queue = stub.script.get(self.path) or []
            action = queue.pop(0) if queue else None
            try:
                if action is None:
                    reply = stub.answer(self.path, body)
                    if reply is None:
                        self._send(404, b'{"error": "no such endpoint"}')
                    else:
                        self._send(200, json.dumps(reply).encode())
                elif action[0] == "status":
                    self._send(action[1], action[2].encode(), action[3] if len(action) > 3 else None)
                elif action[0] == "raw":
                    self._send(200, action[1])
                elif action[0] == "hang":
                    stub.release.wait(30)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                pass

    return Handler


@pytest.fixture
def stub():
    s = Stub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(s))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="stub-model-server", daemon=True)
    thread.start()
    s.base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield s
    s.release.set()
    server.shutdown()
    server.server_close()
    thread.join(10)


# --- references -------------------------------------------------------------------------------------


def test_references_parse_and_reach_the_right_backend(stub, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("QMDLAB_MODEL_API_KEY", raising=False)
    ref = f"{stub.base}#minilm"
    assert isinstance(build_model("embed", ref), HttpEmbedder)
    assert isinstance(build_model("expand", ref), HttpExpander)
    assert isinstance(build_model("rerank", f"{ref}?scores=logit"), HttpReranker)
    assert ref_status(ref) == {"path": None, "ready": True, "size": 0}
    # an OpenAI key goes to the openai: base URL only, never to some other server
    assert parse_ref(ref).api_key is None
    monkeypatch.setenv("QMDLAB_OPENAI_BASE_URL", stub.base)
    served = build_model("embed", "openai:text-embedding-3-small")
    served.embed_query("hello")
    path, body, headers = stub.requests[-1]
    assert path == "/v1/embeddings" and body["model"] == "text-embedding-3-small"
    assert headers["Authorization"] == "Bearer sk-test"
    for bad in ("ftp://h/v1#m", "http://h:1/v1?x=1#m", f"{ref}?scores=maybe"):
        with pytest.raises(ConfigError):
            parse_ref(bad)


def test_qmd_model_variables_are_read_when_qmdlab_ones_are_unset(stub):
    env = {"QMD_EMBED_MODEL": f"{stub.base}#e", "QMD_GENERATE_MODEL": f"{stub.base}#g", "QMD_RERANK_MODEL": "/q.gguf"}
    _, refs = resolve_refs("fake", None, config={}, environ={**env, "QMDLAB_RERANK_MODEL": "fake:overlap"})
    assert refs == {"embed": f"{stub.base}#e", "expand": f"{stub.base}#g", "rerank": "fake:overlap"}
    # an explicit argument still wins over both names
    assert resolve_refs("fake", {"embed": "none"}, config={}, environ=env)[1]["embed"] is None


def test_fingerprints_pin_url_and_model_and_never_the_key(stub, monkeypatch):
    monkeypatch.setenv("QMDLAB_MODEL_API_KEY", "secret-key")
    a = HttpEmbedder(f"{stub.base}#minilm", chunking={})
    assert "secret-key" not in a.fingerprint + a.model_id
    others = [
        HttpEmbedder(f"{stub.base}#other", chunking={}),
        HttpEmbedder(f"{stub.base.replace('127.0.0.1', 'localhost')}#minilm", chunking={}),
        HttpEmbedder(f"{stub.base}#minilm", chunking={"size": 1}),
        HttpEmbedder(f"{stub.base}#minilm?template=gemma", chunking={}),
        build_model("embed", "pkg:all-minilm-l6-v2", chunking={}),
    ]
    assert len({a.fingerprint, *(o.fingerprint for o in others)}) == 6
    r1, r2 = HttpReranker(f"{stub.base}#r"), HttpReranker(f"{stub.base}#r?scores=logit")
    assert r1.fingerprint != r2.fingerprint


# --- the protocol ---------------------------------------------------------------------------------


def test_embedder_sends_templated_text_and_normalises(stub):
    emb = HttpEmbedder(f"{stub.base}#embeddinggemma", chunking={})
    assert emb.dim == 3  # read from a probe answer
    mat = emb.embed_documents([("Git", "rebase"), ("", "x")])
    texts = stub.requests[-1][1]["input"]
    assert texts == ["title: Git | text: rebase", "title: none | text: x"]
    np.testing.assert_allclose(np.linalg.norm(mat, axis=1), 1.0, rtol=1e-6)
    assert emb.embed_query("q").shape == (3,) and stub.requests[-1][1]["input"] == ["task: search result | query: q"]


def test_expander_sends_the_local_prompt_turns_and_parses_as_the_local_one(stub):
    text = "<think>\nthe user wants git</think>\nlex: git rebase\nvec: how to rebase\nnoise\nhyde: Rebase repla"
    stub.chat = lambda messages: (text, "length")
    exp = HttpExpander(f"{stub.base}#qwen2.5-coder", sampling=SamplingConfig(temperature=0.0, max_tokens=50, seed=3))
    res = exp.expand("git rebase", intent="undo")
    _, body, _ = stub.requests[-1]
    system, user = expand_turns("chatml", "git rebase", "undo")
    assert body["messages"] == [{"role": "system", "content": system}, {"role": "user", "content": user}]
    assert (body["model"], body["max_tokens"], body["temperature"], body["seed"]) == ("qwen2.5-coder", 50, 0.0, 3)
    expected = parse_generated(text.split("</think>\n", 1)[1], "length", 50)
    assert res == expected
    assert res.lines == [("lex", "git rebase"), ("vec", "how to rebase")]
    assert res.dropped == [("noise", "not a 'type: content' line"), ("hyde: Rebase repla", "cut off at max_tokens=50")]
    # the fine-tuned qwen3 family gets no system turn, exactly as its local prompt
    HttpExpander(f"{stub.base}#qmd-query-expansion-1.7B").expand("q")
    assert [m["role"] for m in stub.requests[-1][1]["messages"]] == ["user"]
    assert "repeat_penalty" not in body and "repeat_penalty" not in stub.requests[-1][1]  # off: not sent
    HttpExpander(f"{stub.base}#m", sampling=SamplingConfig(repeat_penalty=1.3)).expand("q")
    assert stub.requests[-1][1]["repeat_penalty"] == 1.3  # llama-server's extension of the body


def test_reranker_reads_both_answer_shapes_and_maps_logits_only_when_told(stub):
    rr = HttpReranker(f"{stub.base}#r", batch_size=2)
    stub.rerank = lambda q, docs: {
        "results": [{"index": i, "relevance_score": 0.1 * (i + 1)} for i in range(len(docs))][::-1]
    }
    assert rr.score("q", ["a", "b", "c"]) == pytest.approx([0.1, 0.2, 0.1])  # batches of two, reordered by index
    assert stub.requests[-1][1]["documents"] == stub.requests[-1][1]["texts"] == ["c"]
    stub.rerank = lambda q, docs: [{"index": i, "score": 0.75} for i in range(len(docs))]  # TEI's shape
    assert rr.score("q", ["a"]) == [0.75]
    stub.rerank = lambda q, docs: {"results": [{"index": 0, "relevance_score": 2.0}]}
    with pytest.raises(ModelError, match=r"outside \[0, 1\].*\?scores=logit"):
        rr.score("q", ["a"])
    assert HttpReranker(f"{stub.base}#r?scores=logit").score("q", ["a"]) == [pytest.approx(1 / (1 + np.exp(-2.0)))]
    stub.rerank = lambda q, docs: {"results": [{"index": 0, "relevance_score": 0.5}]}
    with pytest.raises(ModelError, match="one score for each of the 2 documents"):
        rr.score("q", ["a", "b"])


# --- failures ---------------------------------------------------------------------------------------


def test_5xx_and_429_are_retried_then_answered(stub):
    stub.script["/v1/embeddings"] = [("status", 500, "boom"), ("status", 429, "slow down", {"Retry-After": "0"})]
    emb = HttpEmbedder(f"{stub.base}#m", chunking={}, backoff=0.01)
    assert emb.embed_query("abc").shape == (3,)
    assert [p for p, _, _ in stub.requests] == ["/v1/embeddings"] * 3 and emb.endpoint.requests == 3


def test_retries_are_bounded_and_4xx_is_not_retried(stub):
    stub.script["/v1/rerank"] = [("status", 503, "down")] * 3
    rr = HttpReranker(f"{stub.base}#m", backoff=0.01)
    with pytest.raises(ModelError) as err:
        rr.score("q", ["a"])
    assert str(err.value) == (
        f"{stub.base}/rerank: HTTP 503 (down) after 3 tries; start the server or fix the rerank model "
        "reference (QMDLAB_RERANK_MODEL)"
    )
    stub.script["/v1/rerank"] = [("status", 404, '{"error": "model\\n not found"}')]
    n = len(stub.requests)
    with pytest.raises(ModelError, match=r"answered HTTP 404 \(\{\"error\": \"model\\n not found\"\}\)"):
        rr.score("q", ["a"])
    assert len(stub.requests) == n + 1


def test_vectors_must_name_each_text_once_and_scores_must_be_finite(stub):
    # two rows both claiming index 0: the vectors would be stored against the wrong chunks
    stub.script["/v1/embeddings"] = [
        ("raw", b'{"data": [{"index": 0, "embedding": [1, 0]}, {"index": 0, "embedding": [0, 1]}]}')
    ]
    emb = HttpEmbedder(f"{stub.base}#m", chunking={})
    with pytest.raises(ModelError, match=r"answered JSON without one embedding for each of the 2 texts"):
        emb.embed_documents([("", "a"), ("", "b")])
    # no index at all: the order of the texts
    stub.script["/v1/embeddings"] = [("raw", b'{"data": [{"embedding": [1, 0]}, {"embedding": [0, 1]}]}')]
    assert emb.embed_documents([("", "a"), ("", "b")]).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    stub.script["/v1/rerank"] = [("raw", b'{"results": [{"index": 0, "relevance_score": NaN}]}')]
    with pytest.raises(ModelError, match="answered JSON without finite relevance scores"):
        HttpReranker(f"{stub.base}#m?scores=logit").score("q", ["a"])


def test_bad_json_and_bad_shapes_are_one_line_errors(stub):
    stub.script["/v1/embeddings"] = [("raw", b"<html>\n<body>proxy error</body>\n</html>")]
    emb = HttpEmbedder(f"{stub.base}#m", chunking={})
    with pytest.raises(ModelError) as err:
        emb.embed_query("q")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{stub.base}/embeddings answered something that is not JSON")
    assert msg.endswith("point the embed model reference at an OpenAI-compatible server")
    stub.script["/v1/chat/completions"] = [("raw", b'{"choices": []}')]
    with pytest.raises(ModelError, match=r"answered JSON without choices\[0\]\.message\.content"):
        HttpExpander(f"{stub.base}#m").expand("q")


def test_nothing_listening_fails_after_bounded_retries():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emb = HttpEmbedder(f"http://127.0.0.1:{port}/v1#m", chunking={}, backoff=0.01)
    with pytest.raises(ModelError, match=r"cannot connect: .* after 3 tries; start the server"):
        emb.embed_query("q")
    assert emb.endpoint.requests == 3


def test_a_server_past_its_timeout_degrades_the_stage_with_a_note(stub):
    from qmdlab.pipeline.rerank import rerank_columns
    from qmdlab.pipeline.retrieve import Route, embed_route

    stub.script["/v1/rerank"] = [("hang",)]
    stub.script["/v1/embeddings"] = [("hang",)]
    rr = HttpReranker(f"{stub.base}#m", timeout=0.2)
    got = rerank_columns(rr, "q", {"docno": ["d"], "chunk_id": [1], "text": ["t"]}, qid="1", budget_s=30)
    assert not got.table["qid"]
    assert got.notes == [
        (
            "rerank",
            f"reranker failed (ModelError: {stub.base}/rerank did not answer within 0.2 s; raise "
            "QMDLAB_HTTP_TIMEOUT or check the server): fusion order kept",
        )
    ]
    assert rr.endpoint.requests == 1  # a timeout is not retried
    emb = HttpEmbedder(f"{stub.base}#m", chunking={}, dim=3, timeout=0.2)
    vec, note = embed_route(emb, Route("vec", "original", "q"), PipelineConfig())
    assert vec is None and note.startswith("query embedding failed (ModelError:") and "within 0.2 s" in note


def test_a_stage_budget_stops_the_backoff():
    from qmdlab.pipeline.budget import StageTimeout, call_with_budget

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rr = HttpReranker(f"http://127.0.0.1:{port}/v1#m", backoff=30.0)
    with pytest.raises(StageTimeout):
        call_with_budget(rr.score, "q", ["a"], budget_s=0.3, model=rr)
    from qmdlab.pipeline.budget import drain

    assert drain(5.0)  # the worker left its 30 s backoff when asked to stop
    assert rr.endpoint.requests == 1


# --- the bundled suite through a server serving the local models ---------------------------------------


@pytest.mark.slow
def test_served_models_score_the_bundled_suite_as_the_local_models_they_serve(stub, qmdlab_home, require):
    require(importlib.util.find_spec("llama_cpp") is not None, "llama-cpp-python is not installed")
    from qmdlab.models import packaged
    from qmdlab.models.registry import MINILM

    require(packaged.is_ready(MINILM[4:]), f"{MINILM} is not assembled; run `qmdlab pull --preset offline`")
    from qmdlab.eval import record
    from qmdlab.eval.study import Study
    from qmdlab.eval.suites import get_suite

    local_embed = build_model("embed", MINILM, n_threads=1, idle_timeout=None)
    local_rerank = fakes.TableReranker({}, default=fakes.term_overlap)

    def serve_embed(texts):
        # the server's raw vectors, computed as LlamaEmbedder computes them (one text per decode)
        with local_embed.llama.use() as llm:
            return [[float(x) for x in llm.embed([t], truncate=True)[0]] for t in texts]

    stub.embed = serve_embed
    stub.rerank = lambda q, docs: {
        "results": [{"index": i, "relevance_score": s} for i, s in enumerate(local_rerank.score(q, docs))]
    }
    suite = get_suite("default")
    config = PipelineConfig(expand=False, rerank=True)
    served = ModelSet(
        build_model("embed", f"{stub.base}#all-minilm-l6-v2"), None, build_model("rerank", f"{stub.base}#overlap")
    )
    scores = {}
    for name, models in (("local", ModelSet(local_embed, None, local_rerank)), ("served", served)):
        rec = record.record(suite, models, config, limit=40, log=lambda m: None)
        assert record.degraded_queries(rec.trace).height == 0
        assert (rec.trace.lists["source"] == "vec").sum() > 0 and rec.trace.rerank.height > 0
        scores[name] = Study.from_recording(rec).evaluate().metrics["ndcg@10"]
    local_embed.release()
    assert served.embedder.fingerprint != local_embed.fingerprint
    print(f"nDCG@10 over 40 queries of the bundled suite: {scores}")
    assert 0.3 < scores["local"] and abs(scores["served"] - scores["local"]) <= 1e-9, scores
    assert {p for p, _, _ in stub.requests} == {"/v1/embeddings", "/v1/rerank"}


# --- GPU offload of local GGUFs ---------------------------------------------------------------------------


def test_gpu_setting_reaches_llama_cpp(monkeypatch, tmp_path):
    from qmdlab.models._llama import LazyLlama, gpu_layers

    seen = []

    class FakeLlama:
        def __init__(self, model_path, **kw):
            seen.append(kw)

    fake = types.SimpleNamespace(Llama=FakeLlama, llama_supports_gpu_offload=lambda: True)
    monkeypatch.setitem(sys.modules, "llama_cpp", fake)
    cases = [({}, -1), ({"QMDLAB_GPU": "off"}, 0), ({"QMD_FORCE_CPU": "1"}, 0), ({"QMDLAB_GPU": "8"}, 8)]
    for env, layers in cases:
        for name in ("QMDLAB_GPU", "QMD_FORCE_CPU"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        lazy = LazyLlama(lambda: tmp_path / "m.gguf", n_threads=1, idle_timeout=None)
        lazy.ensure_loaded()
        assert seen[-1]["n_gpu_layers"] == layers == lazy.n_gpu_layers, env
    # a CPU-only build keeps auto on the CPU
    cpu = types.SimpleNamespace(llama_supports_gpu_offload=lambda: False)
    monkeypatch.delenv("QMD_FORCE_CPU", raising=False)
    monkeypatch.delenv("QMDLAB_GPU", raising=False)
    assert gpu_layers(cpu) == 0


def test_doctor_reports_the_backend_of_this_build(require, monkeypatch):
    require(importlib.util.find_spec("llama_cpp") is not None, "llama-cpp-python is not installed")
    from qmdlab.models._llama import import_llama_cpp

    llama_cpp = import_llama_cpp()  # loads llama.cpp's CPU backend (run-time dispatch)

    from qmdlab.doctor import backend_line, child_library

    monkeypatch.delenv("QMDLAB_GPU", raising=False)
    monkeypatch.delenv("QMD_FORCE_CPU", raising=False)
    got = child_library()
    offload = bool(llama_cpp.llama_supports_gpu_offload())
    assert got["gpu_offload"] is offload and got["gpu_setting"] == "auto"
    assert got["gpu_layers"] == (-1 if offload else 0)
    expected = "GPU offload, every layer" if offload else "CPU (this llama.cpp build cannot offload to a GPU"
    assert backend_line(got).startswith(expected)

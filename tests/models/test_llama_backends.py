"""The llama.cpp backends' own logic against a fake ``llama_cpp`` module (no weights):
lazy thread-safe loading, explicit threads, idle release, rerank prefix reuse and P(yes),
expander sampling arguments and truncation handling."""

import ctypes
import math
import sys
import threading
import time
import types

import pytest

from qmdlab.models._llama import LazyLlama
from qmdlab.models.expansion import GRAMMAR
from qmdlab.models.llama_expand import LlamaExpander, SamplingConfig
from qmdlab.models.llama_rerank import LlamaReranker
from qmdlab.models.templates import expand_prompt, rerank_prompt_parts

N_VOCAB = 64
WORDS = {"yes": [1], "no": [2], "Yes": [3], "No": [4], "good": [60], "bad": [61]}


class FakeLlama:
    instances: list = []
    load_delay = 0.0

    def __init__(self, model_path, **kw):
        time.sleep(self.load_delay)
        self.model_path, self.kw, self.closed = model_path, kw, False
        self.n_tokens = 0
        self.evals, self.tokenized, self.completions = [], [], []
        self._logits = (ctypes.c_float * N_VOCAB)()
        self._ctx = types.SimpleNamespace(get_logits=lambda: ctypes.cast(self._logits, ctypes.POINTER(ctypes.c_float)))
        FakeLlama.instances.append(self)

    def tokenize(self, b, add_bos=True, special=False):
        text = b.decode()
        self.tokenized.append((text, special))
        if text in WORDS:
            return list(WORDS[text])
        return [10 + (ord(c) % 40) for c in text] or [5]  # multi-token for anything else

    def n_vocab(self):
        return N_VOCAB

    def reset(self):
        self.n_tokens = 0

    def eval(self, tokens):
        self.evals.append((self.n_tokens, list(tokens)))
        self.n_tokens += len(tokens)
        for i in range(N_VOCAB):
            self._logits[i] = 0.0
        if tokens[0] == 60:  # "good" document: the yes group gets logit 2
            self._logits[1] = self._logits[3] = 2.0
        elif tokens[0] == 61:
            self._logits[2] = self._logits[4] = 2.0

    def create_completion(self, prompt, **kw):
        self.completions.append((prompt, kw))
        return {"choices": [{"text": "lex: a\nvec: b c\nhyde: cut o", "finish_reason": "length"}]}

    def close(self):
        self.closed = True


@pytest.fixture
def fake_llama_cpp(monkeypatch):
    FakeLlama.instances = []
    FakeLlama.load_delay = 0.0
    mod = types.ModuleType("llama_cpp")
    mod.Llama = FakeLlama
    mod.LlamaGrammar = types.SimpleNamespace(from_string=lambda text, verbose=True: ("grammar", text))
    monkeypatch.setitem(sys.modules, "llama_cpp", mod)
    return mod


def test_lazy_load_passes_threads_and_params(fake_llama_cpp, tmp_path):
    calls = []
    h = LazyLlama(lambda: calls.append(1) or tmp_path / "m.gguf", n_threads=2, idle_timeout=None, n_ctx=123)
    assert not h.loaded and calls == []
    with h.use() as llm:
        assert llm.kw["n_threads"] == 2 and llm.kw["n_threads_batch"] == 2 and llm.kw["n_ctx"] == 123
        assert llm.kw["verbose"] is False
    with h.use():
        pass
    assert calls == [1] and h.loads == 1 and h.load_seconds is not None
    h.release()
    assert not h.loaded and FakeLlama.instances[0].closed
    with h.use():
        pass
    assert h.loads == 2


def test_concurrent_first_use_loads_once(fake_llama_cpp, tmp_path):
    FakeLlama.load_delay = 0.05
    h = LazyLlama(lambda: tmp_path / "m.gguf", n_threads=1, idle_timeout=None)
    seen = []

    def work():
        with h.use() as llm:
            seen.append(id(llm))

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert h.loads == 1 and len(set(seen)) == 1 and len(seen) == 6


def test_idle_release(fake_llama_cpp, tmp_path):
    h = LazyLlama(lambda: tmp_path / "m.gguf", n_threads=1, idle_timeout=0.05)
    with h.use():
        pass
    deadline = time.monotonic() + 10
    while h.loaded and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not h.loaded and FakeLlama.instances[0].closed
    with h.use():
        pass
    assert h.loads == 2
    h.release()


def test_reranker_prefix_reuse_and_p_yes(fake_llama_cpp, tmp_path):
    r = LlamaReranker(lambda: tmp_path / "m.gguf", "generic-instruct.gguf", n_threads=1, idle_timeout=None)
    assert r.family == "chatml"
    scores = r.score("q", ["good", "bad", "neutral text"])
    e2 = math.exp(2)
    # yes group {yes, Yes} and no group {no, No}: (2e²)/(2e² + 2e⁰)
    assert scores == pytest.approx([e2 / (e2 + 1), 1 / (e2 + 1), 0.5], rel=1e-6)
    assert (r.yes_ids, r.no_ids) == ([1, 3], [2, 4])
    llm = FakeLlama.instances[0]
    prefix, suffix = rerank_prompt_parts("chatml", "q")
    head_len = len(llm.tokenize(prefix.encode(), special=True))
    assert [start for start, _ in llm.evals] == [0, head_len, head_len, head_len]  # query prefix evaluated once
    assert ("good", False) in llm.tokenized and (suffix, True) in llm.tokenized  # documents never parse specials
    assert r.score("q", []) == []


def test_qwen3_reranker_uses_exact_yes_no_tokens(fake_llama_cpp, tmp_path):
    r = LlamaReranker(lambda: tmp_path / "m.gguf", "qwen3-reranker-0.6b-q8_0.gguf", n_threads=1, idle_timeout=None)
    e2 = math.exp(2)
    assert r.score("q", ["good"]) == pytest.approx([e2 / (e2 + 1)], rel=1e-6)
    assert (r.yes_ids, r.no_ids) == ([1], [2])


def test_expander_sampling_grammar_and_cutoff(fake_llama_cpp, tmp_path):
    x = LlamaExpander(
        lambda: tmp_path / "m.gguf", "qmd-query-expansion-1.7B-q4_k_m.gguf", n_threads=1, idle_timeout=None
    )
    res = x.expand("git undo")
    assert res.lines == [("lex", "a"), ("vec", "b c")]
    assert res.dropped == [("hyde: cut o", "cut off at max_tokens=600")]
    llm = FakeLlama.instances[0]
    prompt, kw = llm.completions[0]
    assert prompt == llm.tokenize(expand_prompt("qwen3", "git undo").encode(), special=True)
    assert {k: kw[k] for k in ("max_tokens", "temperature", "top_k", "top_p")} == {
        "max_tokens": 600,
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.8,
    }
    assert kw["grammar"] == ("grammar", GRAMMAR)
    greedy = LlamaExpander(
        lambda: tmp_path / "m.gguf",
        "m.gguf",
        sampling=SamplingConfig(temperature=0.0, seed=7),
        n_threads=1,
        idle_timeout=None,
    )
    greedy.expand("q")
    _, kw = FakeLlama.instances[-1].completions[0]
    assert kw["temperature"] == 0.0 and kw["seed"] == 7
    assert kw["repeat_penalty"] == 1.0  # off by default, as qmd samples


def test_the_repeat_penalty_reaches_llama_cpp_and_the_fingerprint_only_when_on(fake_llama_cpp, tmp_path):
    def expander(sampling):
        return LlamaExpander(lambda: tmp_path / "m.gguf", "m.gguf", sampling=sampling, n_threads=1, idle_timeout=None)

    off, on = expander(SamplingConfig(temperature=0.0)), expander(SamplingConfig(temperature=0.0, repeat_penalty=1.3))
    on.expand("q")
    _, kw = FakeLlama.instances[-1].completions[0]
    assert kw["repeat_penalty"] == 1.3
    assert on.fingerprint != off.fingerprint  # its expansions are cached apart
    # off, the fingerprint is the one made before the field existed: earlier caches stay valid
    from dataclasses import asdict

    from qmdlab.models.base import make_fingerprint

    before = {k: v for k, v in asdict(SamplingConfig(temperature=0.0)).items() if k != "repeat_penalty"}
    assert off.fingerprint == make_fingerprint(
        "m.gguf", role="expand", family=off.family, sampling=before, grammar=off.grammar_text
    )

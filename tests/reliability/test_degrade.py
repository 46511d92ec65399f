"""Degrade, don't crash: each model stage fails open when its model raises mid-call, hangs, or
answers garbage.

Every model here loaded fine and answered a first query; then it raises in the middle of a call,
blocks (a hung llama.cpp call), or returns the wrong kind of answer (a NaN vector, no expansion
object, scores outside [0, 1]). The query must still return keyword/fusion results, the
trace must say what happened (``trace.notes``), a hang must cost no more than the stage's
time budget (``PipelineConfig.stage_budget_s``), and the result must equal the pipeline run
without that model. While a stopped call is still finishing the model is not called again
(``busy``); once it returns, the model is used again.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import polars as pl
import pytest

from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import KeywordEmbedder, RuleExpander, TableReranker, term_overlap
from qmdlab.pipeline import budget
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.lab import Lab

DOCS = {
    "git-rebase.md": "# Git rebase\n\nRebase replays each commit onto another branch.\n\nUse git rebase -i to squash.\n",
    "git-merge.md": "# Git merge\n\nMerge joins two branch tips with a merge commit.\n",
    "pasta.md": "# Cooking pasta\n\nBoil water, add salt, cook the pasta.\n",
    "sqlite.md": "# SQLite search\n\nFull text search with bm25 in sqlite.\n",
    "docker.md": "# Docker network\n\nContainers talk over a bridge network.\n",
}
VOCAB = ["git", "rebase", "merge", "branch", "commit", "pasta", "sqlite", "search", "docker", "network"]
RULES = {"git rebase": [("lex", "rebase squash"), ("vec", "rebase branch commit")]}
BUDGET_S = 0.4


class Faulty:
    """Wraps a working fake; once ``armed``, the next call of ``method`` raises mid-call or hangs."""

    def __init__(self, inner, method: str, mode: str):
        self._inner, self._method, self.mode = inner, method, mode
        self.model_id, self.fingerprint = inner.model_id, inner.fingerprint
        if hasattr(inner, "dim"):
            self.dim = inner.dim
        self.calls = 0
        self.armed = False
        self.release = threading.Event()
        self.entered = threading.Event()

    def __getattr__(self, name):
        real = getattr(self._inner, name)
        if name != self._method:
            return real

        def call(*args, **kwargs):
            self.calls += 1
            if self.armed:
                self.armed = False
                self.entered.set()
                if self.mode == "raises":
                    real(*args, **kwargs)  # the work starts, then the backend fails
                    raise RuntimeError("llama_decode returned -3")
                if self.mode == "garbage":  # an answer of the wrong kind
                    good = real(*args, **kwargs)
                    if self._method == "embed_query":
                        return np.full_like(good, np.nan)
                    if self._method == "expand":
                        return None
                    return [1.5] * len(good)  # not probabilities
                self.release.wait(60)  # a hung call: returns only when the test lets it
            return real(*args, **kwargs)

        return call


@pytest.fixture
def index(tmp_path):
    from qmdlab.store import Index

    src = tmp_path / "notes"
    src.mkdir()
    for name, text in DOCS.items():
        (src / name).write_text(text, encoding="utf-8")
    idx = Index(tmp_path / "index")
    idx.add_collection("notes", src)
    idx.update()
    emb = KeywordEmbedder(VOCAB)
    todo = idx.chunks_needing_vectors(emb.fingerprint)
    idx.store_vectors(
        todo["chunk_id"].to_list(),
        emb.embed_documents(list(zip(todo["title"].to_list(), todo["text"].to_list()))),
        emb.fingerprint,
    )
    yield idx
    idx.close()


def models():
    return KeywordEmbedder(VOCAB), RuleExpander(RULES), TableReranker({}, default=term_overlap)


ROLE = {"embedder": (0, "embed_query"), "expander": (1, "expand"), "reranker": (2, "score")}


def notes(trace, stage: str) -> str:
    return " | ".join(trace.notes.filter(pl.col("stage") == stage)["message"].to_list())


@pytest.mark.parametrize("mode", ["raises", "hangs", "garbage"])
@pytest.mark.parametrize("role", ["embedder", "expander", "reranker"])
def test_model_stage_fails_open(index, role, mode):
    slot, method = ROLE[role]
    stage = {"embedder": "retrieve", "expander": "expand", "reranker": "rerank"}[role]
    parts = list(models())
    faulty = Faulty(parts[slot], method, mode)
    parts[slot] = faulty
    cfg = PipelineConfig(stage_budget_s=BUDGET_S)
    lab = Lab(index, ModelSet(*parts), cfg)
    intent = "version control history"  # an intent: the expander always runs (no strong-signal skip)
    try:
        first = lab.query("git rebase", intent=intent, qid="ok")  # loaded and working
        assert first.final.height > 0 and faulty.calls > 0 and not notes(first, stage).count("failed")
        faulty.armed = True
        t0 = time.perf_counter()
        t = lab.query("git rebase squash commit", intent=intent, qid="bad")  # new text: no memo/cache hit
        took = time.perf_counter() - t0
        assert faulty.entered.is_set(), "the fault was never reached"
        # the same query without that model: what fail-open must give
        without = list(models())
        without[slot] = None
        want = Lab(index, ModelSet(*without), cfg).query("git rebase squash commit", intent=intent, qid="bad")
        assert t.final.equals(want.final) and t.final.height > 0
        why = {
            "hangs": "over its 0.4 s budget",
            "raises": "failed (RuntimeError: llama_decode returned -3)",
            "garbage": {
                "embedder": "failed (ValueError: embedder returned a vector",
                "expander": "failed (Attribute",
                "reranker": "failed (ValueError: reranker scores outside [0, 1]",
            }[role],
        }[mode]
        assert why in notes(t, stage), t.notes
        if role == "embedder":
            assert set(t.lists["source"]) == {"fts"} and "keyword results only" in notes(t, stage)
        elif role == "expander":
            assert t.expansions.height == 0 and set(t.lists["query_type"]) == {"original"}
            assert "original query only" in notes(t, stage)
        else:
            assert t.rerank.height == 0 and "fusion order kept" in notes(t, stage)
        if mode == "hangs":
            assert took < BUDGET_S + 2.0, f"a hung {role} held the query for {took:.1f} s"
            # still hung: the next query does not call into it again, and is not held up
            calls = faulty.calls
            t0 = time.perf_counter()
            again = lab.query("docker network", intent=intent, qid="busy")
            assert time.perf_counter() - t0 < 2.0 and faulty.calls == calls
            assert "still busy" in notes(again, stage), again.notes
            # once the stopped call returns, the model is used again
            faulty.release.set()
            deadline = time.time() + 10
            while budget.is_busy(faulty) and time.time() < deadline:
                time.sleep(0.01)
            assert not budget.is_busy(faulty)
            later = lab.query("git merge branch", intent=intent, qid="later")
            assert faulty.calls > calls and "busy" not in notes(later, stage) and "budget" not in notes(later, stage)
    finally:
        faulty.release.set()


def test_zero_budget_calls_in_the_callers_thread():
    seen = []
    assert budget.call_with_budget(lambda: seen.append(threading.current_thread()) or 7, budget_s=0) == 7
    assert seen == [threading.current_thread()]


def test_budget_reraises_the_models_own_exception_and_rejects_bad_config():
    def boom():
        raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        budget.call_with_budget(boom, budget_s=1.0)
    from qmdlab.errors import ConfigError

    with pytest.raises(ConfigError, match="stage_budget_s"):
        PipelineConfig(stage_budget_s=-1.0)


def test_concurrent_calls_within_budget_never_mark_the_model_busy():
    """Only a stopped call makes a model busy: two queries sharing a model at the same time
    (the MCP server's threads) both get their answer."""
    model, lock, errors, results = object(), threading.Lock(), [], []

    def slow(x):
        with lock:  # the model's own lock serialises the calls, as LazyLlama's does
            time.sleep(0.2)
        return x

    def call(x):
        try:
            results.append(budget.call_with_budget(slow, x, budget_s=5.0, model=model))
        except Exception as err:  # StageBusy here would be the bug
            errors.append(err)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and sorted(results) == [0, 1, 2] and not budget.is_busy(model)

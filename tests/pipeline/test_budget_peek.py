"""A cached model answer is returned in the caller's thread: a repeated query starts no worker
thread (each would cost more than the cache lookup), while a new query still runs under its budget."""

from __future__ import annotations

import threading

from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander, TableReranker, term_overlap
from qmdlab.pipeline import budget
from qmdlab.pipeline.lab import Lab
from tests.pipeline.conftest import build_index


class _CountingThread(threading.Thread):
    started: list[str] = []

    def start(self):
        _CountingThread.started.append(self.name)
        super().start()


def test_repeated_query_starts_no_model_thread_and_returns_the_same_trace(tmp_path, monkeypatch):
    idx, embedder = build_index(tmp_path)
    expander = RuleExpander(lambda q: [("lex", q + " branch"), ("vec", "about " + q), ("hyde", q + " explained")])
    lab = Lab(idx, ModelSet(embedder, expander, TableReranker({}, default=term_overlap)))
    monkeypatch.setattr(budget.threading, "Thread", _CountingThread)
    _CountingThread.started = []
    first = lab.query("git rebase", qid="a")
    n_first = len(_CountingThread.started)
    # expansion, the query embeddings of the original and the vec/hyde lines, the rerank call
    assert n_first >= 4, _CountingThread.started
    assert lab.expander.calls == 1 and lab.reranker.calls == 1
    again = lab.query("git rebase", qid="a")
    assert len(_CountingThread.started) == n_first  # every answer came from a cache, no thread
    assert lab.expander.calls == 1 and lab.reranker.calls == 1
    assert again.results.equals(first.results) and again.rerank["cached"].all()
    idx.close()


def test_peek_miss_falls_through_to_the_budgeted_call():
    calls = []
    out = budget.call_with_budget(lambda x: calls.append(x) or x * 2, 21, budget_s=5.0, peek=lambda x: None)
    assert out == 42 and calls == [21]

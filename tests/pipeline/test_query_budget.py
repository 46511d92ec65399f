"""``budget_s`` (``qmdlab query --budget``, MCP ``budget``): a deadline for the whole query. Model stages
that would not fit, judged from the model's measured speed, are skipped before they start and noted."""

from __future__ import annotations

import json
import threading
import time

import pytest
from click.testing import CliRunner

from qmdlab.errors import ConfigError
from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander, TableReranker, term_overlap
from qmdlab.pipeline import budget, speed
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.lab import Lab

PAIR_S = 0.1
HOLD_S = 30.0
"""The longest a held model call waits for the test to release it (a safety net, never reached)."""


class SlowReranker:
    """The overlap fake, ``PAIR_S`` seconds a pair (a model that takes real time)."""

    def __init__(self):
        self.inner_model = TableReranker({}, default=term_overlap)
        self.fingerprint = "test:slow-reranker"
        self.model_id = "test:slow-reranker"
        self.calls = 0

    def score(self, query, texts):
        self.calls += 1
        time.sleep(PAIR_S * len(texts))
        return self.inner_model.score(query, texts)


class HeldCall:
    """A model call that stays inside the model until the test releases it: ``started`` is set when
    the call begins, ``finished`` when it returns. A query that answers while ``finished`` is unset
    did not wait for the model, whatever the machine's speed."""

    def __init__(self):
        self.started, self.release, self.finished = threading.Event(), threading.Event(), threading.Event()
        self.calls = 0

    def hold(self):
        self.calls += 1
        self.started.set()
        try:
            self.release.wait(HOLD_S)
        finally:
            self.finished.set()

    def end(self):
        """Release the held call and wait until its worker thread has returned."""
        self.release.set()
        assert self.finished.wait(HOLD_S) and budget.drain(HOLD_S)


class HeldReranker(HeldCall):
    """The overlap fake, held inside :meth:`score` until released."""

    def __init__(self):
        super().__init__()
        self.inner_model = TableReranker({}, default=term_overlap)
        self.fingerprint = self.model_id = "test:held-reranker"

    def score(self, query, texts):
        self.hold()
        return self.inner_model.score(query, texts)


class HeldExpander(HeldCall, RuleExpander):
    """The rule fake, held inside :meth:`expand` until released (the first call only)."""

    def __init__(self):
        HeldCall.__init__(self)
        RuleExpander.__init__(self, {"git rebase": [("lex", "rebase branch")]})
        self.fingerprint = "test:held-expander"

    def expand(self, query, *, intent=None):
        if self.calls == 0:
            self.hold()
        else:
            self.calls += 1
        return super().expand(query, intent=intent)


@pytest.fixture(autouse=True)
def fresh_speeds(qmdlab_home):
    speed.reset()
    yield
    speed.reset()


def lab_for(idx, emb, expander=None, reranker=None, **cfg):
    # no index cache: every call reaches the model (the LLM cache would answer repeats for free)
    class NoCache:
        def __getattr__(self, name):
            return getattr(idx, name)

    view = NoCache()
    view.cache = None
    return Lab(view, ModelSet(emb, expander, reranker), PipelineConfig(**cfg))


def test_rerank_that_would_not_fit_is_skipped_before_it_starts(small_index):
    idx, emb = small_index
    rr = SlowReranker()
    lab = lab_for(idx, emb, reranker=rr, expand=False, candidate_limit=5, budget_s=10.0)
    first = lab.query("git rebase")  # not measured yet: runs (capped at what is left) and is measured
    assert first.rerank.height > 0 and rr.calls == 1
    per_pair = speed.estimate(rr, "rerank")
    assert per_pair == pytest.approx(PAIR_S, rel=0.6)
    # 5 pairs at ~0.1 s do not fit in 0.49 s: skipped before the model is called, and said so. The
    # budget sits just under 5 pairs so that 1 pair (third query) fits with ~0.39 s left for retrieval,
    # whatever the machine's load
    second = lab.query("git rebase", budget_s=0.49)
    assert rr.calls == 1 and second.rerank.height == 0
    (note,) = second.notes_for("budget")
    assert (
        note.startswith("rerank skipped before it started: 5 pairs at the measured ") and "of the 0.49 s budget" in note
    )
    assert "rerank skipped (--budget): fusion order kept" in second.notes_for("rerank")
    # -C still caps the pairs: 1 candidate fits where 5 did not
    third = lab.query("git rebase", budget_s=0.49, candidate_limit=1)
    assert rr.calls == 2 and third.rerank.height == 1 and not third.notes_for("budget")
    # the figures were kept for the next process
    saved = json.loads((speed._path()).read_text())
    assert saved["test:slow-reranker"]["rerank"][1] >= 6


def test_rerank_never_measured_is_cut_at_the_deadline(small_index):
    idx, emb = small_index
    rr = HeldReranker()
    lab = lab_for(idx, emb, reranker=rr, expand=False, candidate_limit=5, budget_s=0.1)
    try:
        trace = lab.query("git rebase")  # the model holds its call; the deadline stops waiting at 0.1 s
        assert rr.started.is_set() and not rr.finished.is_set()  # answered while the model was still busy
        assert trace.rerank.height == 0
        assert any(
            n.startswith("rerank cut at") and "of the 0.1 s budget (--budget)" in n for n in trace.notes_for("budget")
        )
        assert speed.estimate(rr, "rerank") is not None  # a lower bound, so the next query judges before it starts
    finally:
        rr.end()


def test_expansion_judged_and_cut_by_the_deadline(small_index):
    idx, emb = small_index
    ex = HeldExpander()
    lab = lab_for(idx, emb, expander=ex, rerank=False, strong_signal=False, budget_s=0.1)
    try:
        first = lab.query("git rebase")  # never measured: runs, cut at what is left of the 0.1 s deadline
        assert ex.started.is_set() and not ex.finished.is_set()  # answered while the model was still busy
        assert any("expansion cut at" in n and "of the 0.1 s budget (--budget)" in n for n in first.notes_for("budget"))
    finally:
        ex.end()  # the stopped call returns before the model is asked again
    # its lower bound (the time it ran before the cut) no longer fits a smaller budget, whatever the time
    # retrieval took before it: skipped before it starts
    second = lab.query("git rebase", budget_s=0.02)
    assert ex.calls == 1 and second.notes_for("budget")[0].startswith("expansion skipped before it started: 1 call")
    # without a deadline the same lab expands
    assert lab.query("git rebase", budget_s=0.0).expansions.height > 0 and ex.calls == 2


def test_no_budget_changes_nothing_and_bad_values_name_the_flag(small_index):
    idx, emb = small_index
    assert "budget_s" not in PipelineConfig().to_dict()  # trace-cache keys of older configs unchanged
    with pytest.raises(ConfigError, match=r"'budget_s' \(--budget\) must be a number of seconds >= 0"):
        PipelineConfig(budget_s=-1)
    from qmdlab.cli import cli

    res = CliRunner().invoke(cli, ["--index", str(idx.dir), "query", "git", "--preset", "fake", "--budget", "-2"])
    assert res.exit_code != 0 and "--budget" in res.output


def test_cli_and_mcp_take_the_budget(small_index, monkeypatch):
    from qmdlab.cli import cli
    from qmdlab.mcp_server.backend import McpBackend

    idx, emb = small_index
    rr = SlowReranker()
    speed.observe(rr, "rerank", 10.0, 1)  # measured: 10 s a pair
    monkeypatch.setattr("qmdlab.models.load_models", lambda *a, **k: ModelSet(emb, None, rr))
    res = CliRunner().invoke(
        cli, ["--index", str(idx.dir), "query", "git rebase", "--preset", "fake", "--budget", "1", "--trace-json"]
    )
    assert res.exit_code == 0, res.output
    notes = json.loads(res.stdout)["notes"]
    assert rr.calls == 0 and any(
        n["stage"] == "budget" and "of the 1 s budget (--budget)" in n["message"] for n in notes
    )
    backend = McpBackend(idx, models=ModelSet(emb, None, rr))
    _, data = backend.query("git rebase", limit=3, budget=1.0)
    assert rr.calls == 0 and any(
        n["stage"] == "budget" and "rerank skipped before it started" in n["message"] for n in data["notes"]
    )

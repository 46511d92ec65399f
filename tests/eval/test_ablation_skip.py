"""The strong-signal skip's ablation row: it drops exactly the strong queries' expansion lists."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.eval.ablation import ORIGINAL, ablate, strong_signal_qids, variants
from qmdlab.eval.study import Study
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.trace import SCHEMAS

pytestmark = pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx

SKIP_OFF = "strong signal (top 0.900, gap 0.400) but the skip is off (strong_signal: false): expanding"


def _study(make_trace, config):
    # q1: the relevant r1 is BM25 #2, but the lex expansion list has it #1 (expansion helps q1);
    # q2: r2 is BM25 #1 and the hyde list pushes the distractor z (expansion hurts q2).
    e = [
        ("q1", "fts", "original", "c/x", 1, 0.9),
        ("q1", "fts", "original", "c/r1", 2, 0.5),
        ("q1", "fts", "lex", "c/r1", 1, 0.8),
        ("q1", "fts", "lex", "c/q", 2, 0.7),
        ("q2", "fts", "original", "c/r2", 1, 0.9),
        ("q2", "fts", "original", "c/z", 2, 0.5),
        ("q2", "vec", "hyde", "c/z", 1, 0.8),
        ("q2", "vec", "vec", "c/z", 1, 0.8),
    ]
    trace = make_trace(e)
    notes = pl.DataFrame(
        {
            "qid": ["q1", "q2"],
            "stage": ["probe", "probe"],
            "message": ["no strong signal (top 0.900, gap 0.100): expanding", SKIP_OFF],
        },
        schema=SCHEMAS["notes"],
    )
    trace = type(trace)(**{n: getattr(trace, n) for n in ("queries", "lists", "rerank")}, notes=notes)
    qrels = pl.DataFrame({"qid": ["q1", "q2"], "docno": ["c/r1", "c/r2"], "grade": [1, 1]})
    return Study(trace, qrels, metrics=["mrr@10"], config=config)


def test_skip_row_cuts_only_the_strong_queries_expansions(trace_factory):
    study = _study(trace_factory, PipelineConfig(strong_signal=False, rerank=False))
    assert strong_signal_qids(study.trace.notes) == ["q2"]
    table = ablate(study, baseline="bm25", metric="mrr@10")
    row = {r["config"]: r for r in table.iter_rows(named=True)}
    assert "strong-signal skip" in row
    # closed form: q1 keeps its lex list (qmd_rrf: r1 2/62+1/61+0.05 beats x 2/61+0.05 → MRR 1);
    # q2 keeps only BM25 (r2 #1 → 1). Without the skip q2's hyde+vec lists put z first
    # (z: 2/62+1/61+1/61+0.05 > r2: 2/61+0.05 → r2 at #2, MRR 1/2).
    assert row["strong-signal skip"]["mrr@10"] == pytest.approx(1.0)
    assert row["+lex+vec+hyde"]["mrr@10"] == pytest.approx((1 + 1 / 2) / 2)
    cut = study.evaluate(study.config, lists=ORIGINAL | (pl.col("qid") != "q2")).metrics["mrr@10"]
    assert row["strong-signal skip"]["mrr@10"] == cut


def test_no_skip_row_when_recorded_with_the_skip_on_or_without_expansion(trace_factory):
    study = _study(trace_factory, PipelineConfig(rerank=False))  # skip on: nothing left to cut
    assert "strong-signal skip" not in ablate(study, baseline="bm25", metric="mrr@10")["config"].to_list()
    names = [v.name for v in variants(PipelineConfig(), has_expansion=False, skip_qids=["q1"])]
    assert "strong-signal skip" not in names
    names = [v.name for v in variants(PipelineConfig(), skip_qids=[])]
    assert "strong-signal skip" in names

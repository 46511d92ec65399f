"""The expansion knobs in the tuner's space (``expand_types``, ``expand_gate``, its threshold): string
choices next to the numeric knobs, and a study where the gate is what the tuner must find."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from qmdlab.eval.optimise import (
    EXPAND_TYPE_CHOICES,
    EXPANSION_SPACE,
    Param,
    apply_params,
    default_space,
    params_of,
    search,
)
from qmdlab.eval.study import Study
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.trace import Trace


def test_the_expansion_knobs_are_in_the_default_space_when_expansion_is_on():
    names = [p.name for p in default_space(PipelineConfig())]
    assert {"expand_types", "expand_gate", "expand_gate_min_overlap"} <= set(names)
    assert names.index("expand_gate") < names.index("expand_gate_min_overlap")  # the gate before its threshold
    learned = [p.name for p in default_space(PipelineConfig(fusion="learned", learned_model="m.txt"))]
    assert "expand_types" in learned and "expand_gate" not in learned  # the gate needs a formula fusion
    off = [p.name for p in default_space(PipelineConfig(expand=False))]
    assert not {"expand_types", "expand_gate"} & set(off)
    # every expand_types choice is a valid value in its one spelling
    assert [PipelineConfig(expand_types=c).expand_types for c in EXPAND_TYPE_CHOICES] == list(EXPAND_TYPE_CHOICES)


def test_choice_knobs_round_trip_and_sample():
    cfg = PipelineConfig(expand_gate="overlap", expand_types="lex")
    params = params_of(cfg, EXPANSION_SPACE)
    assert params == {"expand_types": "lex", "expand_gate": "overlap", "expand_gate_min_overlap": 0.3}
    assert apply_params(PipelineConfig(), params) == cfg
    p = Param.choice("expand_gate", ("off", "overlap"))
    rng = np.random.default_rng(0)
    assert {p.sample(rng) for _ in range(20)} == {"off", "overlap"}


def _study() -> Study:
    """Ten queries: the original lists rank the answer ``r`` first; six expansion lists agree on an
    off-topic ``x`` that their weight puts above it (the expansions drifted)."""
    rows = []
    for i in range(10):
        qid = f"q{i}"
        lists = [("fts", "original", ["r", "d"]), ("vec", "original", ["r", "d"])]
        lists += [("fts", "lex", ["x", "y"])] * 3 + [("vec", "vec", ["x", "y"])] * 3
        for list_id, (source, query_type, docs) in enumerate(lists):
            for rank, d in enumerate(docs, 1):
                rows.append(
                    {
                        "qid": qid,
                        "list_id": list_id,
                        "source": source,
                        "query_type": query_type,
                        "subquery": f"s{list_id}",
                        "docno": f"c/{qid}/{d}.md",
                        "chunk_id": rank,
                        "rank": rank,
                        "backend_score": 1.0 / rank,
                        "score": 1.0 / rank,
                        "weight": PipelineConfig().list_weight(source, query_type),
                    }
                )
    qrels = pl.DataFrame({"qid": [f"q{i}" for i in range(10)], "docno": [f"c/q{i}/r.md" for i in range(10)]})
    return Study(
        Trace(lists=pl.DataFrame(rows)), qrels.with_columns(grade=pl.lit(1)), config=PipelineConfig(rerank=False)
    )


@pytest.mark.parametrize("method", ["coordinate", "random"])
def test_the_tuner_finds_the_gate_or_fewer_expansion_types(method):
    study = _study()
    base = study.config
    space = (Param.choice("expand_gate", ("off", "overlap")), Param.choice("expand_types", EXPAND_TYPE_CHOICES))
    start = params_of(base, space)
    before = study.score(base, "mrr@10")
    assert before == pytest.approx(1 / 3)  # x and y (in six expansion lists each) above r
    res = search(lambda p: study.score(apply_params(base, p), "mrr@10"), space, start, method=method, trials=20)
    assert res.value == 1.0
    tuned = apply_params(base, res.params)
    assert tuned.expand_gate == "overlap" or tuned.expand_types != base.expand_types
    # the gate alone restores the original ranking: every query gated, as with expand: false
    gated = base.replace(expand_gate="overlap")
    assert study.final(gated).equals(study.final(base.replace(expand=False)))
    assert set(study.retuned(gated).notes_for("fuse")) == {
        "expansion gated: overlap 0.00 < 0.30 (the expansion lists' top 10 hold 0 of the original lists' top 2): "
        "original lists only"
    }

"""LexicalStudy: lexical knobs evaluated on recorded traces by re-running BM25."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.eval.lexical import LEXICAL_SPACE, LexicalStudy
from qmdlab.eval.optimise import cross_validate, default_space
from qmdlab.eval.study import Study
from qmdlab.models.base import ModelSet
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.lab import Lab

pytestmark = pytest.mark.slow  # real SQLite searches and pipeline runs (several seconds)

QUERIES = {
    "1": "git rebase branch",
    "2": "pasta salt water",
    "3": "sqlite search bm25",
    "4": "docker network bridge",
    "5": "merge commit branch",
    "6": "cook pasta",
}
QRELS = [
    ("1", "notes/git-rebase.md", 1),
    ("2", "notes/pasta.md", 1),
    ("3", "notes/sqlite.md", 1),
    ("4", "notes/docker.md", 1),
    ("5", "notes/git-merge.md", 1),
    ("6", "notes/pasta.md", 1),
]


@pytest.fixture
def small_index(tmp_path):
    from tests.pipeline.conftest import build_index

    idx, embedder = build_index(tmp_path)
    yield idx, embedder
    idx.close()


def _study(idx, emb, config):
    lab = Lab(idx, ModelSet(emb, None, None), config)
    from qmdlab.pipeline.trace import Trace

    trace = Trace.concat([lab.query(t, qid=q) for q, t in QUERIES.items()])
    qrels = pl.DataFrame(QRELS, schema={"qid": pl.Utf8, "docno": pl.Utf8, "grade": pl.Int64}, orient="row")
    return Study(trace, qrels, config=config)


def test_lexical_study_equals_a_fresh_recording(small_index):
    idx, emb = small_index
    base = PipelineConfig(expand=False, rerank=False)
    lex = LexicalStudy(_study(idx, emb, base), idx)
    for knobs in (
        dict(bm25_weight_title=0.0, bm25_weight_filepath=0.0),
        dict(bm25_prefix=False, bm25_query_tf=False),
        dict(bm25_mode="msm", bm25_min_match=2),
    ):
        cfg = base.replace(**knobs)
        fresh = _study(idx, emb, cfg)
        assert (
            lex.evaluate(cfg)
            .final.select("qid", "docno", "final_rank")
            .equals(fresh.evaluate(cfg).final.select("qid", "docno", "final_rank"))
        )
    assert lex.for_config(base) is lex.study  # the recorded knobs: no re-run
    sub = lex.subset(["1", "2"])
    cfg = base.replace(bm25_weight_title=0.5)
    assert sub.evaluate(cfg).per_query["qid"].to_list() == ["1", "2"]
    assert sub.for_config(cfg) is sub.for_config(cfg)


def test_cross_validation_tunes_lexical_knobs(small_index):
    idx, emb = small_index
    base = PipelineConfig(expand=False, rerank=False)
    lex = LexicalStudy(_study(idx, emb, base), idx)
    report = cross_validate(lex, base=base, space=default_space(base)[:1] + LEXICAL_SPACE, trials=12, folds=2)
    assert report.held_out.height == len(QUERIES)
    assert {p.name for p in LEXICAL_SPACE} <= set(PipelineConfig.field_names())

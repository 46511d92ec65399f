"""qmdlab.eval.record on a held-out subset: ``qids`` records exactly those queries, an unknown qid is an error."""

from __future__ import annotations

import pytest

from qmdlab.eval import record
from qmdlab.models import load_models
from qmdlab.pipeline.config import PipelineConfig
from tests.eval.conftest import pets_suite


@pytest.fixture
def suite(tmp_path):
    return pets_suite(tmp_path, {"4": "dogs"}, [("4", "2")])


CONFIG = PipelineConfig(expand=False, rerank=False)


def test_judged_queries_of_a_subset(suite):
    assert record.judged_queries(suite, qids=["3", "1"])["qid"].to_list() == ["1", "3"]
    assert record.judged_queries(suite, 1, qids=["4", "2"])["qid"].to_list() == ["2"]
    assert record.judged_queries(suite, qids=[])["qid"].to_list() == []
    assert record.judged_queries(suite)["qid"].to_list() == ["1", "2", "3", "4"]


def test_record_qids_records_exactly_those_queries_and_shares_the_cache(suite, qmdlab_home):
    models = load_models("fake")
    rec = record.record(suite, models, CONFIG, qids=["4", "2"], log=lambda m: None)
    assert sorted(rec.trace.queries["qid"].to_list()) == ["2", "4"]
    assert set(rec.trace.final["qid"].to_list()) == {"2", "4"}
    assert rec.timings["queries"] == 2 and rec.timings["queries_cached"] == 0
    # traces are cached per query: the full recording runs only the two others
    full = record.record(suite, models, CONFIG, log=lambda m: None)
    assert full.timings["queries"] == 4 and full.timings["queries_cached"] == 2
    sub = full.trace.final.filter(full.trace.final["qid"].is_in(["2", "4"])).sort("qid", "final_rank")
    assert sub.equals(rec.trace.final.sort("qid", "final_rank"))


def test_record_refuses_an_unknown_qid_naming_it(suite, qmdlab_home):
    with pytest.raises(ValueError, match=r"suite 'user-data' has no judged queries \['99'\].*split file"):
        record.record(suite, load_models("fake"), CONFIG, qids=["1", "99"], log=lambda m: None)
    with pytest.raises(ValueError, match=r"\['9'\]"):
        record.judged_queries(suite, qids=[9, 1])  # an int qid is compared as text: 1 is judged, 9 is not

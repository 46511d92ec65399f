"""The trace cache is keyed on the recorded options only: a config that differs in fusion, candidates,
blend or finish loads the recorded traces and re-runs those stages, and comes out as a fresh run would."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.eval import record
from qmdlab.eval.study import Study
from qmdlab.models import fakes, load_models
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.retune import retune
from tests.eval.conftest import pets_suite

QUIET = {"log": lambda m: None}
# one candidate reranked when recorded; the retuned config promotes three more, fuses and blends otherwise
RECORDED = PipelineConfig(candidate_limit=1)
RETUNED = PipelineConfig(candidate_limit=4, fusion="rrf", rrf_k=5, weight_original_vec=0.5, blend="score")


@pytest.fixture
def suite(tmp_path):
    return pets_suite(tmp_path)


def _home(monkeypatch, tmp_path, name: str) -> None:
    monkeypatch.setenv("QMDLAB_HOME", str(tmp_path / name))
    monkeypatch.delenv("QMDLAB_INDEX", raising=False)


def _no_query_model(monkeypatch) -> None:
    """Expansion and query embedding are what a recording holds: a retune must not call them."""
    monkeypatch.setattr(fakes.RuleExpander, "expand", lambda *a, **k: pytest.fail("expander called"))
    monkeypatch.setattr(fakes.KeywordEmbedder, "embed_query", lambda *a, **k: pytest.fail("embedder called"))


def test_unrecorded_options_reuse_the_recording_and_match_a_fresh_run(suite, tmp_path, monkeypatch):
    assert RECORDED.recorded_dict() == RETUNED.recorded_dict() and RECORDED.to_dict() != RETUNED.to_dict()
    _home(monkeypatch, tmp_path, "fresh")
    fresh = record.record(suite, load_models("fake"), RETUNED, **QUIET)

    _home(monkeypatch, tmp_path, "cached")
    first = record.record(suite, load_models("fake"), RECORDED, **QUIET)
    assert first.trace.rerank.group_by("qid").len()["len"].max() == 1
    prints = record.model_fingerprints(load_models("fake"))
    assert len(record._measured_seconds(suite, prints)[2]) == 3  # rerank seconds per document, per query
    with monkeypatch.context() as m:
        _no_query_model(m)
        again = record.record(suite, load_models("fake"), RETUNED, **QUIET)

    assert again.cache_dir == first.cache_dir
    # the retuned traces hold more rerank rows than their recorded rerank time scored: not a speed sample
    assert record._measured_seconds(suite, prints)[2] == []
    assert again.timings["queries_cached"] == again.timings["queries"] == 3
    assert again.trace.config == fresh.trace.config == record.depth_config(RETUNED).to_dict()
    # the newly promoted candidates were reranked, and every table a metric or a reader uses is the fresh run's
    assert again.trace.final.equals(fresh.trace.final)
    assert again.trace.fused.sort("qid", "fused_rank").equals(fresh.trace.fused.sort("qid", "fused_rank"))
    cols = ["qid", "docno", "docid", "title", "final_rank", "line", "context", "snippet"]
    assert again.trace.results.select(cols).equals(fresh.trace.results.select(cols))
    assert again.trace.results["snippet"].null_count() == 0
    assert Study.from_recording(again).evaluate().metrics == Study.from_recording(fresh).evaluate().metrics
    assert Study.from_recording(first).evaluate().metrics != Study.from_recording(fresh).evaluate().metrics

    # the retuned traces are what the cache now holds: opened without models, they are the same
    (listed,) = record.recorded(suite)
    assert listed.config == record.depth_config(RETUNED)
    assert record.load_recorded(suite, listed.key).trace.final.equals(fresh.trace.final)


def test_a_recorded_option_is_another_recording(suite, qmdlab_home):
    models = load_models("fake")
    first = record.record(suite, models, RECORDED, **QUIET)
    for option in ({"bm25_mode": "and"}, {"list_limit": 5}, {"expand": False}, {"strong_signal": False}):
        other = record.record(suite, models, RECORDED.replace(**option), **QUIET)
        assert other.cache_dir != first.cache_dir, option
        assert other.timings["queries_cached"] == 0, option


def test_a_subset_recorded_under_other_options_opens_under_the_listed_config(suite, qmdlab_home):
    models = load_models("fake")
    first = record.record(suite, models, RECORDED, **QUIET)
    record.record(suite, models, RETUNED, qids=["1"], **QUIET)
    (listed,) = record.recorded(suite)
    assert listed.config == record.depth_config(RETUNED) and listed.qids == ["1", "2", "3"]
    loaded = record.load_recorded(suite, listed.key)
    # query 2 was recorded only under RECORDED: it is re-run under RETUNED from its lists, without models
    expected = retune(first.trace.for_qid("2"), listed.config)
    assert loaded.trace.final.filter(pl.col("qid") == "2").equals(expected.final)


def test_a_recording_keyed_on_every_option_is_adopted(suite, qmdlab_home):
    models = load_models("fake")
    first = record.record(suite, models, RECORDED, **QUIET)
    prints = record.model_fingerprints(models) + record.index_fingerprints(first.config, first.lab.index)
    whole = first.cache_dir.with_name(record._key(suite, first.config, prints, every_option=True))
    assert whole != first.cache_dir
    first.cache_dir.rename(whole)  # as the cache held it when every option was part of the key
    assert [r.key for r in record.recorded(suite)] == [whole.name] and record.outdated(suite) == 0

    again = record.record(suite, models, RECORDED, **QUIET)
    assert again.cache_dir == first.cache_dir and not whole.exists()
    assert again.timings["queries_cached"] == again.timings["queries"]
    assert again.trace.final.equals(first.trace.final)

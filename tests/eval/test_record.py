"""qmdlab.eval.record: one door, one cache, one depth; what is recorded is listed and opened without models."""

from __future__ import annotations

import shutil

import polars as pl
import pytest

from qmdlab.eval import choices, record
from qmdlab.eval.study import Study
from qmdlab.models import load_models
from qmdlab.pipeline.config import PipelineConfig
from tests.eval.conftest import pets_suite


@pytest.fixture
def suite(tmp_path):
    return pets_suite(tmp_path)


def test_record_lists_loads_without_models_and_counts_only_real_work(suite, qmdlab_home, monkeypatch):
    models = load_models("fake")
    seen = []
    rec = record.record(
        suite, models, PipelineConfig(), limit=2, name="smoke", on_progress=seen.append, log=lambda m: None
    )
    assert rec.config.limit == record.EVAL_DEPTH  # one depth for every front end
    assert rec.timings["queries"] == 2 and rec.timings["queries_cached"] == 0
    assert [p.phase for p in seen] == ["index", "query", "query", "query", "done"]
    assert [(p.done, p.total) for p in seen if p.phase == "query"] == [(0, 2), (1, 2), (2, 2)]
    (listed,) = record.recorded(suite)
    assert listed.key == rec.cache_dir.name and listed.name == "smoke" and listed.qids == ["1", "2"]
    # a second run reads the cache: no query is reported as work, the estimate says so
    again = []
    record.record(suite, models, PipelineConfig(), limit=2, on_progress=again.append, log=lambda m: None)
    assert [(p.phase, p.total) for p in again if p.phase == "query"] == [("query", 0)]
    assert record.estimate(suite, models, PipelineConfig(), limit=2).to_run == 0
    assert record.estimate(suite, models, PipelineConfig()).to_run == 1
    # opened from disk with no model: the same traces, the same study numbers
    from qmdlab.models import fakes

    monkeypatch.setattr(fakes.KeywordEmbedder, "embed_query", lambda *a, **k: pytest.fail("model called"))
    loaded = record.load_recorded(suite, listed.key)
    assert loaded.trace == rec.trace and loaded.qrels.equals(rec.qrels)
    assert Study.from_recording(loaded).evaluate().metrics == Study.from_recording(rec).evaluate().metrics


def test_recordings_of_other_code_are_counted_not_listed(suite, qmdlab_home):
    rec = record.record(
        suite, load_models("fake"), PipelineConfig(expand=False, rerank=False), limit=1, log=lambda m: None
    )
    assert record.outdated(suite) == 0
    shutil.move(rec.cache_dir, rec.cache_dir.with_name("0" * 16))  # as if the config options had changed
    assert record.recorded(suite) == [] and record.outdated(suite) == 1


def test_study_for_suite_is_the_same_door(suite, qmdlab_home):
    models = load_models("fake")
    study = Study.for_suite(suite, models, PipelineConfig(), limit=3, progress=False, log=lambda m: None)
    rec = record.record(suite, models, PipelineConfig(), limit=3, log=lambda m: None)
    assert study.trace == rec.trace and study.config == rec.config
    assert set(study.qrels["qid"].to_list()) == {"1", "2", "3"}
    assert study.evaluate().per_query.filter(pl.col("qid") == "1")["recall@100"][0] == 1.0


def test_tiers_share_keys_with_the_demo_configs(suite):
    names = [t.name for t in choices.tiers(suite)]
    assert names[0].startswith("retrieval") and len(names) == 3
    assert choices.tiers(suite)[0].config == PipelineConfig(expand=False, rerank=False)
    assert choices.tiers(suite)[1].config == PipelineConfig(candidate_limit=choices.DEMO_CANDIDATES)

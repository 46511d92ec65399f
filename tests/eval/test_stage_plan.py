"""``qmdlab eval`` and ``qmdlab tune`` plan their stages by the rule of every front end
(:func:`qmdlab.pipeline.stages.plan_stages`): on the offline preset they run no LLM stage unless a
flag or the config asks, say the plan on their first stderr line, and the rows without an LLM
stage score exactly as when they were cut from a recording with every stage; a run estimated long
is warned about before it starts."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.eval import record
from qmdlab.eval.runfiles import file_safe
from qmdlab.eval.runner import run_suite
from qmdlab.models import load_models
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.stages import model_roles, plan_stages
from tests.eval.conftest import pets_suite

FAKES = {
    "QMDLAB_EMBED_MODEL": "fake:keyword",
    "QMDLAB_EXPAND_MODEL": "fake:rules",
    "QMDLAB_RERANK_MODEL": "fake:overlap",
}
OFFLINE = (
    "stages: bm25+vector+fusion; expansion off (offline preset default; --expand turns it on), "
    "rerank off (offline preset default; --rerank turns it on)"
)


@pytest.fixture
def suite(tmp_path):
    return pets_suite(tmp_path)


@pytest.fixture
def offline_on_fakes(monkeypatch):
    """The offline preset's stage defaults with the fake models standing in for its weights."""
    for k, v in FAKES.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("QMDLAB_PRESET", raising=False)


def _eval(suite, *args):
    argv = ["eval", str(suite.path), "--format", "smart", "--no-progress", *args]
    return CliRunner().invoke(cli, argv)


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_offline_eval_runs_no_llm_stage_and_says_so_first(suite, qmdlab_home, offline_on_fakes):
    res = _eval(suite, "--preset", "offline", "--ablate")
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == OFFLINE
    (listed,) = record.recorded(suite)
    assert (listed.config.expand, listed.config.rerank) == (False, False)
    assert listed.models[1:3] == ["none", "none"]  # the switched-off stages' models were not loaded
    assert "qmdlab-no-expand-no-rerank " in res.stdout


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_eval_flags_and_config_turn_a_stage_on(suite, qmdlab_home, offline_on_fakes, tmp_path):
    res = _eval(suite, "--preset", "offline", "--expand", "--limit", "1")
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0].startswith("stages: expansion+bm25+vector+fusion; expansion on (--expand), ")
    conf = tmp_path / "rerank.yaml"
    conf.write_text("rerank: true\n")
    res = _eval(suite, "--preset", "offline", "--config", str(conf), "--limit", "1")
    assert res.exit_code == 0, res.output
    assert "rerank on (config; --no-rerank turns it off)" in res.stderr.splitlines()[0]
    configs = {(r.config.expand, r.config.rerank) for r in record.recorded(suite)}
    assert configs == {(True, False), (False, True)}


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_tune_plans_as_eval(suite, qmdlab_home, offline_on_fakes, tmp_path):
    out = tmp_path / "tuned.yaml"
    argv = ["tune", str(suite.path), "--format", "smart", "--preset", "offline", "--folds", "2", "--trials", "2"]
    res = CliRunner().invoke(cli, [*argv, "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == OFFLINE
    (listed,) = record.recorded(suite)
    assert (listed.config.expand, listed.config.rerank) == (False, False)


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_eval_role_override_is_applied(suite, qmdlab_home, offline_on_fakes):
    res = _eval(suite, "--preset", "fake", "--rerank-model", "none", "--limit", "1")
    assert res.exit_code == 0, res.output
    (listed,) = record.recorded(suite)
    assert listed.config.rerank and listed.models[2] == "none"  # stage on by the fake preset, its model off


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_rows_without_llm_stages_score_as_cut_from_the_full_recording(qmdlab_home, tmp_path):
    from qmdlab.eval.suites import get_suite

    suite = get_suite("default")  # the bundled suite: the fake embedder finds vectors there
    kw = {"ablate": True, "progress": False, "log": lambda m: None, "check_ranx": False, "limit": 20}
    full = run_suite(suite, load_models("fake"), PipelineConfig(), out=tmp_path / "full", **kw)
    planned, _ = plan_stages(PipelineConfig(), "offline")
    lean = run_suite(suite, load_models("fake", **model_roles(planned)), planned, out=tmp_path / "lean", **kw)
    assert "+rerank" in full.metrics and "+rerank" not in lean.metrics  # the full one did run the LLM stages
    assert full.metrics["bm25+vector"] != full.metrics["bm25"] != full.metrics["vector"]  # rows that can differ
    for row in ("bm25", "vector", "bm25+vector"):
        assert lean.metrics[row] == full.metrics[row], row
        run_file = f"{file_safe(row)}.trec"
        assert (lean.out_dir / run_file).read_text() == (full.out_dir / run_file).read_text(), row
    saved = json.loads((lean.out_dir / "metrics.json").read_text())
    assert saved["bm25+vector"] == json.loads((full.out_dir / "metrics.json").read_text())["bm25+vector"]


def test_a_long_run_is_warned_about_before_it_starts(suite, qmdlab_home, monkeypatch):
    logged: list[str] = []
    models = load_models("fake")
    cfg = PipelineConfig(expand=False, candidate_limit=20)
    # earlier recordings timed 300 s a query and 1 s a reranked document: 3 queries x (300 + 20) s
    monkeypatch.setattr(record, "_measured_seconds", lambda suite, prints: ([300.0], [], [1.0]))
    record.record(suite, models, cfg, log=logged.append)
    (warning,) = [m for m in logged if m.startswith("warning: a long run")]
    assert "3 of 3 queries to run (0 cached), about 16 min" in warning
    assert "--limit N" in warning and "--no-rerank" in warning and "than 20 (candidate_limit)" in warning
    assert "--no-expand" not in warning  # expansion is off already
    logged.clear()
    record.record(suite, models, cfg, log=logged.append)  # all cached now: nothing to warn about
    assert not [m for m in logged if m.startswith("warning")]
    monkeypatch.setattr(record, "_measured_seconds", lambda suite, prints: ([1.0], [], [0.01]))
    record.record(suite, models, cfg.replace(rrf_k=30), log=logged.append)  # 3 x 1.2 s: no warning
    assert not [m for m in logged if m.startswith("warning")]


def test_study_for_suite_plans_the_default_models_stages(suite, qmdlab_home, offline_on_fakes):
    from qmdlab.eval.study import Study

    study = Study.for_suite(suite, limit=1, progress=False, log=lambda m: None)
    assert (study.config.expand, study.config.rerank) == (False, False)
    (listed,) = record.recorded(suite)
    assert listed.models[1:3] == ["none", "none"]

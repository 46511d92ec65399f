"""qmdlab.eval.runner + CLI end to end with the deterministic fake models (no weights, no network)."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest
from click.testing import CliRunner

from qmdlab.eval.runner import run_suite
from qmdlab.eval.study import Study
from qmdlab.eval.suites import Suite, SuiteUnavailable, get_suite
from qmdlab.models import load_models
from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander
from qmdlab.pipeline.config import PipelineConfig
from tests.eval.conftest import pets_suite


def _models():
    fake = load_models("fake")
    expander = RuleExpander(lambda q: [("lex", q + " notes"), ("vec", "about " + q), ("hyde", q + " explained")])
    return ModelSet(fake.embedder, expander, fake.reranker)


def _smart_suite(tmp_path):
    return pets_suite(tmp_path)


@pytest.mark.slow  # indexes a corpus and runs the pipeline: seconds on 2 cores
def test_smart_suite_end_to_end_uses_collection_ids(tmp_path, qmdlab_home):
    suite = _smart_suite(tmp_path)
    before = sorted(p.name for p in suite.path.iterdir())
    res = run_suite(suite, _models(), PipelineConfig(), out=tmp_path / "out", progress=False, log=lambda m: None)
    assert sorted(p.name for p in suite.path.iterdir()) == before  # nothing written into the user's data
    assert (qmdlab_home / "eval" / suite.collection / "corpus" / "10.md").read_text().startswith("# Fish")
    trec = (tmp_path / "out" / "qmdlab.trec").read_text().splitlines()
    assert trec and all(line.split()[2] in {"1", "2", "3", "10"} for line in trec)
    # the saved files score the same with ranx as the runner's own metrics
    from ranx import Qrels, Run, evaluate

    qrels = Qrels.from_file(str(tmp_path / "out" / "qrels.txt"), kind="trec")
    run = Run.from_file(str(tmp_path / "out" / "qmdlab.trec"), kind="trec")
    theirs = evaluate(qrels, run, ["ndcg@10", "mrr@10", "recall@10", "precision@5"], make_comparable=True)
    ours = json.loads((tmp_path / "out" / "metrics.json").read_text())["qmdlab"]
    assert ours["ndcg@10"] == pytest.approx(theirs["ndcg@10"], abs=1e-12)
    assert ours["mrr@10"] == pytest.approx(theirs["mrr@10"], abs=1e-12)
    assert ours["recall@10"] == pytest.approx(theirs["recall@10"], abs=1e-12)
    assert ours["p@5"] == pytest.approx(theirs["precision@5"], abs=1e-12)
    assert res.metrics["qmdlab"]["recall@10"] == 1.0  # four documents: everything is retrieved


@pytest.mark.slow  # indexes a corpus and runs the pipeline: seconds on 2 cores
def test_default_corpus_eval_ablation_resume_and_study(default_corpus, qmdlab_home, tmp_path):
    if not default_corpus.is_dir():
        pytest.skip(f"default corpus not present at {default_corpus}")
    suite, models = get_suite("default"), _models()
    res = run_suite(
        suite, models, PipelineConfig(), out=tmp_path / "out", ablate=True, limit=12, progress=False, log=lambda m: None
    )
    assert res.timings["queries"] == 12 and res.timings["queries_cached"] == 0
    names = res.ablation["config"].to_list()
    assert names[:7] == ["bm25", "vector", "bm25+vector", "+lex", "+lex+vec", "+lex+vec+hyde", "+rerank"]
    row = {r["config"]: r for r in res.ablation.iter_rows(named=True)}
    assert row["+rerank"]["ndcg@10"] == pytest.approx(res.metrics["qmdlab"]["ndcg@10"], abs=1e-12)
    for name in ("bm25", "vector", "plus_lex_plus_vec_plus_hyde", "fusion=rrf", "blend=score"):
        assert (tmp_path / "out" / f"{name}.trec").exists()
    line = (tmp_path / "out" / "qmdlab.trec").read_text().splitlines()[0].split()
    assert line[1] == "Q0" and (default_corpus / line[2]).is_file()  # docno = path relative to data/corpus
    # resumable: the second run reads every trace from the cache; a lost one is recomputed
    cache = json.loads((tmp_path / "out" / "run.json").read_text())["trace_cache"]
    shutil.rmtree(f"{cache}/q003")
    again = run_suite(
        suite, models, PipelineConfig(), out=tmp_path / "out2", limit=12, progress=False, log=lambda m: None
    )
    assert again.timings["queries_cached"] == 11
    assert again.metrics["qmdlab"] == res.metrics["qmdlab"]
    # the saved run directory is a Study whose default evaluation reproduces the run
    study = Study.from_run_dir(tmp_path / "out2")
    assert study.evaluate().metrics == pytest.approx(res.metrics["qmdlab"], abs=1e-12)


@pytest.mark.slow  # indexes a corpus and runs the pipeline: seconds on 2 cores
def test_cli_eval_and_tune(default_corpus, qmdlab_home, tmp_path, monkeypatch):
    if not default_corpus.is_dir():
        pytest.skip(f"default corpus not present at {default_corpus}")
    from qmdlab.cli import cli

    runner = CliRunner()
    out = runner.invoke(
        cli,
        [
            "eval",
            "default",
            "--preset",
            "fake",
            "--limit",
            "8",
            "--no-progress",
            "--out",
            str(tmp_path / "o"),
            "--no-expand",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "ndcg@10" in out.output and (tmp_path / "o" / "qmdlab-no-expand.trec").exists()
    cfg = tmp_path / "tuned.yaml"
    out = runner.invoke(
        cli,
        [
            "tune",
            "default",
            "--preset",
            "fake",
            "--no-progress",
            "--folds",
            "2",
            "--trials",
            "6",
            "--no-expand",
            "--out",
            str(cfg),
        ],
    )
    assert out.exit_code == 0, out.output
    assert "held-out gain" in out.output
    PipelineConfig.from_yaml(cfg)  # what `qmdlab query --config` reads
    bad = runner.invoke(cli, ["eval", "nosuchsuite"])
    assert bad.exit_code == 1 and "unknown suite" in bad.output


def test_unavailable_cisi_suite_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("QMDLAB_CISI_DIR", str(tmp_path / "absent"))
    suite = get_suite("cisi")
    with pytest.raises(SuiteUnavailable, match="QMDLAB_CISI_DIR"):
        suite.check()


def test_suite_docno_docid_roundtrip(tmp_path):
    d = tmp_path / "b"
    d.mkdir()
    (d / "docs.jsonl").write_text('{"id": "a/b c", "text": "x"}\n{"id": ".hidden", "text": "y"}\n')
    (d / "queries.jsonl").write_text('{"qid": "1", "query": "x", "qrels": {"a/b c": 1}}\n')
    s = Suite("b", d, "jsonl")
    for docid in ("a/b c", ".hidden"):
        assert s.docid(s.docno(docid)) == docid
    assert s.docno(".hidden") == "b/%2Ehidden.md"


@pytest.mark.slow
def test_cisi_bm25_only_run(cisi_dir, qmdlab_home, tmp_path, monkeypatch):
    """All 76 judged CISI queries, BM25 only (no models): a sanity band around the published
    FTS5 OR-query figure (0.371 nDCG@10 measured with simple tools)."""
    monkeypatch.setenv("QMDLAB_CISI_DIR", str(cisi_dir))
    suite = get_suite("cisi")
    cfg = PipelineConfig(expand=False, vector=False, rerank=False)
    res = run_suite(suite, None, cfg, out=tmp_path / "cisi", progress=False, log=lambda m: None)
    assert res.timings["queries"] == 76
    ndcg = res.metrics[res.name]["ndcg@10"]
    assert 0.25 < ndcg < 0.5, ndcg
    trec = (tmp_path / "cisi" / f"{res.name}.trec").read_text().splitlines()
    assert {line.split()[0] for line in trec} <= set(suite.data().qrels["qid"].to_list())
    assert all(line.split()[2].isdigit() for line in trec)


def test_degraded_traces_are_reported_and_not_cached(tmp_path, monkeypatch):
    from qmdlab.eval.record import _no_query_budget, query_traces
    from qmdlab.pipeline.trace import SCHEMAS, Trace

    class Lab:
        calls = 0
        config = PipelineConfig()

        def query(self, text, intent=None, qid="q"):
            Lab.calls += 1
            budget = __import__("os").environ.get("QMDLAB_QUERY_BUDGET_MS")
            msg = "reranker failed (boom): fusion order kept" if qid == "bad" else f"ran with limit {budget}"
            notes = pl.DataFrame({"qid": [qid], "stage": ["rerank"], "message": [msg]}, schema=SCHEMAS["notes"])
            return Trace(notes=notes, config=self.config.to_dict())

    suite = Suite("s", tmp_path, "jsonl")
    queries = pl.DataFrame({"qid": ["ok", "bad"], "query": ["a", "b"], "intent": [None, None]})
    monkeypatch.delenv("QMDLAB_QUERY_BUDGET_MS", raising=False)
    trace, cached = query_traces(suite, Lab(), queries, tmp_path / "cache", progress=False)
    assert cached == 0 and "ran with limit 1e15" in trace.notes["message"].to_list()  # budget lifted while running
    assert "QMDLAB_QUERY_BUDGET_MS" not in __import__("os").environ
    trace, cached = query_traces(suite, Lab(), queries, tmp_path / "cache", progress=False)
    assert cached == 1 and Lab.calls == 3  # the degraded query ran again, the good one came from the cache
    monkeypatch.setenv("QMDLAB_QUERY_BUDGET_MS", "500")
    with _no_query_budget():
        assert __import__("os").environ["QMDLAB_QUERY_BUDGET_MS"] == "500"  # a user's own budget is kept

"""``chunker=<c>`` ablation rows: one suite index and one recording per chunker (fake models)."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.eval.ablation import chunker_evaluations
from qmdlab.eval.record import cache_key, index_dir, record
from qmdlab.eval.runner import run_suite
from qmdlab.eval.study import Study
from qmdlab.eval.suites import get_suite
from qmdlab.models import load_models
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.store import Index


@pytest.mark.slow  # indexes the bundled corpus three times and runs 5 queries each: seconds on 2 cores
def test_chunker_rows_have_their_own_index_cache_key_and_paired_scores(default_corpus, qmdlab_home, tmp_path):
    if not default_corpus.is_dir():
        pytest.skip(f"default corpus not present at {default_corpus}")
    suite, models = get_suite("default"), load_models("fake", expand="none", rerank="none")
    cfg = PipelineConfig(expand=False, rerank=False)
    res = run_suite(
        suite,
        models,
        cfg,
        out=tmp_path / "out",
        ablate=True,
        limit=5,
        progress=False,
        log=lambda m: None,
        chunkers=("breakpoints", "headings", "fences-and-tables"),
        baseline="chunker=breakpoints",
        check_ranx=False,
    )  # ranx: test_runner's business
    table = res.ablation
    rows = {r["config"]: r for r in table.iter_rows(named=True)}
    assert {"chunker=breakpoints", "chunker=headings", "chunker=fences-and-tables"} <= set(rows)
    # the default chunker's row is the main recording itself
    assert rows["chunker=breakpoints"]["ndcg@10"] == pytest.approx(res.metrics[res.name]["ndcg@10"])
    assert rows["chunker=breakpoints"]["delta"] == 0 and table["baseline"][0] == "chunker=breakpoints"
    # each chunker row is its own recording, scored on the same 5 queries (W/T/L add up)
    for name in ("chunker=headings", "chunker=fences-and-tables"):
        r = rows[name]
        assert r["wins"] + r["ties"] + r["losses"] == 5
    # one index per chunker, chunked as named; the default one keeps its old path
    assert Index.open(index_dir(suite)).chunker == "breakpoints"
    heads = Index.open(index_dir(suite, "headings"))
    assert heads.chunker == "headings" and heads.dir.name == "index-headings"
    assert heads.status()["chunks"] > Index.open(index_dir(suite)).status()["chunks"]
    # the default config's cache key does not name the chunker; another chunker's does
    assert "chunker" not in cfg.to_dict()
    assert cache_key(suite, cfg, models) == cache_key(suite, cfg.replace(chunker=""), models)
    assert cache_key(suite, cfg, models) != cache_key(suite, cfg.replace(chunker="headings"), models)
    # the headings row equals a direct recording under chunker: headings (from its cache now)
    rec = record(suite, models, cfg.replace(chunker="headings"), limit=5, progress=False, log=lambda m: None)
    assert rec.timings["queries_cached"] == 5
    direct = Study.from_recording(rec).evaluate(rec.config).metrics["ndcg@10"]
    assert rows["chunker=headings"]["ndcg@10"] == pytest.approx(direct)
    saved = pl.read_parquet(tmp_path / "out" / "per_query.parquet")
    assert saved.filter(pl.col("run") == "chunker=headings").height == 5
    with pytest.raises(Exception, match="--chunkers 'words'"):
        chunker_evaluations(Study.from_recording(rec), suite, models, ["words"])

"""End to end with the real offline models (pip-packaged GGUFs via llama.cpp) on the default corpus."""

from __future__ import annotations

import polars as pl
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def offline_models(require):
    """The offline preset; a missing prerequisite skips locally and fails under CI /
    QMDLAB_REQUIRE_ALL=1 (tests/conftest.py)."""
    require.module("llama_cpp", "llama-cpp-python is not installed (pip install 'qmdlab[llama]')")
    from qmdlab.models import load_models, packaged
    from qmdlab.models.registry import MINILM, QWEN_CODER

    missing = [ref for ref in (MINILM, QWEN_CODER) if not packaged.is_ready(ref.split(":", 1)[1])]
    require(not missing, f"offline models not pulled ({', '.join(missing)}); run `qmdlab pull --preset offline`")
    from qmdlab.models.llama_expand import SamplingConfig

    # greedy and short: the smoke test checks the plumbing, not the expander's quality
    return load_models("offline", n_threads=2, sampling=SamplingConfig(temperature=0.0, max_tokens=80))


def test_offline_pipeline_on_default_corpus(tmp_path, default_corpus, offline_models, monkeypatch):
    from qmdlab.pipeline.lab import Lab
    from qmdlab.store import Index

    if not default_corpus.is_dir():
        pytest.skip(f"default corpus not present at {default_corpus}")
    idx = Index(tmp_path / "index")
    try:
        idx.add_collection("default", default_corpus)
        idx.update()
        emb = offline_models.embedder
        todo = idx.chunks_needing_vectors(emb.fingerprint)
        for start in range(0, todo.height, 64):
            part = todo.slice(start, 64)
            idx.store_vectors(
                part["chunk_id"].to_list(),
                emb.embed_documents(list(zip(part["title"].to_list(), part["text"].to_list()))),
                emb.fingerprint,
            )
        lab = Lab(idx, offline_models)
        # on a busy CPU the expander alone may pass the 30 s query budget, which skips rerank
        monkeypatch.setenv("QMDLAB_QUERY_BUDGET_MS", "3600000")
        # a small candidate set keeps the CPU rerank short; intent forces the expander to run
        t = lab.query("TP-2002", intent="meaning of the appointment conflict error code", candidate_limit=3)
        print(
            "\n"
            + "\n".join(
                f"{r['type']}: {r['text']!r} kept={r['kept']} ({r['reason_dropped']})"
                for r in t.expansions.iter_rows(named=True)
            )
        )
        assert t.expansions.height > 0  # the expander ran; every line is recorded
        assert t.expansions.filter(~pl.col("kept"))["reason_dropped"].null_count() == 0
        kept = t.expansions.filter(pl.col("kept"))
        assert kept.height >= 1, "every expansion line was dropped: the expander did not contribute"
        # kept lines ran as their own lists (lex in BM25, vec/hyde in vector search; a list with no
        # hit leaves no rows), and at least one of them retrieved something
        expanded = set(t.lists.filter(pl.col("query_type") != "original").select("query_type", "subquery").rows())
        assert expanded and expanded <= set(kept.select("type", "text").rows())
        assert set(t.lists["source"]) == {"fts", "vec"}
        assert t.rerank.height == 3 and t.rerank["rerank_score"].is_between(0.0, 1.0).all()
        assert "default/reference/api-error-codes.md" in t.final["docno"].head(3).to_list()
        assert t.results["snippet"].str.len_chars().min() > 0
        again = lab.query("TP-2002", intent="meaning of the appointment conflict error code", candidate_limit=3)
        assert again.rerank["cached"].all() and again.final.equals(t.final)
    finally:
        idx.close()

"""A recording on an index whose expansions column holds generated queries is keyed by them:
another generator (or another filter's verdicts) is another recording, never a stale cache hit."""

from __future__ import annotations

from qmdlab.eval.record import prepare_index, record
from qmdlab.models.doc_query_gen import TableDocQueryGenerator
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.doc_expand import expand_documents

from .test_frontier import loader, zoo


def _expand(suite, fn, name) -> None:
    idx = prepare_index(suite, loader().embedder, progress=False, log=lambda m: None)
    try:
        expand_documents(idx, TableDocQueryGenerator(fn, name), per_chunk=1, filter=False)
    finally:
        idx.close()


def test_another_generator_is_another_recording(tmp_path, qmdlab_home):
    suite = zoo(tmp_path)
    models = loader(expand="none", rerank="none")
    weighted = PipelineConfig(expand=False, rerank=False, bm25_weight_doc_queries=1.0)
    plain = PipelineConfig(expand=False, rerank=False)
    quiet = dict(log=lambda m: None)

    _expand(suite, lambda p, i: " " + " ".join(p.split()[:2]), "fake:first-words")
    first = record(suite, models, weighted, **quiet)
    plain_first = record(suite, models, plain, **quiet)
    _expand(suite, lambda p, i: " " + " ".join(p.split()[-2:]), "fake:last-words")
    second = record(suite, models, weighted, **quiet)
    plain_second = record(suite, models, plain, **quiet)

    assert first.cache_dir != second.cache_dir
    assert second.timings["queries_cached"] == 0  # recomputed under the new column, not read back
    # unweighted, the column still lengthens documents in BM25's normalisation: another recording too
    assert plain_first.cache_dir != plain_second.cache_dir
    assert plain_second.timings["queries_cached"] == 0


def test_an_index_without_expansions_keeps_its_key(tmp_path, qmdlab_home):
    suite = zoo(tmp_path)
    models = loader(expand="none", rerank="none")
    plain = PipelineConfig(expand=False, rerank=False)
    before = record(suite, models, plain, log=lambda m: None)
    again = record(suite, models, plain, log=lambda m: None)
    assert before.cache_dir == again.cache_dir and again.timings["queries_cached"] == again.timings["queries"]

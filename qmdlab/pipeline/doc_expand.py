"""Document expansion at index time (doc2query): generate queries per chunk, keep those that find
their source again, and write them into the documents' BM25 ``expansions`` column.

:func:`expand_documents` is what ``qmdlab expand-docs`` runs:

1. **Generate** — every chunk of the active documents in scope that has fewer than ``per_chunk``
   samples of the generator gets the rest (:func:`qmdlab.models.doc2query.prompt` of the chunk
   text), stored per batch (:mod:`qmdlab.store.doc_expansions`): an interrupted run keeps what it
   stored, and running again generates only what is missing (resumable).
2. **Filter** (Promptagator's round-trip consistency, Doc2Query−−'s point that unfiltered
   expansions hurt): each usable query is searched with the engine's BM25 over the same
   collections *without* the doc-queries column (the weights of filepath, title and body only:
   the column is left out of the match) and kept iff a document holding the chunk ranks within the
   top ``top_k``. The best such rank is stored with the verdict. ``filter=False`` keeps every
   usable query. Only samples not judged yet are searched (``refilter`` judges all again).
3. **Write** — the generator becomes the index's active one, and every document's expansions
   column is set to its chunks' kept queries (:func:`qmdlab.store.doc_expansions.write_doc_expansions`).

Generated text goes to the BM25 column only, never to the embedder: vectors are unchanged.
Searches weigh the column with ``bm25_weight_doc_queries`` (default 0: not used).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

from qmdlab.models import doc2query
from qmdlab.models.doc_query_gen import DocQueryGenerator, parse_all
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.search.lexical import bm25_search
from qmdlab.store import doc_expansions as store

DEFAULT_PER_CHUNK = 5
DEFAULT_TOP_K = 20
#: Chunks per generator call and per stored transaction.
BATCH_CHUNKS = 8


class ExpandReport(NamedTuple):
    """What a run did: ``chunks`` generated for this run, ``generated`` samples (``usable`` of them
    queries), the round-trip filter's ``kept`` and ``dropped`` over the samples it judged now,
    ``documents`` whose doc-queries column changed, and the ``seconds`` it took."""

    generator: str
    chunks: int
    generated: int
    usable: int
    kept: int
    dropped: int
    documents: int
    seconds: float

    def summary(self) -> str:
        return (
            f"{self.chunks} chunks, {self.generated} generated ({self.usable} usable), "
            f"{self.kept} kept, {self.dropped} dropped, {self.documents} documents rewritten, "
            f"{self.seconds:.1f} s ({self.generator})"
        )


def round_trip(
    idx,
    query: str,
    sources: set[str],
    *,
    top_k: int,
    collections: Iterable[str] | None = None,
    config: PipelineConfig | None = None,
) -> int | None:
    """The best rank (1-based) of a document in ``sources`` among the top ``top_k`` BM25 hits of
    ``query`` without the doc-queries column; ``None`` when none of them is there."""
    lex = (config or PipelineConfig()).lexical()
    lex["weights"] = tuple(lex["weights"][:3])  # the doc-queries column never judges itself
    hits = bm25_search(idx, query, limit=top_k, collections=collections, **lex)
    return next((h.rank for h in hits if h.docno in sources), None)


def expand_documents(
    idx,
    generator: DocQueryGenerator,
    *,
    per_chunk: int = DEFAULT_PER_CHUNK,
    top_k: int = DEFAULT_TOP_K,
    collections: Iterable[str] | None = None,
    max_chunks: int | None = None,
    filter: bool = True,
    refilter: bool = False,
    config: PipelineConfig | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> ExpandReport:
    """Generate, filter and write document expansions (see the module docstring).

    Parameters
    ----------
    idx : qmdlab.store.Index
    generator : DocQueryGenerator
        Its ``fingerprint`` keys the stored samples and names the active generator.
    per_chunk : int
        Samples a chunk should have (those stored count).
    top_k : int
        The round-trip filter's depth.
    collections : iterable of str, optional
        Only chunks of these collections, and the filter searches them (default: the collections an
        unscoped search searches).
    max_chunks : int, optional
        Generate for at most this many chunks in this run (a quick try; run again for the rest).
    filter : bool
        ``False``: keep every usable query (no round trip).
    refilter : bool
        Judge every stored sample again (after the collection changed), not only new ones.
    config : PipelineConfig, optional
        The BM25 knobs of the round trip (mode, stopwords, column weights of filepath/title/body).
    on_progress : callable, optional
        ``on_progress(done, total)`` in chunks, after each stored batch.
    """
    if per_chunk < 1:
        raise ValueError(f"per_chunk must be at least 1, got {per_chunk}")
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    t0 = time.perf_counter()
    colls = list(collections) if collections is not None else None
    fp = generator.fingerprint
    store.ensure_table(idx)
    todo = store.chunks_to_expand(idx, fp, per_chunk, collections=colls)
    if max_chunks is not None:
        todo = todo[: max(0, int(max_chunks))]
    generated = usable = 0
    done = 0
    # chunks needing the same number of samples go to the generator together
    by_need: dict[int, list[store.ChunkToExpand]] = {}
    for ch in todo:
        by_need.setdefault(per_chunk - ch.have, []).append(ch)
    for need, chunks in by_need.items():
        for a in range(0, len(chunks), BATCH_CHUNKS):
            batch = chunks[a : a + BATCH_CHUNKS]
            raws = generator.generate([doc2query.prompt(ch.text) for ch in batch], need)
            if len(raws) != len(batch) or any(len(r) != need for r in raws):
                raise RuntimeError(
                    f"{generator.model_id}: generate() returned {len(raws)} lists for {len(batch)} prompts"
                )
            rows = []
            for ch, samples in zip(batch, raws):
                for i, (raw, query) in enumerate(zip(samples, parse_all(samples))):
                    rows.append(store.GeneratedQuery(ch.hash, ch.seq, ch.have + i, raw, query))
                    usable += query is not None
            store.store_generated(idx, fp, rows)
            generated += len(rows)
            done += len(batch)
            if on_progress is not None:
                on_progress(done, len(todo))
    kept = dropped = 0
    pending = store.queries_to_filter(idx, fp, collections=colls, refilter=refilter)
    if pending:
        sources = store.source_docnos(idx, colls)
        verdicts = []
        for q in pending:
            assert q.query is not None
            rank = round_trip(idx, q.query, sources.get(q.hash, set()), top_k=top_k, collections=colls, config=config)
            keep = rank is not None or not filter
            kept += keep
            dropped += not keep
            verdicts.append(store.FilterVerdict(q.hash, q.seq, q.n, keep, rank))
        store.store_verdicts(idx, fp, verdicts)
    if store.active_generator(idx) != fp:
        documents = store.set_active_generator(idx, fp)
    else:
        documents = store.write_doc_expansions(idx)
    return ExpandReport(fp, len(todo), generated, usable, kept, dropped, documents, time.perf_counter() - t0)


def clear_doc_expansions(idx) -> int:
    """No active generator: every document's doc-queries column emptied (the stored samples stay,
    so a later ``expand-docs`` with the same generator only writes them back). Returns how many
    documents changed."""
    store.ensure_table(idx)
    return store.set_active_generator(idx, None)


__all__ = [
    "ExpandReport",
    "expand_documents",
    "clear_doc_expansions",
    "round_trip",
    "DEFAULT_PER_CHUNK",
    "DEFAULT_TOP_K",
]

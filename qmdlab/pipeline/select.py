"""Chunk selection for rerank (docs/design.md, pipeline step 5).

Each candidate document is represented to the reranker by one chunk: the one with
the most query-term hits, plus ``intent_term_bonus`` per intent term; ties go to
the first chunk. A *hit* is a distinct query term occurring in the chunk
(case-insensitive substring, so CJK bigrams and word prefixes match). With
``df_filter`` (the keyword document-frequency filter), query terms present in more than
half of the candidate documents are ignored, except terms with df <= 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import polars as pl

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.expand import query_terms


def chunk_score(text: str, terms: Iterable[str], intent_terms: Iterable[str], intent_bonus: float) -> float:
    """``#query terms in text + intent_bonus · #intent terms in text`` (distinct terms).

    >>> chunk_score("Git rebase rewrites history", ["rebase", "merge"], ["history"], 0.5)
    1.5
    """
    low = text.lower()
    return float(sum(1 for t in terms if t in low)) + intent_bonus * sum(1 for t in intent_terms if t in low)


def df_filtered_terms(terms: Sequence[str], doc_texts: Sequence[str]) -> list[str]:
    """Drop terms found in more than half of ``doc_texts`` unless their df is <= 2.

    >>> df_filtered_terms(["git", "rebase"], ["git rebase", "git merge", "git log", "git tag"])
    ['rebase']
    >>> df_filtered_terms(["git"], ["git", "git", "x"])
    ['git']
    """
    lows = [t.lower() for t in doc_texts]
    n = len(lows)
    kept = []
    for t in terms:
        df = sum(1 for d in lows if t in d)
        if df <= 2 or df * 2 <= n:
            kept.append(t)
    return kept


def select_chunks(
    chunks: pl.DataFrame, docnos: Sequence[str], query: str, intent: str | None, config: PipelineConfig
) -> pl.DataFrame:
    """The best chunk of every candidate.

    Parameters
    ----------
    chunks : polars.DataFrame
        ``Index.chunks()`` rows (chunk_id, docno, seq, text, ...) of the candidates.
    docnos : sequence of str
        Candidates, in fused order; the output keeps that order.
    query, intent : str
    config : PipelineConfig

    Returns
    -------
    polars.DataFrame
        ``docno, chunk_id, text, hits`` — one row per candidate that has chunks.
    """
    return pl.DataFrame(select_chunk_columns(chunks, docnos, query, intent, config), schema=SELECTED)


SELECTED = {"docno": pl.String, "chunk_id": pl.Int64, "text": pl.String, "hits": pl.Float64}
"""Columns of :func:`select_chunks`' frame."""


def select_chunk_columns(
    chunks: pl.DataFrame, docnos: Sequence[str], query: str, intent: str | None, config: PipelineConfig
) -> dict[str, list]:
    """:func:`select_chunks` as plain columns ``{docno, chunk_id, text, hits: list}``."""
    terms = query_terms(query)
    intent_terms = [t for t in query_terms(intent)] if intent else []
    cids, docs, seqs, texts = (chunks.get_column(c).to_list() for c in ("chunk_id", "docno", "seq", "text"))
    if any(d is None for d in docs) or any(q is None for q in seqs):
        rows_in = chunks.sort(["docno", "seq"]).select("chunk_id", "docno", "text").rows()
    else:  # a Python sort of a few rows: polars' per-call cost would dominate (same order: by code point)
        rows_in = [(c, d, t) for d, _, c, t in sorted(zip(docs, seqs, cids, texts), key=lambda r: (r[0], r[1]))]
    by_doc: dict[str, list[tuple[int, str]]] = {}
    for cid, d, text in rows_in:
        by_doc.setdefault(d, []).append((cid, text))
    if config.df_filter and by_doc:
        docs_text = ["\n".join(t for _, t in by_doc[d]) for d in docnos if d in by_doc]
        terms = df_filtered_terms(terms, docs_text)
    rows: dict[str, list] = {"docno": [], "chunk_id": [], "text": [], "hits": []}
    for d in docnos:
        best = None
        for cid, text in by_doc.get(d, ()):
            s = chunk_score(text, terms, intent_terms, config.intent_term_bonus)
            if best is None or s > best[0]:  # strict: ties keep the first chunk
                best = (s, cid, text)
        if best is not None:
            rows["docno"].append(d)
            rows["chunk_id"].append(best[1])
            rows["text"].append(best[2])
            rows["hits"].append(best[0])
    return rows


__all__ = ["chunk_score", "df_filtered_terms", "select_chunks", "select_chunk_columns", "SELECTED"]

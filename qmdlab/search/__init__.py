"""Retrieval: lexical (FTS5 BM25) and exact vector search."""

from qmdlab.search.filters import SearchFilters
from qmdlab.search.hit import Hit, normalize_bm25
from qmdlab.search.lexical import bm25_search, build_fts_query

__all__ = ["Hit", "SearchFilters", "bm25_search", "build_fts_query", "normalize_bm25", "vector_search"]


def __getattr__(name: str):
    """``vector_search`` is imported on first use: it needs numpy, which ``qmdlab search`` does not."""
    if name == "vector_search":
        from qmdlab.search.vector import vector_search

        return vector_search
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Retrieval: lexical (FTS5 BM25) and exact vector search."""
from qmdlab.search.filters import SearchFilters
from qmdlab.search.hit import Hit, normalize_bm25
from qmdlab.search.lexical import bm25_search, build_fts_query
from qmdlab.search.vector import vector_search

__all__ = ["Hit", "SearchFilters", "bm25_search", "build_fts_query", "normalize_bm25", "vector_search"]

"""One retrieval hit."""

from __future__ import annotations

from typing import NamedTuple


class Hit(NamedTuple):
    """A ranked document from one retrieval backend.

    ``backend_score`` is the raw score (FTS5 ``bm25()``: negative, lower is better; or the
    cosine similarity); ``score`` is the normalised one (see :func:`normalize_bm25`, or the
    cosine similarity itself, ``1 - cosine distance``).
    """

    docno: str
    chunk_id: int | None
    rank: int
    backend_score: float
    score: float


def normalize_bm25(raw: float) -> float:
    """qmd's BM25 normalisation ``|bm25| / (1 + |bm25|)`` into ``[0, 1)``.

    >>> normalize_bm25(-3.0)
    0.75
    >>> normalize_bm25(0.0), normalize_bm25(-1.0)
    (0.0, 0.5)
    """
    a = abs(raw)
    return a / (1.0 + a)

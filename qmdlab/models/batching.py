"""Embedding batches under caps, and a time limit checked between them (``qmdlab embed``).

A batch is one model call and one transaction (:meth:`qmdlab.store.Index.store_vectors`), so an
``embed`` stopped between batches — by ``--timeout``, Ctrl-C or a crash — keeps every finished
batch, and the next run embeds only the chunks still missing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence


def plan_batches(
    docnos: Sequence[str],
    texts: Sequence[str],
    *,
    batch_size: int = 32,
    max_docs: int | None = None,
    max_bytes: int | None = None,
) -> list[tuple[int, int]]:
    """``(start, end)`` ranges over the chunks, in order: each holds at most ``batch_size``
    chunks, chunks of at most ``max_docs`` documents and at most ``max_bytes`` bytes of UTF-8
    text; a single chunk over ``max_bytes`` is a batch of its own.

    >>> plan_batches(["a", "a", "b", "c"], ["xx", "yy", "zz", "w"], batch_size=3)
    [(0, 3), (3, 4)]
    >>> plan_batches(["a", "a", "b", "c"], ["xx", "yy", "zz", "w"], batch_size=10, max_docs=2)
    [(0, 3), (3, 4)]
    >>> plan_batches(["a", "b", "c"], ["xxxx", "y", "zz"], batch_size=10, max_bytes=3)
    [(0, 1), (1, 3)]
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    out: list[tuple[int, int]] = []
    docs: set[str] = set()
    start = size = 0
    for i, (docno, text) in enumerate(zip(docnos, texts)):
        n = len((text or "").encode("utf-8"))
        full = i - start >= batch_size
        too_many = max_docs is not None and docno not in docs and len(docs) >= max_docs
        too_big = max_bytes is not None and size + n > max_bytes and i > start
        if i > start and (full or too_many or too_big):
            out.append((start, i))
            start, docs, size = i, set(), 0
        docs.add(docno)
        size += n
    if start < len(docnos):
        out.append((start, len(docnos)))
    return out


class Deadline:
    """``seconds`` from now (``None``: never); :meth:`passed` is checked between batches.

    >>> Deadline(None).passed(), Deadline(0).passed()
    (False, True)
    """

    def __init__(self, seconds: float | None, clock=time.monotonic):
        self.seconds, self._clock = seconds, clock
        self._end = None if seconds is None else clock() + seconds

    def passed(self) -> bool:
        return self._end is not None and self._clock() >= self._end

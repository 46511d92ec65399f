"""Embedding batches under caps, and a time limit checked between them (``qmdlab embed``).

A batch is one model call and one transaction (:meth:`qmdlab.store.Index.store_vectors`), so an
``embed`` stopped between batches — by ``--timeout``, Ctrl-C or a crash — keeps every finished
batch, and the next run embeds only the chunks still missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


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


@dataclass
class EmbedCount:
    """Chunks embedded (``done``) and vectors stored (``stored``: fewer when a chunk left the index meanwhile)."""

    done: int = 0
    stored: int = 0


def embed_batches(
    idx: Any,
    embedder: Any,
    todo: Any,
    batches: Sequence[tuple[int, int]],
    count: EmbedCount | None = None,
    *,
    deadline: Deadline | None = None,
    on_batch: Callable[[int], Any] | None = None,
) -> EmbedCount:
    """Embed the chunks of ``todo`` (a frame with ``chunk_id``, ``title``, ``text``) batch by batch,
    storing each batch in its own transaction; stop between batches once ``deadline`` has passed.
    ``count`` is updated as batches are stored, so a caller that catches an error knows what was kept."""
    count = count if count is not None else EmbedCount()
    ids, texts = todo["chunk_id"].to_list(), todo["text"].to_list()
    titles = todo["title"].fill_null("").to_list()
    for a, b in batches:
        if deadline is not None and deadline.passed():
            break
        mat = embedder.embed_documents(list(zip(titles[a:b], texts[a:b])))
        count.stored += idx.store_vectors(ids[a:b], mat, embedder.fingerprint)
        count.done += len(mat)
        if on_batch is not None:
            on_batch(len(mat))
    return count


def embed_missing(
    idx: Any, embedder: Any, collections: Sequence[str] | None = None, batch_size: int = 32
) -> EmbedCount:
    """Embed every chunk of ``collections`` (default: all) that has no vector from ``embedder``."""
    todo = idx.chunks_needing_vectors(embedder.fingerprint, list(collections) if collections else None)
    batches = plan_batches(todo["docno"].to_list(), todo["text"].to_list(), batch_size=batch_size)
    return embed_batches(idx, embedder, todo, batches)

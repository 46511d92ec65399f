"""``qmdlab cleanup``: drop what no active document needs, then ``VACUUM`` (qmd's ``cleanup``).

An update marks a vanished file's row inactive (``active = 0``) instead of deleting it, so
its content, chunks and vectors stay until they are cleaned up. :func:`cleanup` deletes, in
one transaction:

1. inactive document rows;
2. content no document row refers to, and its chunks and generated queries;
3. vectors of chunks that no longer exist (orphans) — and, with ``stale_vectors``, vectors of
   every embedder fingerprint except ``keep_fingerprint``;
4. with ``cache``, every LLM cache entry;

then runs ``VACUUM`` so the file shrinks, and reports the counts and the bytes freed.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from qmdlab.store.index import Index


class CleanupReport(NamedTuple):
    """What :func:`cleanup` removed; ``bytes_before``/``bytes_after`` are the database file's size."""

    inactive_documents: int
    content: int
    chunks: int
    vectors: int
    cache_entries: int
    bytes_before: int
    bytes_after: int
    dry_run: bool = False
    """Counted only (``cleanup --dry-run``): nothing was removed."""

    @property
    def freed(self) -> int:
        """Bytes the database file shrank by (never negative)."""
        return max(0, self.bytes_before - self.bytes_after)

    def summary(self) -> str:
        """One line for people.

        >>> CleanupReport(2, 1, 3, 3, 0, 2 * 2**20, 2**20).summary()
        'removed 2 inactive documents, 1 orphaned contents, 3 chunks, 3 vectors, 0 cache entries; freed 1.0 MiB (2.0 MiB -> 1.0 MiB)'
        >>> CleanupReport(2, 1, 3, 3, 0, 2**20, 2**20, dry_run=True).summary()
        'would remove 2 inactive documents, 1 orphaned contents, 3 chunks, 3 vectors, 0 cache entries (dry run: nothing removed; run `qmdlab cleanup` to remove them)'
        """
        if self.dry_run:
            return (
                f"would remove {self.inactive_documents} inactive documents, {self.content} orphaned contents, "
                f"{self.chunks} chunks, {self.vectors} vectors, {self.cache_entries} cache entries "
                "(dry run: nothing removed; run `qmdlab cleanup` to remove them)"
            )
        return (
            f"removed {self.inactive_documents} inactive documents, {self.content} orphaned contents, "
            f"{self.chunks} chunks, {self.vectors} vectors, {self.cache_entries} cache entries; "
            f"freed {_mib(self.freed)} ({_mib(self.bytes_before)} -> {_mib(self.bytes_after)})"
        )


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _db_bytes(idx: Index) -> int:
    """The database file plus its WAL, if any."""
    path = str(idx.db_path)
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def cleanup(
    idx: Index,
    *,
    cache: bool = False,
    stale_vectors: bool = False,
    keep_fingerprint: str | None = None,
    vacuum: bool = True,
    dry_run: bool = False,
) -> CleanupReport:
    """Remove inactive documents, orphaned content/chunks/vectors (and optionally the LLM cache
    and other embedders' vectors), then ``VACUUM``.

    Parameters
    ----------
    idx : Index
    cache : bool
        Also clear the LLM cache (expansions, rerank scores).
    stale_vectors : bool
        Also drop vectors of every fingerprint except ``keep_fingerprint`` (required then).
    keep_fingerprint : str, optional
        The current embedder's fingerprint (``stale_vectors`` only).
    vacuum : bool
        Rewrite the file so the freed pages go back to the file system.
    dry_run : bool
        Count what would be removed, remove nothing (the deletes run and are rolled back).
    """
    if stale_vectors and not keep_fingerprint:
        from qmdlab.errors import QmdlabError

        raise QmdlabError("cleanup(stale_vectors=True) needs keep_fingerprint: the embedder whose vectors stay")
    before = _db_bytes(idx)
    counted: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    try:
        with idx.transaction() as c:
            counted = _delete(c, cache=cache, stale_vectors=stale_vectors, keep_fingerprint=keep_fingerprint)
            if dry_run:
                raise _RollBack
    except _RollBack:
        return CleanupReport(*counted, bytes_before=before, bytes_after=before, dry_run=True)
    if vacuum:
        with idx._lock:  # VACUUM cannot run inside a transaction
            idx.conn.execute("VACUUM")
            try:
                idx.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except Exception:  # not in WAL mode
                pass
    return CleanupReport(*counted, bytes_before=before, bytes_after=_db_bytes(idx))


class _RollBack(Exception):
    """Raised inside the transaction of a dry run so that it is rolled back."""


def _delete(c, *, cache: bool, stale_vectors: bool, keep_fingerprint: str | None) -> tuple[int, int, int, int, int]:
    """The deletes of :func:`cleanup` on the transaction ``c``: ``[documents, content, chunks,
    vectors, cache entries]`` removed."""
    n_docs = c.execute("DELETE FROM documents WHERE active = 0").rowcount
    n_vec = c.execute(
        "DELETE FROM vectors WHERE chunk_id IN (SELECT id FROM chunks WHERE hash NOT IN (SELECT hash FROM documents))"
    ).rowcount
    n_chunks = c.execute("DELETE FROM chunks WHERE hash NOT IN (SELECT hash FROM documents)").rowcount
    n_content = c.execute("DELETE FROM content WHERE hash NOT IN (SELECT hash FROM documents)").rowcount
    # generated queries of content no document holds (the transaction made the table: migrate_fts)
    c.execute("DELETE FROM doc_queries WHERE hash NOT IN (SELECT hash FROM documents)")
    n_vec += c.execute("DELETE FROM vectors WHERE chunk_id NOT IN (SELECT id FROM chunks)").rowcount
    if stale_vectors:
        from qmdlab.store.vectors import document_fingerprint

        keep = document_fingerprint(keep_fingerprint or "")  # a query adapter's documents are its base's
        n_vec += c.execute("DELETE FROM vectors WHERE fingerprint != ?", (keep,)).rowcount
    n_cache = c.execute("DELETE FROM llm_cache").rowcount if cache else 0
    return n_docs, n_content, n_chunks, n_vec, n_cache


__all__ = ["CleanupReport", "cleanup"]

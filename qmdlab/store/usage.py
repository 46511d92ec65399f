"""Capacity of an index against :mod:`qmdlab.store.limits`: documents, chunks, vector bytes.

:class:`UsageMixin` is one part of :class:`~qmdlab.store.Index`; the counts are kept in
``Index._capacity`` until this object's next write or another connection's commit (``PRAGMA
data_version``), which also drops the in-memory vector matrices.
"""

from __future__ import annotations

from qmdlab.store import limits
from qmdlab.store.base import IndexBase


class UsageMixin(IndexBase):
    """Counts against the limits, cached until the data changes."""

    def _drop_stale_caches(self) -> None:
        """Forget the in-memory vector matrices and capacity counts when another connection (another
        process's ``update`` or ``embed``) has committed since they were loaded."""
        with self._lock:
            version = self.conn.execute("PRAGMA data_version").fetchone()[0]
            if version != self._data_version:
                self._vectors.clear()
                self._capacity.clear()
                self._data_version = version

    def vector_capacity(self, fingerprint: str) -> limits.Check:
        """Bytes the float32 matrix of ``fingerprint`` takes (or would take) against the limit."""
        from qmdlab.store.vectors import document_fingerprint

        fingerprint = document_fingerprint(fingerprint)
        with self._lock:
            row = self.conn.execute(
                "SELECT count(*), max(v.dim) FROM vectors v JOIN chunks k ON k.id = v.chunk_id "
                "JOIN documents d ON d.hash = k.hash WHERE v.fingerprint = ? AND d.active = 1",
                (fingerprint,),
            ).fetchone()
        return limits.check("vector_bytes", int(row[0]) * int(row[1] or 0) * 4)

    def capacity(self, fingerprint: str | None = None) -> list[limits.Check]:
        """Documents, chunks (and, given an embedder fingerprint, vector bytes) against their limits.

        Counted once and kept until this object's next write (every query asks)."""
        self._drop_stale_caches()
        key = tuple(limits.limit(k) for k in ("documents", "chunks", "vector_bytes"))
        hit = self._capacity.get(fingerprint)
        if hit is not None and hit[0] == key:
            return hit[1]
        with self._lock:
            docs = self.conn.execute("SELECT count(*) FROM documents WHERE active = 1").fetchone()[0]
            chunks = self.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        out = [limits.check("documents", docs), limits.check("chunks", chunks)]
        if fingerprint is not None:
            out.append(self.vector_capacity(fingerprint))
        self._capacity[fingerprint] = (key, out)
        return out

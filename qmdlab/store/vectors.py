"""Embedding vectors: one float32 blob per (chunk, embedder fingerprint), loaded as one matrix.

:class:`VectorsMixin` is one part of :class:`~qmdlab.store.Index` (it uses the index's
``conn``, ``_lock``, ``transaction``, ``_coll_clause`` and the capacity check of
:mod:`qmdlab.store.usage`); the in-memory matrices live in ``Index._vectors`` until the next
write.

A vector belongs to the chunk it was computed from: it is stored only for a chunk that exists
when the vectors are written (in the same transaction), with that chunk's
:data:`~qmdlab.store.schema.CHUNK_KEY`; chunk ids are never reused
(:func:`~qmdlab.store.schema.next_chunk_id`); a vector whose key is not its chunk's is neither
loaded nor counted as present (``embed`` computes it again). :meth:`VectorsMixin.vector_check`
counts every other kind of vector (orphaned, mismatched, stored before keys existed).

A vector holding a NaN or an infinite value (or past float32's range) is never stored: the batch
holding it is refused whole (:func:`vector_problem`), whatever embedder computed it. One stored by
an older version is left out of the search (a zero row: it matches nothing) and counted by
:meth:`VectorsMixin.vector_values_check` (``status``).

An embedder that changes query vectors only (a query adapter, :mod:`qmdlab.models.adapter`) has a
fingerprint of its own — its base's plus a query-side part after :data:`QUERY_SIDE_MARK` — so
caches and traces tell it apart; its document vectors are the base's, stored and read under
:func:`document_fingerprint`, which every method here applies to the fingerprint it is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # numpy and polars are imported by the methods that use them (CLI cold start)
    import numpy as np
    import polars as pl

from qmdlab.errors import DimensionMismatchError, ModelError
from qmdlab.store import limits, schema, testhooks
from qmdlab.store.base import IndexBase
from qmdlab.store.schema import CHUNK_KEY

#: What starts the query-side part of an embedder fingerprint (:func:`document_fingerprint`).
QUERY_SIDE_MARK = "+adapter:"


def document_fingerprint(fingerprint: str) -> str:
    """The fingerprint document vectors are stored under: ``fingerprint`` without its query-side
    part (an embedder that maps query vectors only shares its base's document vectors).

    >>> document_fingerprint("pkg:m#5fc8a74aed3e+adapter:0123abcd"), document_fingerprint("pkg:m#5fc8a74aed3e")
    ('pkg:m#5fc8a74aed3e', 'pkg:m#5fc8a74aed3e')
    """
    return fingerprint.partition(QUERY_SIDE_MARK)[0]


def vector_problem(matrix: Any, *, zero_ok: bool = True) -> str | None:
    """Why ``matrix`` (one vector per row) cannot be stored or searched, or ``None``: not one
    vector per row, empty vectors (``[]``), a NaN, an infinite value, a value past float32's range
    (stored as infinity) and, unless ``zero_ok``, an all-zero vector (it matches nothing).

    >>> vector_problem([[0.6, 0.8], [0.0, 0.0]]) is None, vector_problem([[0.0, 0.0]], zero_ok=False)
    (True, 'an all-zero vector (vector 1 of 1)')
    >>> vector_problem([[1.0, 0.0], [float("nan"), 1.0]]), vector_problem([[1e300, 0.0]]), vector_problem([[]])
    ('a NaN value (vector 2 of 2)', 'a value past float32 range (1e+300, vector 1 of 1)', 'empty vectors ([])')
    """
    import numpy as np

    try:
        m = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        return "vectors that are not lists of numbers of one length"
    if m.ndim != 2:
        return f"{m.ndim}-dimensional data instead of one vector per text"
    n = m.shape[0]
    if n and m.shape[1] == 0:
        return "empty vectors ([])"

    def first(rows: Any) -> str:
        return f"vector {int(np.flatnonzero(rows)[0]) + 1} of {n}"

    nan = np.isnan(m).any(axis=1)
    if nan.any():
        return f"a NaN value ({first(nan)})"
    inf = np.isinf(m).any(axis=1)
    if inf.any():
        return f"an infinite value ({first(inf)})"
    big = (np.abs(m) > np.finfo(np.float32).max).any(axis=1)
    if big.any():
        return f"a value past float32 range ({np.abs(m[big]).max():g}, {first(big)})"
    if not zero_ok:
        zero = ~m.any(axis=1)
        if zero.any():
            return f"an all-zero vector ({first(zero)})"
    return None


class VectorMatrix(NamedTuple):
    """Row ``i`` is the L2-normalised vector of chunk ``chunk_ids[i]`` of ``docnos[i]``
    (a chunk shared by identical files appears once per document)."""

    chunk_ids: np.ndarray
    docnos: list[str]
    matrix: np.ndarray


class VectorsMixin(IndexBase):
    """Chunks to embed, storing vectors, the normalised matrix per fingerprint."""

    def _key_match(self) -> str:
        """SQL: vector ``v`` matches chunk ``k`` (a vector stored before keys existed is trusted)."""
        if not getattr(self, "_vector_key", False):
            with self._lock:
                self._vector_key = schema.has_vector_key(self.conn)
        return f" AND (v.chunk_key IS NULL OR v.chunk_key = {CHUNK_KEY})" if self._vector_key else ""

    def chunks_needing_vectors(self, fingerprint: str, collections: Iterable[str] | None = None) -> pl.DataFrame:
        """Chunks of active documents with no vector for ``fingerprint``: chunk_id, docno, title, text
        (one row per chunk; a chunk shared by identical files is listed once)."""
        import polars as pl

        fingerprint = document_fingerprint(fingerprint)
        where, params = self._coll_clause(collections)
        with self._lock:
            rows = self.conn.execute(
                "SELECT k.id, min(d.collection || '/' || d.path), d.title, "
                "substr(c.body, k.char_start + 1, k.char_end - k.char_start) "
                "FROM documents d JOIN chunks k ON k.hash = d.hash JOIN content c ON c.hash = d.hash "
                f"WHERE d.active = 1{where} AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.chunk_id = k.id "
                f"AND v.fingerprint = ?{self._key_match()}) GROUP BY k.id ORDER BY k.id",
                [*params, fingerprint],
            ).fetchall()
        return pl.DataFrame(
            {
                "chunk_id": [r[0] for r in rows],
                "docno": [r[1] for r in rows],
                "title": [r[2] for r in rows],
                "text": [r[3] for r in rows],
            },
            schema={"chunk_id": pl.Int64, "docno": pl.Utf8, "title": pl.Utf8, "text": pl.Utf8},
        )

    def vector_fingerprints(self) -> dict[str, tuple[int, int]]:
        """``{fingerprint: (dim, count)}`` of the stored vectors."""
        with self._lock:
            rows = self.conn.execute("SELECT fingerprint, min(dim), max(dim), count(*) FROM vectors GROUP BY 1")
            return {r[0]: (r[1], r[3]) for r in rows}

    def store_vectors(self, chunk_ids: Sequence[int], matrix: np.ndarray, fingerprint: str) -> int:
        """Store one vector per chunk, in one transaction; returns how many were stored.

        A chunk id that no longer names a chunk (its file was removed and ``cleanup`` ran while
        the vectors were computed) gets no vector; each stored vector records the key of its
        chunk (:data:`~qmdlab.store.schema.CHUNK_KEY`). A batch holding a vector that is not finite
        (:func:`vector_problem`) is refused whole.

        Parameters
        ----------
        chunk_ids : sequence of int
            Chunk ids (from :meth:`chunks_needing_vectors` or :meth:`chunks`).
        matrix : numpy.ndarray
            Shape ``(len(chunk_ids), dim)``; stored as float32 (normalised when loaded).
        fingerprint : str
            The embedder's fingerprint.

        Raises
        ------
        DimensionMismatchError
            ``dim`` differs from vectors already stored under ``fingerprint``
            (:meth:`drop_other_dimensions` first, for ``embed -f``).
        ModelError
            A vector holds a NaN or an infinite value: nothing of the batch is stored.
        """
        import numpy as np

        fingerprint = document_fingerprint(fingerprint)
        ids = [int(i) for i in chunk_ids]
        problem = vector_problem(matrix)
        if problem is not None and len(ids):
            raise ModelError(
                f"embedder {fingerprint!r} gave {problem}; nothing of this batch was stored — check the embed model"
            )
        m = np.asarray(matrix, dtype=np.float32)
        if m.ndim != 2 or m.shape[0] != len(ids):
            raise ValueError(f"matrix shape {m.shape} does not match {len(ids)} chunk ids")
        dim = int(m.shape[1])
        with self.transaction() as c:
            row = c.execute(
                "SELECT dim FROM vectors WHERE fingerprint = ? AND dim != ? LIMIT 1", (fingerprint, dim)
            ).fetchone()
            if row is not None:
                raise DimensionMismatchError(
                    f"embedder {fingerprint!r} gives {dim}-d vectors but the index holds {row[0]}-d ones under "
                    "that fingerprint; re-embed everything with `qmdlab embed -f`"
                )
            if not schema.has_vector_key(c):  # an index made before vectors.chunk_key existed
                c.execute(schema.VECTOR_KEY)
            self._vector_key = True
            before = c.total_changes
            c.executemany(
                "INSERT OR REPLACE INTO vectors(chunk_id, fingerprint, dim, blob, chunk_key) "
                f"SELECT k.id, ?, ?, ?, {CHUNK_KEY} FROM chunks k WHERE k.id = ?",
                [(fingerprint, dim, np.ascontiguousarray(m[k]).tobytes(), i) for k, i in enumerate(ids)],
            )
            stored = c.total_changes - before
            testhooks.point("vectors.batch")
        return stored

    def drop_other_dimensions(self, fingerprint: str, dim: int) -> int:
        """Delete the vectors under ``fingerprint`` that are not ``dim``-d, in one transaction;
        returns how many. ``embed -f`` after a served model changed its dimension under the same
        name: those vectors cannot be searched with the model's query vectors any more."""
        fingerprint = document_fingerprint(fingerprint)
        with self._lock:
            found = self.conn.execute(
                "SELECT 1 FROM vectors WHERE fingerprint = ? AND dim != ? LIMIT 1", (fingerprint, int(dim))
            ).fetchone()
        if found is None:
            return 0
        with self.transaction() as c:
            return c.execute("DELETE FROM vectors WHERE fingerprint = ? AND dim != ?", (fingerprint, int(dim))).rowcount

    def vector_matrix(self, fingerprint: str) -> VectorMatrix:
        """All vectors of active documents under ``fingerprint``, L2-normalised; loaded once and
        kept in memory until the next write. Empty (shape ``(0, 0)``) when there are none."""
        import numpy as np

        fingerprint = document_fingerprint(fingerprint)
        self._drop_stale_caches()
        cached = self._vectors.get(fingerprint)
        if cached is not None:
            return cached
        chk = self.vector_capacity(fingerprint)
        if chk.level == "over":
            raise limits.CapacityError(
                f"the vector matrix of {fingerprint!r} would take {chk.value:.0f} bytes, over the capacity limit "
                f"of {chk.limit:.0f} (${limits.ENV['vector_bytes']}); vector search is disabled until the limit "
                "is raised or collections are removed"
            )
        with self._lock:
            rows = self.conn.execute(
                "SELECT k.id, d.collection || '/' || d.path, v.dim, v.blob FROM vectors v "
                "JOIN chunks k ON k.id = v.chunk_id JOIN documents d ON d.hash = k.hash "
                f"WHERE v.fingerprint = ? AND d.active = 1{self._key_match()} ORDER BY 2, k.seq",
                (fingerprint,),
            ).fetchall()
        if not rows:
            vm = VectorMatrix(np.zeros(0, dtype=np.int64), [], np.zeros((0, 0), dtype=np.float32))
        else:
            dims = {r[2] for r in rows}
            if len(dims) > 1:
                raise DimensionMismatchError(
                    f"vectors under {fingerprint!r} have mixed dimensions {sorted(dims)}; "
                    "re-embed with `qmdlab embed -f`"
                )
            mat = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32).reshape(len(rows), dims.pop()).copy()
            mat[~np.isfinite(mat).all(axis=1)] = 0.0  # stored by an older version: matches nothing
            norms = np.linalg.norm(mat, axis=1, keepdims=True)
            mat /= np.where(norms == 0, 1.0, norms)
            vm = VectorMatrix(np.array([r[0] for r in rows], dtype=np.int64), [r[1] for r in rows], mat)
        self._vectors[fingerprint] = vm
        return vm

    def vector_check(self) -> dict[str, dict[str, int]]:
        """Per fingerprint: ``vectors`` stored, ``orphaned`` (no chunk has its id), ``mismatched``
        (its chunk's key is not the one it was computed from; never loaded, ``embed`` replaces it)
        and ``unverified`` (stored before keys existed: ``qmdlab embed -f`` re-computes them)."""
        with self._lock:
            key = schema.has_vector_key(self.conn)
            bad = f"v.chunk_key IS NOT NULL AND v.chunk_key != {CHUNK_KEY}" if key else "0"
            unverified = "v.chunk_key IS NULL" if key else "1"
            rows = self.conn.execute(
                f"SELECT v.fingerprint, count(*), sum(k.id IS NULL), sum(k.id IS NOT NULL AND {bad}), "
                f"sum(k.id IS NOT NULL AND {unverified}) FROM vectors v LEFT JOIN chunks k ON k.id = v.chunk_id "
                "GROUP BY 1"
            ).fetchall()
        return {
            r[0]: {"vectors": r[1], "orphaned": r[2] or 0, "mismatched": r[3] or 0, "unverified": r[4] or 0}
            for r in rows
        }

    def vector_values_check(self, batch: int = 4096) -> dict[str, int]:
        """Per fingerprint: how many stored vectors cannot be searched — a NaN or an infinite
        value, or a blob that is not ``dim`` float32 values (left out of the search; ``qmdlab embed
        -f`` re-computes them). Every blob is read, ``batch`` rows at a time."""
        import numpy as np

        out: dict[str, int] = {}
        with self._lock:
            cur = self.conn.execute("SELECT fingerprint, dim, blob FROM vectors ORDER BY fingerprint, dim")
            while True:
                rows = cur.fetchmany(batch)
                if not rows:
                    break
                groups: dict[tuple[str, int], list[bytes]] = {}
                for fp, dim, blob in rows:
                    out.setdefault(fp, 0)
                    if not isinstance(blob, bytes) or not dim or len(blob) != 4 * dim:
                        out[fp] += 1
                    else:
                        groups.setdefault((fp, dim), []).append(blob)
                for (fp, dim), blobs in groups.items():
                    mat = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim)
                    out[fp] += int((~np.isfinite(mat).all(axis=1)).sum())
        return out

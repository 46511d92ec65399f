"""Storage of document expansion (doc2query): generated queries per chunk, the active generator,
and the ``expansions`` column of ``documents_fts`` they fill.

The table ``doc_queries`` (:mod:`qmdlab.store.schema`) holds every generated query of a chunk —
keyed by content hash, chunk ``seq``, generator fingerprint and sample number ``n`` — with the
round-trip filter's verdict (``kept``) and the source's BM25 rank. One generator is *active* per
index (``meta.doc2query_generator``): the ``expansions`` column of a document is the kept queries
of its chunks for that generator (:func:`qmdlab.store.schema.expansion_text`), written by
:func:`write_doc_expansions` and kept by the triggers when a document is added, moved or changed.

Generation and filtering live in :mod:`qmdlab.pipeline.doc_expand`; this module only reads and
writes rows. Every write runs in one :meth:`~qmdlab.store.Index.transaction`, so the first write
to an index made before the column existed migrates it (:func:`qmdlab.store.schema.migrate_fts`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from qmdlab.store import schema

if TYPE_CHECKING:
    from qmdlab.store import Index


class ChunkToExpand(NamedTuple):
    """A chunk that has fewer generated samples than asked: ``have`` of them so far."""

    hash: str
    seq: int
    docno: str
    text: str
    have: int


class GeneratedQuery(NamedTuple):
    """One generated sample of a chunk (``query`` ``None``: not a usable query)."""

    hash: str
    seq: int
    n: int
    raw: str
    query: str | None


class FilterVerdict(NamedTuple):
    """The round-trip filter's verdict on one sample (``source_rank`` ``None``: beyond the depth)."""

    hash: str
    seq: int
    n: int
    kept: bool
    source_rank: int | None


def ensure_table(idx: Index) -> None:
    """Make ``doc_queries`` (and, in an older index, the four-column ``documents_fts``) exist."""
    with idx.transaction("doc-queries") as c:
        c.execute(schema.DOC_QUERIES)


def _has_table(idx: Index) -> bool:
    with idx._lock:
        return (
            idx.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'doc_queries'").fetchone()
            is not None
        )


def _scope(idx: Index, collections: Iterable[str] | None) -> tuple[str, list]:
    if collections is None:
        collections = idx.default_collections()
    return idx._coll_clause(collections)


def chunks_to_expand(
    idx: Index, generator: str, per_chunk: int, *, collections: Iterable[str] | None = None
) -> list[ChunkToExpand]:
    """The chunks of active documents (in ``collections``) with fewer than ``per_chunk`` samples of
    ``generator``, in docno and chunk order; a chunk shared by several documents once (under the
    first docno)."""
    where, params = _scope(idx, collections)
    have = (
        "(SELECT count(*) FROM doc_queries q WHERE q.hash = k.hash AND q.seq = k.seq AND q.generator = ?)"
        if _has_table(idx)
        else "0"
    )
    sql = (
        f"SELECT k.hash, k.seq, min(d.collection || '/' || d.path) AS docno, "
        "substr(c.body, k.char_start + 1, k.char_end - k.char_start), "
        f"{have} AS have FROM chunks k JOIN documents d ON d.hash = k.hash AND d.active = 1{where} "
        "JOIN content c ON c.hash = k.hash GROUP BY k.hash, k.seq HAVING have < ? ORDER BY docno, k.seq"
    )
    args = ([generator] if have != "0" else []) + list(params) + [int(per_chunk)]
    with idx._lock:
        rows = idx.conn.execute(sql, args).fetchall()
    return [ChunkToExpand(h, int(s), d, t, int(n)) for h, s, d, t, n in rows]


def store_generated(idx: Index, generator: str, rows: Sequence[GeneratedQuery]) -> None:
    """Store generated samples (one transaction; a sample already stored is kept as it was)."""
    with idx.transaction("doc-queries") as c:
        c.execute(schema.DOC_QUERIES)
        c.executemany(
            "INSERT OR IGNORE INTO doc_queries(hash, seq, generator, n, raw, query) VALUES (?, ?, ?, ?, ?, ?)",
            [(r.hash, r.seq, generator, r.n, r.raw, r.query) for r in rows],
        )


def queries_to_filter(
    idx: Index, generator: str, *, collections: Iterable[str] | None = None, refilter: bool = False
) -> list[GeneratedQuery]:
    """Usable samples of ``generator`` for chunks of active documents in ``collections`` that the
    round-trip filter has not judged (``refilter``: every usable sample)."""
    if not _has_table(idx):
        return []
    where, params = _scope(idx, collections)
    judged = "" if refilter else " AND q.kept IS NULL"
    sql = (
        "SELECT q.hash, q.seq, q.n, q.raw, q.query FROM doc_queries q WHERE q.generator = ? "
        f"AND q.query IS NOT NULL{judged} AND q.hash IN (SELECT d.hash FROM documents d WHERE d.active = 1{where}) "
        "ORDER BY q.hash, q.seq, q.n"
    )
    with idx._lock:
        rows = idx.conn.execute(sql, [generator, *params]).fetchall()
    return [GeneratedQuery(h, int(s), int(n), r, q) for h, s, n, r, q in rows]


def store_verdicts(idx: Index, generator: str, rows: Sequence[FilterVerdict]) -> None:
    """Store the round-trip filter's verdicts (one transaction)."""
    with idx.transaction("doc-queries") as c:
        c.executemany(
            "UPDATE doc_queries SET kept = ?, source_rank = ? WHERE hash = ? AND seq = ? AND generator = ? AND n = ?",
            [(int(r.kept), r.source_rank, r.hash, r.seq, generator, r.n) for r in rows],
        )


def source_docnos(idx: Index, collections: Iterable[str] | None = None) -> dict[str, set[str]]:
    """``{content hash: docnos}`` of the active documents in ``collections``."""
    where, params = _scope(idx, collections)
    out: dict[str, set[str]] = {}
    with idx._lock:
        for h, docno in idx.conn.execute(
            f"SELECT d.hash, d.collection || '/' || d.path FROM documents d WHERE d.active = 1{where}", params
        ):
            out.setdefault(h, set()).add(docno)
    return out


def active_generator(idx: Index) -> str | None:
    """The fingerprint of the index's active generator (``None``: no expansions)."""
    with idx._lock:
        row = idx.conn.execute("SELECT value FROM meta WHERE key = ?", (schema.ACTIVE_GENERATOR,)).fetchone()
    return None if row is None else str(row[0])


def generators(idx: Index) -> list[str]:
    """The fingerprints of every generator with queries stored, the one stored last at the end."""
    if not _has_table(idx):
        return []
    with idx._lock:
        rows = idx.conn.execute(
            "SELECT generator FROM doc_queries GROUP BY generator ORDER BY MAX(rowid), generator"
        ).fetchall()
    return [str(r[0]) for r in rows]


def set_active_generator(idx: Index, generator: str | None) -> int:
    """Make ``generator`` the active one (``None``: none) and rewrite the doc-queries column;
    returns how many documents' column changed (:func:`write_doc_expansions`)."""
    with idx.transaction("doc-queries") as c:
        c.execute(schema.DOC_QUERIES)
        if generator is None:
            c.execute("DELETE FROM meta WHERE key = ?", (schema.ACTIVE_GENERATOR,))
        else:
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (schema.ACTIVE_GENERATOR, generator))
    return write_doc_expansions(idx)


def write_doc_expansions(idx: Index) -> int:
    """Bring every active document's ``expansions`` column to the kept queries of the active
    generator (:func:`qmdlab.store.schema.expansion_text`); only rows that differ are written.
    Returns how many were."""
    with idx.transaction("doc-queries") as c:
        c.execute(schema.DOC_QUERIES)
        want = dict(
            c.execute(f"SELECT d.id, {schema.expansion_text('d.hash')} FROM documents d WHERE d.active = 1").fetchall()
        )
        have = dict(c.execute("SELECT rowid, expansions FROM documents_fts").fetchall())
        changed = [(text, rowid) for rowid, text in want.items() if rowid in have and (have[rowid] or "") != text]
        c.executemany("UPDATE documents_fts SET expansions = ? WHERE rowid = ?", changed)
    return len(changed)


class KeptQuery(NamedTuple):
    """A generated query the round-trip filter kept, with the chunk it was generated from: the
    chunk's content ``hash`` and ``seq``, the first active document holding it (``docno``, its
    ``title``) and the chunk ``text``."""

    query: str
    hash: str
    seq: int
    docno: str
    title: str
    text: str


def kept_queries(
    idx: Index, generator: str | None = None, *, collections: Iterable[str] | None = None
) -> list[KeptQuery]:
    """The kept queries of ``generator`` (default: the active one; none without it) for chunks of
    active documents in ``collections``, in (hash, seq, n) order. A chunk shared by several
    documents is given once, under its first docno."""
    if not _has_table(idx):
        return []
    gen = generator if generator is not None else active_generator(idx)
    if gen is None:
        return []
    where, params = _scope(idx, collections)
    sql = (
        "SELECT q.query, q.hash, q.seq, min(d.collection || '/' || d.path), d.title, "
        "substr(c.body, k.char_start + 1, k.char_end - k.char_start) FROM doc_queries q "
        "JOIN chunks k ON k.hash = q.hash AND k.seq = q.seq "
        f"JOIN documents d ON d.hash = q.hash AND d.active = 1{where} "
        "JOIN content c ON c.hash = q.hash "
        "WHERE q.generator = ? AND q.kept = 1 AND q.query IS NOT NULL "
        "GROUP BY q.hash, q.seq, q.n ORDER BY q.hash, q.seq, q.n"
    )
    with idx._lock:
        rows = idx.conn.execute(sql, [*params, gen]).fetchall()
    return [KeptQuery(q, h, int(s), d, t or "", x) for q, h, s, d, t, x in rows]


class DocExpansionStatus(NamedTuple):
    """What :func:`status` reports: the active generator, and for it the samples stored, judged
    and kept, and the active documents whose doc-queries column is not empty."""

    generator: str | None
    generated: int
    judged: int
    kept: int
    documents: int


def status(idx: Index) -> DocExpansionStatus:
    """The index's expansion state (all zero without an active generator or the tables)."""
    gen = active_generator(idx) if _has_table(idx) else None
    if gen is None:
        return DocExpansionStatus(None, 0, 0, 0, 0)
    with idx._lock:
        n, judged, kept = idx.conn.execute(
            "SELECT count(*), count(kept), coalesce(sum(kept), 0) FROM doc_queries WHERE generator = ?", (gen,)
        ).fetchone()
        docs = 0
        if schema.fts_columns(idx.conn) > 3:
            docs = idx.conn.execute("SELECT count(*) FROM documents_fts WHERE expansions != ''").fetchone()[0]
    return DocExpansionStatus(gen, int(n), int(judged), int(kept), int(docs))


def has_doc_expansions(idx: Index) -> bool:
    """Whether any active document's doc-queries column holds a query."""
    return status(idx).documents > 0


__all__ = [
    "ChunkToExpand",
    "GeneratedQuery",
    "FilterVerdict",
    "KeptQuery",
    "DocExpansionStatus",
    "ensure_table",
    "chunks_to_expand",
    "store_generated",
    "queries_to_filter",
    "store_verdicts",
    "source_docnos",
    "kept_queries",
    "active_generator",
    "set_active_generator",
    "write_doc_expansions",
    "status",
    "has_doc_expansions",
]

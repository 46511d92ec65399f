"""Reading documents: the active-document frame, one document by reference, chunk rows.

:class:`DocumentsMixin` is one part of :class:`~qmdlab.store.Index` (it uses the index's
``conn``, ``_lock``, ``collections`` and ``_coll_clause``); :class:`Document` is what
:meth:`~qmdlab.store.Index.get` returns.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # polars is imported by the methods that use it (CLI cold start)
    import polars as pl

from qmdlab.errors import DocumentNotFoundError, StoreError
from qmdlab.store.base import IndexBase


def docid_of(content_hash: str) -> str:
    """qmd's short handle: the first 6 hex digits of the content hash.

    >>> docid_of("abcdef0123")
    'abcdef'
    """
    return content_hash[:6]


def is_bare_docid(ref: str) -> bool:
    """Whether ``ref`` reads as a docid written without ``#``: six or more hex digits, as qmd's
    ``isDocid``.

    >>> is_bare_docid("ccfe0e"), is_bare_docid("CCFE0E12"), is_bare_docid("cafe"), is_bare_docid("notes.md")
    (True, True, False, False)
    """
    return len(ref) >= 6 and all(c in "0123456789abcdefABCDEF" for c in ref)


@dataclass
class Document:
    docno: str
    docid: str
    collection: str
    path: str
    title: str
    body: str
    metadata: dict[str, Any]
    abs_path: Path
    hash: str
    mtime: float
    size: int
    active: bool = True


_ROW_VALUES_MAX = 2000  # docnos matched through the index; more are filtered after one scan


def _docno_rows(docnos: Sequence[str]) -> tuple[str, list[str]]:
    """SQL matching ``documents d`` rows by docno through the ``(collection, path)`` index: a
    list of row values joined on that index. Matching the concatenated docno, or a row-value
    ``IN``, scans every document (SQLite 3.40's plan; ``tests/search/test_get_many.py``).

    >>> _docno_rows(["kb/a.md", "kb/sub/b.md"])[1]
    ['kb', 'a.md', 'kb', 'sub/b.md']
    """
    params: list[str] = []
    for d in docnos:
        coll, _, path = d.partition("/")  # collection names never hold '/' (config.check_name)
        params += (coll, path)
    values = ",".join(["(?, ?)"] * len(docnos))
    return (
        f"d.id IN (SELECT x.id FROM (VALUES {values}) w JOIN documents x "
        "ON x.collection = w.column1 AND x.path = w.column2)",
        params,
    )


class DocumentsMixin(IndexBase):
    """Read-only access to documents and chunks."""

    def documents(self, collections: Iterable[str] | None = None) -> pl.DataFrame:
        """Active documents: docno, docid, collection, path, title, hash, mtime, size, tags, date.

        The frame is kept until the next write by any connection (``PRAGMA data_version`` and
        this connection's ``total_changes``): a repeated query (tag lift, content dedupe) does not
        rebuild it from every row. Treat it as read-only."""
        import polars as pl

        if collections is not None:
            collections = list(collections)
        key = None if collections is None else tuple(collections)
        with self._lock:
            version = (self.conn.execute("PRAGMA data_version").fetchone()[0], self.conn.total_changes)
        cache = self.__dict__.setdefault("_documents_cache", {})
        hit = cache.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        where, params = self._coll_clause(collections)
        with self._lock:
            rows = self.conn.execute(
                "SELECT d.collection || '/' || d.path, d.collection, d.path, d.title, d.hash, d.mtime, d.size, "
                f"d.tags, d.date FROM documents d WHERE d.active = 1{where} ORDER BY 1",
                params,
            ).fetchall()
        frame = pl.DataFrame(
            {
                "docno": [r[0] for r in rows],
                "docid": [docid_of(r[4]) for r in rows],
                "collection": [r[1] for r in rows],
                "path": [r[2] for r in rows],
                "title": [r[3] for r in rows],
                "hash": [r[4] for r in rows],
                "mtime": [float(r[5]) for r in rows],
                "size": [int(r[6]) for r in rows],
                "tags": [self._json_column(r[7]) for r in rows],
                "date": [r[8] for r in rows],
            },
            schema={
                "docno": pl.Utf8,
                "docid": pl.Utf8,
                "collection": pl.Utf8,
                "path": pl.Utf8,
                "title": pl.Utf8,
                "hash": pl.Utf8,
                "mtime": pl.Float64,
                "size": pl.Int64,
                "tags": pl.List(pl.Utf8),
                "date": pl.Utf8,
            },
        )
        if len(cache) > 8 or any(v[0] != version for v in cache.values()):
            cache.clear()
        cache[key] = (version, frame)
        return frame

    def _json_column(self, text: str) -> Any:
        """A JSON column (``metadata``, ``tags``) written by ``update``; text that does not parse
        can only be a damaged file, reported with the rebuild instructions."""
        try:
            return json.loads(text)
        except (TypeError, ValueError) as err:
            from qmdlab.errors import StoreError
            from qmdlab.store.failures import damaged_message

            raise StoreError(damaged_message(self.db_path, f"a documents row holds malformed JSON: {err}")) from err

    def _document_row(self, where: str, params: Sequence[Any]) -> list[tuple]:
        with self._lock:
            return self.conn.execute(
                "SELECT d.collection, d.path, d.title, d.hash, d.metadata, d.mtime, d.size, c.body, d.active "
                f"FROM documents d JOIN content c ON c.hash = d.hash WHERE {where}",
                params,
            ).fetchall()

    def _make_doc(self, r: tuple, roots: dict[str, Path] | None = None) -> Document:
        if roots is None:
            roots = {c.name: c.root for c in self.collections()}
        root = roots.get(r[0], Path("."))
        return Document(
            docno=f"{r[0]}/{r[1]}",
            docid=docid_of(r[3]),
            collection=r[0],
            path=r[1],
            title=r[2],
            body=r[7],
            metadata=self._json_column(r[4]),
            abs_path=Path(root) / r[1],
            hash=r[3],
            mtime=r[5],
            size=r[6],
            active=bool(r[8]),
        )

    def get_many(self, docnos: Iterable[str]) -> dict[str, Document]:
        """Active documents by exact docno, in one query (a result list's documents); a docno that
        names no active document is absent from the answer (:meth:`get` says why)."""
        want = list(dict.fromkeys(docnos))
        if not want:
            return {}
        roots = {c.name: c.root for c in self.collections()}
        out = {}
        rows = []
        for i in range(0, len(want), _ROW_VALUES_MAX):
            where, params = _docno_rows(want[i : i + _ROW_VALUES_MAX])
            rows += self._document_row(f"d.active = 1 AND {where}", params)
        for r in rows:
            doc = self._make_doc(r, roots)
            out[doc.docno] = doc
        return out

    def get(self, ref: str) -> Document:
        """A document by docno, ``qmd://collection/path`` URI, path inside a collection, absolute
        path, or ``#docid``.

        Raises :class:`StoreError` with "did you mean" suggestions on a miss, and on an ambiguous
        ``#docid`` or relative path.
        """
        from qmdlab.store.refs import strip_scheme

        ref = strip_scheme(ref)
        rows: list[tuple] = []
        if is_bare_docid(ref) and not self._document_row("d.active = 1 AND d.path = ?", (ref,)):
            ref = "#" + ref  # qmd resolves a docid given without its '#' (a file of that name first)
        if ref.startswith("#"):
            prefix = ref[1:].lower()
            if prefix:
                rows = self._document_row(
                    "d.active = 1 AND d.hash LIKE ? ORDER BY d.collection, d.path", (prefix + "%",)
                )
            hashes = {r[3] for r in rows}
            if len(hashes) > 1:
                raise StoreError(f"{ref} matches {len(hashes)} documents; give more hex digits of the docid")
        else:
            if "/" in ref:
                coll, _, rest = ref.partition("/")
                rows = self._document_row("d.active = 1 AND d.collection = ? AND d.path = ?", (coll, rest))
            if not rows and os.path.isabs(os.path.expanduser(ref)):
                p = Path(ref).expanduser().resolve()
                for c in self.collections():
                    if p == c.root or c.root in p.parents:
                        rows = self._document_row(
                            "d.active = 1 AND d.collection = ? AND d.path = ?",
                            (c.name, p.relative_to(c.root).as_posix()),
                        )
                        if rows:
                            break
            if not rows:
                rows = self._document_row(
                    "d.active = 1 AND (d.path = ? OR d.path LIKE ?) ORDER BY d.collection, d.path",
                    (ref, "%/" + ref.replace("%", "").replace("_", "\\_")),
                )
                rows = [r for r in rows if r[1] == ref or r[1].endswith("/" + ref)]
                if len(rows) > 1:
                    names = ", ".join(f"{r[0]}/{r[1]}" for r in rows[:5])
                    raise StoreError(f"{ref!r} matches several documents ({names}); give the full docno")
        if not rows:
            self._raise_if_listed(ref)
            raise DocumentNotFoundError(f"no document {ref!r}{self._suggest(ref)}")
        return self._make_doc(rows[0])

    def _raise_if_listed(self, ref: str) -> None:
        """A docno the document list holds but its lookup missed means a damaged file (an index
        b-tree that disagrees with its table): raise the rebuild message instead of "no document"."""
        from qmdlab.store.failures import damaged_message, integrity_check

        if ref not in set(self.documents()["docno"].to_list()):
            return
        with self._lock:
            problem = integrity_check(self.conn)
        if problem is not None:
            raise StoreError(damaged_message(self.db_path, f"integrity check: {problem}"))

    def _suggest(self, ref: str) -> str:
        docs = self.documents()
        if ref.startswith("#"):
            cands = [f"#{d}" for d in docs["docid"].to_list()]
        else:
            cands = docs["docno"].to_list() + docs["path"].to_list()
        close = difflib.get_close_matches(ref, cands, n=3, cutoff=0.5)
        if not close:
            return "; see `qmdlab ls`"
        return "; did you mean " + ", ".join(close) + "?"

    def chunks(self, docnos: Iterable[str] | None = None) -> pl.DataFrame:
        """chunk_id, docno, seq, char_start, char_end, line_start, line_end, heading_path, text."""
        import polars as pl

        sql = (
            "SELECT k.id, d.collection || '/' || d.path AS docno, k.seq, k.char_start, k.char_end, k.line_start, "
            "k.line_end, k.heading_path, substr(c.body, k.char_start + 1, k.char_end - k.char_start) "
            "FROM documents d JOIN chunks k ON k.hash = d.hash JOIN content c ON c.hash = d.hash "
            "WHERE d.active = 1"
        )
        params: list[str] = []
        keep: set[str] | None = None
        if docnos is not None:
            want = list(docnos)
            if not want:
                want = [""]
            if len(want) <= _ROW_VALUES_MAX:
                where, params = _docno_rows(want)
                sql += f" AND {where}"
            else:  # a whole collection's worth: one scan, filtered here (and no SQL variable limit)
                keep = set(want)
        with self._lock:
            rows = self.conn.execute(sql + " ORDER BY docno, k.seq", params).fetchall()
        if keep is not None:
            rows = [r for r in rows if r[1] in keep]
        cols = ["chunk_id", "docno", "seq", "char_start", "char_end", "line_start", "line_end", "heading_path", "text"]
        types = [pl.Int64, pl.Utf8, pl.Int64, pl.Int64, pl.Int64, pl.Int64, pl.Int64, pl.Utf8, pl.Utf8]
        return pl.DataFrame({c: [r[i] for r in rows] for i, c in enumerate(cols)}, schema=dict(zip(cols, types)))

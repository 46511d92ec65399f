"""The index: one SQLite database plus ``collections.yaml`` in one directory.

Writes are serialised by one lock and run in explicit transactions (``BEGIN IMMEDIATE``);
``update`` uses one transaction per collection, so a crash or an exception mid-way leaves
that collection exactly as it was. The index never writes into a collection's directory.

Concurrency: the database runs in WAL mode with a 30 s busy timeout, so readers (search,
query, get) never wait for a writer and never see a half-written update; a second writer
(another ``update`` or ``embed``) waits for the first and then runs on its result. Opening an
existing index writes nothing. Crash safety (SIGKILL mid-``update`` or mid-``embed``) is
proved by ``tests/reliability/test_crash.py``.

Capacity limits (documents, chunks, vector matrix bytes) are in :mod:`qmdlab.store.limits`.

A damaged database is never written to: before the first write of an :class:`Index` (a write
transaction, or a change to ``collections.yaml``: :meth:`Index.check_writable`) it runs ``PRAGMA
integrity_check`` (databases up to :data:`INTEGRITY_CHECK_MAX_BYTES`; larger ones when a write
fails in a way that suggests damage), once per :class:`Index`, and refuses with the rebuild
instructions of :mod:`qmdlab.store.failures` when it finds any. ``quick_check`` is not enough: it
does not compare an index b-tree with its table, so a ``UNIQUE`` index that lost entries passes it
and ``INSERT OR REPLACE`` through it stores duplicates. ``status`` runs the same check. A write
that fails (a full disk, a read-only file) is rolled back and its own error is what is raised.

The class is assembled from one module per concern, each a mixin this module combines:

- :mod:`qmdlab.store.schema` — tables, triggers, the schema version;
- :mod:`qmdlab.store.catalog` — collections and contexts (``collections.yaml``);
- :mod:`qmdlab.store.update` — ``update`` (scan, diff, write) and :class:`UpdateReport`;
- :mod:`qmdlab.store.content` — content-addressed text, chunks, garbage collection;
- :mod:`qmdlab.store.documents` — reading: ``documents``, ``get``, ``chunks``, :class:`Document`;
- :mod:`qmdlab.store.vectors` — storing and loading vectors, :class:`VectorMatrix`;
- :mod:`qmdlab.store.usage` — counts against :mod:`qmdlab.store.limits`.

This module keeps the connection, the write transaction and ``status``.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qmdlab.errors import StoreError
from qmdlab.paths import DB_NAME, resolve_index_dir
from qmdlab.store import schema, testhooks, trust
from qmdlab.store.cache import LLMCache
from qmdlab.store.catalog import CatalogMixin
from qmdlab.store.content import ContentMixin
from qmdlab.store.documents import Document, DocumentsMixin, docid_of
from qmdlab.store.failures import damaged_message, integrity_check, read_only_message
from qmdlab.store.schema import FTS_FUNCTION, SCHEMA_VERSION
from qmdlab.store.update import UPDATE_SKIP_REASONS, UpdateMixin, UpdateReport
from qmdlab.store.usage import UsageMixin
from qmdlab.store.vectors import VectorMatrix, VectorsMixin
from qmdlab.terms import space_cjk

__all__ = [
    "Index",
    "Document",
    "UpdateReport",
    "VectorMatrix",
    "docid_of",
    "UPDATE_SKIP_REASONS",
    "CONFIG_NAME",
    "BUSY_TIMEOUT_S",
    "READ_ONLY_VERBS",
    "CREATING_VERBS",
    "CONFIGURED",
    "creates_index",
    "index_exists",
]

BUSY_TIMEOUT_S = 30


def busy_timeout_s() -> float:
    """How long a connection waits for another process's write lock: qmd's
    ``$QMD_SQLITE_BUSY_TIMEOUT`` (milliseconds; ``0`` fails at once) when it is a number >= 0,
    else :data:`BUSY_TIMEOUT_S`.

    >>> import os; os.environ["QMD_SQLITE_BUSY_TIMEOUT"] = "1500"; busy_timeout_s()
    1.5
    >>> os.environ["QMD_SQLITE_BUSY_TIMEOUT"] = "soon"; busy_timeout_s() == BUSY_TIMEOUT_S
    True
    >>> del os.environ["QMD_SQLITE_BUSY_TIMEOUT"]
    """
    raw = os.environ.get("QMD_SQLITE_BUSY_TIMEOUT", "").strip()
    try:
        ms = float(raw)
    except ValueError:
        return float(BUSY_TIMEOUT_S)
    return int(ms) / 1000 if math.isfinite(ms) and ms >= 0 else float(BUSY_TIMEOUT_S)


CONFIG_NAME = "collections.yaml"
#: Databases up to this size are checked (``PRAGMA integrity_check``) before their first write.
INTEGRITY_CHECK_MAX_BYTES = 512 * 2**20
QUICK_CHECK_MAX_BYTES = INTEGRITY_CHECK_MAX_BYTES  # the former name


#: Verbs that only read an index (the command path below ``qmdlab``): they open an existing
#: index and never create one (a mistyped ``--index`` must not make an empty index, nor
#: ``--index <a notes folder>`` write into that folder).
READ_ONLY_VERBS = frozenset(
    {
        "search",
        "vsearch",
        "query",
        "get",
        "multi-get",
        "ls",
        "status",
        "cleanup",
        "mcp",
        "refs",
        "jump",
        "chunks",
        "collection list",
        "collection show",
        "context list",
    }
)


def verb_path(ctx: Any) -> str:
    """The command path of a click context below the root group, e.g. ``"collection list"``."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(reversed(names))


#: Verbs that create a missing index: the ones that register collections. Every other writer
#: (``update``, ``embed``, ``trust``, ``context add`` …) opens an index whose database or
#: ``collections.yaml`` exists (a project checked out, not yet updated), so a mistyped ``--index``
#: (or a notes folder given as ``--index``) is named and nothing is created.
CREATING_VERBS = frozenset({"collection add", "collection import-qmd", "init"})

#: :meth:`Index.open`'s ``create`` for a writer that may make the database of an index that has a
#: ``collections.yaml`` but creates no new index.
CONFIGURED = "configured"


def creates_index(ctx: Any) -> bool | str:
    """How the verb of ``ctx`` opens its index (:meth:`Index.open`'s ``create``): ``True`` for
    :data:`CREATING_VERBS`, ``False`` (an existing database only) for :data:`READ_ONLY_VERBS`,
    :data:`CONFIGURED` for every other verb."""
    verb = verb_path(ctx)
    if verb in CREATING_VERBS:
        return True
    return False if verb in READ_ONLY_VERBS else CONFIGURED


def index_exists(directory: Path, create: bool | str = False) -> bool:
    """Is there an index at ``directory`` to open with ``create`` (``CONFIGURED``: its database or
    its ``collections.yaml``; ``False``: its database)?"""
    if create is True:
        return True
    if (directory / DB_NAME).is_file():
        return True
    return create == CONFIGURED and (directory / CONFIG_NAME).is_file()


def no_index_message(directory: Path, name_or_path: object = None) -> str:
    """Which index was asked for, which exist, and how to make one."""
    from qmdlab.paths import existing_indexes

    names = existing_indexes()
    asked = f" (--index {str(name_or_path)!r})" if name_or_path not in (None, "") else ""
    have = f"existing indexes: {', '.join(names)}" if names else "no index exists yet"
    return (
        f"no index at {directory}{asked}; {have} — pass one with --index, or create this one with "
        "`qmdlab collection add PATH`"
    )


class Index(CatalogMixin, UpdateMixin, ContentMixin, DocumentsMixin, VectorsMixin, UsageMixin):
    """An index directory; open it with :meth:`Index.open`."""

    # Caches that qmdlab.search.lexical sets on an index (absent until first set): the FTS column
    # count at a schema version, and the {rowid: docno} map at a data state.
    _fts_column_count: tuple[sqlite3.Connection, int, int]
    _bm25_docnos: tuple[sqlite3.Connection, tuple[int, int], dict[int, str] | None]

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        # A project's .qmdlab/ may have come with a checkout: a linked index file or folder is
        # opened only once approved (`qmdlab trust`), before anything is read or written.
        trust.check_index_links(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.db_path = self.dir / DB_NAME
        self.config_path = self.dir / CONFIG_NAME
        self.read_only = False
        self._lock = threading.RLock()
        try:
            self.conn = self._connect(str(self.db_path))
            if self._schema_version() != str(SCHEMA_VERSION):  # a new (or foreign) file: create the schema
                with self._lock:
                    schema.create(self.conn)
            self.conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.DatabaseError as err:
            self._close_quietly()
            if not (self.db_path.is_file() and not os.access(self.dir, os.W_OK)):
                raise StoreError(damaged_message(self.db_path, str(err))) from err
            self._open_read_only(err)
        # The cache gets its own connection: a cache write from another thread must never join
        # (and commit) an ``update`` transaction open on ``self.conn``.
        self._cache_conn = self._connect(self._read_only_uri() if self.read_only else str(self.db_path))
        self.cache = LLMCache(self._cache_conn, read_only=self.read_only)
        self._vectors: dict[str, VectorMatrix] = {}
        self._capacity: dict[str | None, tuple[tuple, list]] = {}  # fingerprint -> (limits, checks)
        self._data_version = None
        self._write_checked = False
        self._fts_checked = False

    @staticmethod
    def _connect(target: str) -> sqlite3.Connection:
        uri = target.startswith("file:")
        wait = busy_timeout_s()
        conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None, timeout=wait, uri=uri)
        conn.create_function(FTS_FUNCTION, 1, space_cjk, deterministic=True)
        conn.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
        return conn

    def _read_only_uri(self) -> str:
        return f"file:{urllib.parse.quote(str(self.db_path))}?mode=ro&immutable=1"

    def _open_read_only(self, cause: sqlite3.DatabaseError) -> None:
        """Open an existing index in a folder this process cannot write (a read-only disk or
        mount): SQLite cannot make the WAL's shared-memory file there, so the file is read as
        immutable — readers work, writers are refused with :func:`~qmdlab.store.failures.read_only_message`."""
        try:
            self.conn = self._connect(self._read_only_uri())
            row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as err:
            self._close_quietly()
            raise StoreError(damaged_message(self.db_path, str(err))) from err
        if row is None or row[0] != str(SCHEMA_VERSION):
            self._close_quietly()
            raise StoreError(damaged_message(self.db_path, str(cause)))
        self.read_only = True

    def _schema_version(self) -> str | None:
        """The stored schema version, read without taking a write lock (``None``: no schema yet)."""
        return schema.stored_version(self.conn)

    def _close_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()

    @classmethod
    def open(cls, name_or_path: str | os.PathLike | None = None, *, create: bool | str = True) -> Index:
        """Open the index named or located by ``name_or_path``, creating it when ``create`` is
        true; with :data:`CONFIGURED` only one whose database or ``collections.yaml`` exists (its
        database is made then), with ``False`` only one whose database exists. A missing one is a
        :class:`StoreError` listing the indexes that exist (and nothing is written: no folder, no file)."""
        directory = resolve_index_dir(name_or_path)
        trust.check_index_links(directory)  # before anything else: a linked (or special) index file
        if not index_exists(directory, create):
            raise StoreError(no_index_message(directory, name_or_path))
        return cls(directory)

    def close(self) -> None:
        self._cache_conn.close()
        self.conn.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transactions
    @contextlib.contextmanager
    def transaction(self, label: str = "txn") -> Iterator[sqlite3.Connection]:
        """One write transaction; rolled back on any exception.

        ``label`` names the transaction in the crash harness' event log only
        (:mod:`qmdlab.store.testhooks`), e.g. ``update:<collection>``: which collection a
        ``commit`` belongs to, since ``update`` also commits small bookkeeping transactions
        and skips unchanged collections without one."""
        with self._lock:
            if self.read_only:
                raise StoreError(read_only_message(self.dir))
            if not self._write_checked:
                self._check_before_write()
            if not self._fts_checked:
                self._migrate_fts()
            self._begin_write()
            hooks = testhooks.enabled()  # crash-harness event log (off unless $QMDLAB_TEST_EVENTS is set)
            if hooks:
                testhooks.event("begin", label)
            try:
                yield self.conn
            except BaseException as err:
                self._rollback()
                if hooks:
                    testhooks.event("rollback", label)
                self._raise_if_damaged(err)
                raise
            else:
                if hooks:
                    testhooks.event("commit-start", label)
                try:
                    self.conn.execute("COMMIT")
                except BaseException as err:
                    self._rollback()
                    self._raise_if_damaged(err)
                    raise
                if hooks:
                    testhooks.event("commit", label)
            finally:
                self._vectors.clear()
                self._capacity.clear()

    def _rollback(self) -> None:
        """Roll back the open transaction, if SQLite has not already (a full disk rolls it back
        itself), never masking the error that caused it."""
        if self.conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")

    def _check_before_write(self) -> None:
        """Refuse to write into a damaged database (``PRAGMA integrity_check``, once per :class:`Index`)."""
        problem = self.integrity_problem()
        if problem is not None:
            raise StoreError(damaged_message(self.db_path, f"integrity check: {problem}"))
        self._write_checked = True

    def check_writable(self, path: Path | None = None) -> None:
        """Before a write outside a transaction (``path``, e.g. ``collections.yaml``: collections,
        contexts): refuse a read-only index or a damaged database, as :meth:`transaction` does."""
        with self._lock:
            if self.read_only:
                raise StoreError(read_only_message(path or self.dir))
            if not self._write_checked:
                self._check_before_write()

    def integrity_problem(self) -> str | None:
        """``PRAGMA integrity_check``'s first complaint about the database, ``None`` when it is sound
        or larger than :data:`INTEGRITY_CHECK_MAX_BYTES` (too slow to check on every write)."""
        try:
            size = os.path.getsize(self.db_path)
        except OSError:
            size = 0
        if size > INTEGRITY_CHECK_MAX_BYTES:
            return None
        with self._lock:
            return integrity_check(self.conn)

    def _begin_write(self) -> None:
        """``BEGIN IMMEDIATE``: take the write lock now; an index another process kept locked past the
        busy timeout is a :class:`StoreError` that says so."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as err:
            if "locked" in str(err) or "busy" in str(err):
                raise StoreError(
                    f"index {self.dir} stayed busy for {busy_timeout_s():g} s (another qmdlab process "
                    "is writing to it); retry when that update or embed has finished"
                ) from err
            raise

    def _migrate_fts(self) -> None:
        """Before the first write of this :class:`Index`: give an index made before
        ``documents_fts.expansions`` existed its four-column table (:func:`~qmdlab.store.schema.migrate_fts`),
        in a transaction of its own, so a failing write later cannot undo it."""
        if schema.fts_columns(self.conn) < len(schema.FTS_COLUMNS):
            self._begin_write()
            try:
                schema.migrate_fts(self.conn)  # checks again under the write lock: another process may have
            except BaseException:
                self._rollback()
                raise
            self.conn.execute("COMMIT")
        self._fts_checked = True

    def _raise_if_damaged(self, err: BaseException) -> None:
        """After a failed write: when ``err`` suggests damage and ``PRAGMA integrity_check`` confirms it,
        raise the rebuild message instead."""
        if not isinstance(err, sqlite3.DatabaseError):
            return
        text = str(err).lower()
        if any(s in text for s in ("full", "readonly", "read-only", "locked", "busy", "interrupted")):
            return
        problem = integrity_check(self.conn)
        if problem is not None:
            raise StoreError(damaged_message(self.db_path, f"{err}; integrity check: {problem}")) from err

    # ------------------------------------------------------------------ status
    def status(self, integrity: bool = False) -> dict[str, Any]:
        """Counts for ``qmdlab status``; with ``integrity``, first ``PRAGMA integrity_check``
        (:meth:`integrity_problem`): a damaged database raises the rebuild message, so a status
        never calls a damaged index healthy."""
        if integrity:
            problem = self.integrity_problem()
            if problem is not None:
                raise StoreError(damaged_message(self.db_path, f"integrity check: {problem}"))
        with self._lock:
            per = dict(
                self.conn.execute("SELECT collection, count(*) FROM documents WHERE active = 1 GROUP BY 1").fetchall()
            )
            inactive = self.conn.execute("SELECT count(*) FROM documents WHERE active = 0").fetchone()[0]
            nchunks = self.conn.execute(
                "SELECT count(DISTINCT k.id) FROM chunks k JOIN documents d ON d.hash = k.hash WHERE d.active = 1"
            ).fetchone()[0]
        checks = self.vector_check()
        invalid = self.vector_values_check()  # NaN or infinite values: never searched
        return {
            "index": str(self.dir),
            "collections": [
                {"name": c.name, "root": str(c.root), "mask": c.mask, "documents": per.get(c.name, 0)}
                for c in self.collections()
            ],
            "documents": sum(per.values()),
            "inactive_documents": inactive,
            "chunks": nchunks,
            "chunker": self.stored_chunker_fingerprint(),
            "vectors": {
                fp: {
                    "dim": d,
                    "count": n,
                    **{k: v for k, v in checks.get(fp, {}).items() if k != "vectors"},
                    "invalid": invalid.get(fp, 0),
                }
                for fp, (d, n) in self.vector_fingerprints().items()
            },
            "llm_cache_entries": self.cache.count(),
            "doc_expansions": _doc_expansion_status(self),
        }


def _doc_expansion_status(idx: Index) -> dict[str, Any] | None:
    """``qmdlab status``'s document expansion block (``None``: no active doc2query generator)."""
    from qmdlab.store.doc_expansions import status

    st = status(idx)
    if st.generator is None:
        return None
    return {"generator": st.generator, "generated": st.generated, "kept": st.kept, "documents": st.documents}

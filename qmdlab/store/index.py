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
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import difflib
import hashlib
import json
import os
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, NamedTuple, Sequence

if TYPE_CHECKING:  # numpy and polars are imported by the methods that use them (CLI cold start)
    import numpy as np
    import polars as pl

from qmdlab.errors import ConfigError, DimensionMismatchError, StoreError
from qmdlab.paths import resolve_index_dir
from qmdlab.terms import space_cjk
from qmdlab.store import config as cfg
from qmdlab.store.cache import LLMCache
from qmdlab.store.chunking import chunk_document
from qmdlab.store.config import Collection, Context
from qmdlab.store.frontmatter import extract_title, parse_front_matter
from qmdlab.store import limits, testhooks
from qmdlab.store.scan import DEFAULT_MAX_BYTES, SKIP_REASONS, display_path, list_files, read_text, stat_files
from qmdlab.store.schema import FTS_FUNCTION, SCHEMA, SCHEMA_VERSION, STAT_INDEX

DB_NAME = "index.sqlite"
#: Every reason a file can be left out of the index: the scanner's plus ``capacity``.
UPDATE_SKIP_REASONS = SKIP_REASONS + ("capacity",)
BUSY_TIMEOUT_S = 30
CONFIG_NAME = "collections.yaml"


def docid_of(content_hash: str) -> str:
    """qmd's short handle: the first 6 hex digits of the content hash.

    >>> docid_of("abcdef0123")
    'abcdef'
    """
    return content_hash[:6]


# Chunks already computed by ``update`` (for the capacity check), by content hash.
_PRECHUNKED: dict[str, list] = {}


class UpdateReport(NamedTuple):
    """Counts of one ``update`` (all collections together)."""

    collections: int = 0
    scanned: int = 0
    new: int = 0
    changed: int = 0
    moved: int = 0
    unchanged: int = 0
    vanished: int = 0
    chunks_added: int = 0
    skipped_binary: int = 0
    skipped_utf8: int = 0
    skipped_large: int = 0
    skipped_empty: int = 0
    skipped_symlink: int = 0
    skipped_paths: tuple[tuple[str, str], ...] = ()  # (printable docno, reason)
    skipped_unreadable: int = 0
    skipped_name: int = 0
    skipped_capacity: int = 0
    warnings: tuple[str, ...] = ()  # capacity warnings (80 % of a limit or past it)

    @property
    def skipped(self) -> int:
        return sum(getattr(self, f"skipped_{r}") for r in UPDATE_SKIP_REASONS)

    def skip_counts(self) -> dict[str, int]:
        """Non-zero skip counts by reason.

        >>> UpdateReport(skipped_binary=2, skipped_name=1).skip_counts()
        {'binary': 2, 'name': 1}
        """
        return {r: getattr(self, f"skipped_{r}") for r in UPDATE_SKIP_REASONS if getattr(self, f"skipped_{r}")}

    def summary(self) -> str:
        """One line for the CLI.

        >>> UpdateReport(collections=1, scanned=3, new=2, unchanged=1).summary()
        '1 collection(s), 3 file(s): 2 new, 0 changed, 0 moved, 1 unchanged, 0 vanished, 0 skipped; 0 chunk(s) added'
        """
        return (
            f"{self.collections} collection(s), {self.scanned} file(s): {self.new} new, {self.changed} changed, "
            f"{self.moved} moved, {self.unchanged} unchanged, {self.vanished} vanished, {self.skipped} skipped; "
            f"{self.chunks_added} chunk(s) added"
        )


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


class VectorMatrix(NamedTuple):
    """Row ``i`` is the L2-normalised vector of chunk ``chunk_ids[i]`` of ``docnos[i]``
    (a chunk shared by identical files appears once per document)."""

    chunk_ids: np.ndarray
    docnos: list[str]
    matrix: np.ndarray


@dataclass
class _Counts:
    values: dict[str, int] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def add(self, key: str, n: int = 1) -> None:
        self.values[key] = self.values.get(key, 0) + n


class Index:
    """An index directory; open it with :meth:`Index.open`."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.db_path = self.dir / DB_NAME
        self.config_path = self.dir / CONFIG_NAME
        try:
            self.conn = sqlite3.connect(self.db_path, check_same_thread=False, isolation_level=None,
                                        timeout=BUSY_TIMEOUT_S)
            self.conn.create_function(FTS_FUNCTION, 1, space_cjk, deterministic=True)
            self.conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
            self._lock = threading.RLock()
            if self._schema_version() != str(SCHEMA_VERSION):  # a new (or foreign) file: create the schema
                self.conn.execute("PRAGMA journal_mode=WAL")
                with self._lock:
                    self.conn.executescript(SCHEMA)
                    self.conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                                      (str(SCHEMA_VERSION),))
            self.conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.DatabaseError as err:
            self._close_quietly()
            raise StoreError(f"{self.db_path}: not a usable qmdlab index ({err}); pass another --index") from err
        # The cache gets its own connection: a cache write from another thread must never join
        # (and commit) an ``update`` transaction open on ``self.conn``.
        self._cache_conn = sqlite3.connect(self.db_path, check_same_thread=False, timeout=BUSY_TIMEOUT_S)
        self._cache_conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        self.cache = LLMCache(self._cache_conn)
        self._vectors: dict[str, VectorMatrix] = {}
        self._capacity: dict[str | None, tuple[tuple, list]] = {}  # fingerprint -> (limits, checks)
        self._data_version = None

    def _schema_version(self) -> str | None:
        """The stored schema version, read without taking a write lock (``None``: no schema yet)."""
        try:
            row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.OperationalError as err:
            if "no such table" in str(err):
                return None
            raise
        if row is None:
            return None
        mode = self.conn.execute("PRAGMA journal_mode").fetchone()[0]
        return row[0] if str(mode).lower() == "wal" else None

    def _close_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()

    @classmethod
    def open(cls, name_or_path: str | os.PathLike | None = None) -> "Index":
        """Open (creating if needed) the index named or located by ``name_or_path``."""
        return cls(resolve_index_dir(name_or_path))

    def close(self) -> None:
        self._cache_conn.close()
        self.conn.close()

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transactions
    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; rolled back on any exception."""
        with self._lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as err:
                if "locked" in str(err) or "busy" in str(err):
                    raise StoreError(f"index {self.dir} stayed busy for {BUSY_TIMEOUT_S} s (another qmdlab process "
                                     "is writing to it); retry when that update or embed has finished") from err
                raise
            hooks = testhooks.enabled()  # crash-harness event log (off unless $QMDLAB_TEST_EVENTS is set)
            if hooks:
                testhooks.event("begin")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                if hooks:
                    testhooks.event("rollback")
                raise
            else:
                if hooks:
                    testhooks.event("commit-start")
                self.conn.execute("COMMIT")
                if hooks:
                    testhooks.event("commit")
            finally:
                self._vectors.clear()
                self._capacity.clear()

    # ------------------------------------------------------------------ config
    def _config(self) -> cfg.Config:
        """The collections config, parsed once per version of the file.

        ``get``/``contexts_for`` run per result, so re-parsing the YAML each time dominated a
        100-query evaluation (2,000 parses). The key includes the inode because ``cfg.save``
        replaces the file atomically (a new inode even within one mtime tick), so writes by this
        or another process are always seen. Callers get a fresh ``Config`` (its lists are
        mutated before saving); the entries themselves are frozen.
        """
        try:
            st = self.config_path.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            key = None
        cached = getattr(self, "_config_cache", None)
        if cached is None or cached[0] != key:
            cached = (key, cfg.load(self.config_path))
            self._config_cache = cached
        conf = cached[1]
        return cfg.Config(list(conf.collections), list(conf.contexts))

    def collections(self) -> list[Collection]:
        return self._config().collections

    def collection(self, name: str) -> Collection:
        for c in self.collections():
            if c.name == name:
                return c
        known = ", ".join(c.name for c in self.collections()) or "none"
        raise ConfigError(f"unknown collection {name!r} (known: {known}); see `qmdlab collection list`")

    def add_collection(self, name: str, root: str | os.PathLike, mask: str = cfg.DEFAULT_MASK,
                       ignore: Sequence[str] = ()) -> Collection:
        cfg.check_name(name)
        root_path = Path(root).expanduser().resolve()
        if not root_path.is_dir():
            raise ConfigError(f"collection root {root} is not a directory; pass an existing folder")
        with self._lock:
            conf = self._config()
            if any(c.name == name for c in conf.collections):
                raise ConfigError(f"collection {name!r} exists; pick another --name or `qmdlab collection remove {name}`")
            coll = Collection(name, root_path, mask or cfg.DEFAULT_MASK, tuple(ignore))
            conf.collections.append(coll)
            cfg.save(self.config_path, conf)
        return coll

    def remove_collection(self, name: str) -> None:
        """Forget a collection: its rows, chunks and vectors go; its files are untouched."""
        self.collection(name)
        with self.transaction() as c:
            c.execute("DELETE FROM documents WHERE collection = ?", (name,))
            self._gc(c)
        with self._lock:
            conf = self._config()
            conf.collections = [x for x in conf.collections if x.name != name]
            conf.contexts = [x for x in conf.contexts if not cfg.context_matches(x.target, x.target, name)
                             or x.target.strip("/") == ""]
            cfg.save(self.config_path, conf)

    def rename_collection(self, old: str, new: str) -> None:
        self.collection(old)
        cfg.check_name(new)
        if any(c.name == new for c in self.collections()):
            raise ConfigError(f"collection {new!r} exists; pick another new name")
        with self.transaction() as c:
            c.execute("UPDATE documents SET collection = ? WHERE collection = ?", (new, old))
        with self._lock:
            conf = self._config()
            conf.collections = [Collection(new, x.root, x.mask, x.ignore) if x.name == old else x
                                for x in conf.collections]
            ctxs = []
            for x in conf.contexts:
                t = x.target.strip("/")
                if t == old or t.startswith(old + "/"):
                    ctxs.append(Context(new + t[len(old):], x.text))
                else:
                    ctxs.append(x)
            conf.contexts = ctxs
            cfg.save(self.config_path, conf)

    def add_context(self, target: str, text: str) -> None:
        """Attach ``text`` to a collection, a docno prefix (``notes/work``, or the URI
        ``qmd://notes/work``) or ``/`` (all)."""
        from qmdlab.store.refs import strip_scheme

        t = strip_scheme(target).strip("/")
        if t and t.split("/")[0] not in {c.name for c in self.collections()}:
            raise ConfigError(f"context target {target!r} names no collection; use a collection name, "
                              "'collection/path/prefix' or '/'")
        with self._lock:
            conf = self._config()
            conf.contexts = [x for x in conf.contexts if x.target.strip("/") != t] + [Context(t or "/", text)]
            cfg.save(self.config_path, conf)

    def remove_context(self, target: str) -> None:
        from qmdlab.store.refs import strip_scheme

        t = strip_scheme(target).strip("/")
        with self._lock:
            conf = self._config()
            kept = [x for x in conf.contexts if x.target.strip("/") != t]
            if len(kept) == len(conf.contexts):
                raise ConfigError(f"no context on {target!r}; see `qmdlab context list`")
            conf.contexts = kept
            cfg.save(self.config_path, conf)

    def contexts(self) -> list[Context]:
        return self._config().contexts

    def contexts_for(self, docno: str) -> list[str]:
        """Texts of every context that applies to ``docno`` (broadest first)."""
        coll = docno.split("/", 1)[0]
        hits = [c for c in self.contexts() if cfg.context_matches(c.target, docno, coll)]
        hits.sort(key=lambda c: len(c.target.strip("/")))
        return [c.text for c in hits]

    # ------------------------------------------------------------------ update
    def update(self, collections: Iterable[str] | None = None, progress: bool = False,
               max_bytes: int = DEFAULT_MAX_BYTES) -> UpdateReport:
        """Re-scan collections and bring the index in line with the files.

        Parameters
        ----------
        collections : iterable of str, optional
            Collection names (default: all).
        progress : bool
            Show a tqdm progress bar (stderr) per collection.
        max_bytes : int
            Files larger than this are skipped (``skipped_large``).

        Returns
        -------
        UpdateReport
            Counts of new, changed, moved (same bytes at a new path: chunks and vectors are
            reused), unchanged, vanished (deactivated, the row is kept) and skipped files.

        Notes
        -----
        A file is only read when its mtime or size differs from the index (then sha256 decides).
        Each collection is one transaction: an exception leaves it as it was.
        """
        names = list(collections) if collections is not None else [c.name for c in self.collections()]
        colls = [self.collection(n) for n in names]
        counts = _Counts()
        caps = {k: limits.limit(k) for k in ("documents", "chunks")}
        for coll in colls:
            if not Path(coll.root).is_dir():
                raise StoreError(f"collection {coll.name!r}: root {coll.root} is missing; restore it or "
                                 f"`qmdlab collection remove {coll.name}`")
            self._update_collection(coll, counts, progress, max_bytes, caps)
        v = counts.values
        warnings = [c.message for c in self.capacity() if c.level != "ok" and c.kind in caps]
        if v.get("skipped_capacity"):
            warnings.append(f"{v['skipped_capacity']} file(s) not indexed: the capacity limit was reached "
                            "(see `qmdlab update` skip reasons)")
        return UpdateReport(
            collections=len(colls), scanned=v.get("scanned", 0), new=v.get("new", 0), changed=v.get("changed", 0),
            moved=v.get("moved", 0), unchanged=v.get("unchanged", 0), vanished=v.get("vanished", 0),
            chunks_added=v.get("chunks", 0),
            **{f"skipped_{r}": v.get(f"skipped_{r}", 0) for r in UPDATE_SKIP_REASONS},
            skipped_paths=tuple(counts.skipped), warnings=tuple(warnings),
        )

    def _unchanged(self, coll: Collection, counts: _Counts, max_bytes: int) -> bool:
        """The stat-only fast path: ``True`` (and counted) when every file of ``coll`` is indexed
        with its current mtime and size and no indexed file vanished. One SQL read, one scandir
        walk; no file read, hashed or parsed, no write transaction. As with any stat-based check, a
        file rewritten with the same size and mtime is not noticed (``touch`` it)."""
        stats = stat_files(coll, max_bytes)
        if stats is None:  # a link, an odd name, a large file: the full path decides
            return False
        if not getattr(self, "_stat_index", False):  # an index made before documents_stat existed
            with self._lock:
                have = self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'documents_stat'").fetchone()
            if not have:
                with self.transaction() as c:
                    c.execute(STAT_INDEX)
            self._stat_index = True
        with self._lock:  # in the order of the (collection, path) index: no sort; SQLite's BINARY = str order
            known = self.conn.execute("SELECT path, mtime, size FROM documents WHERE collection = ? AND active = 1 "
                                      "ORDER BY path", (coll.name,)).fetchall()
        if known != stats:
            return False
        counts.add("scanned", len(stats))
        counts.add("unchanged", len(stats))
        return True

    def _update_collection(self, coll: Collection, counts: _Counts, progress: bool, max_bytes: int,
                           caps: dict[str, float] | None = None) -> None:
        if self._unchanged(coll, counts, max_bytes):
            return
        entries = list(list_files(coll, max_bytes))
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(entries), desc=f"update {coll.name}", unit="file", leave=False)
        local = _Counts()
        with self.transaction() as c:
            rows = c.execute("SELECT id, path, hash, mtime, size, active FROM documents WHERE collection = ?",
                             (coll.name,)).fetchall()
            caps = caps or {"documents": float("inf"), "chunks": float("inf")}
            n_docs = c.execute("SELECT count(*) FROM documents WHERE active = 1").fetchone()[0]
            n_chunks = c.execute("SELECT count(*) FROM chunks").fetchone()[0]
            existing = {r[1]: r for r in rows}
            seen: set[str] = set()
            pending: list[tuple[str, Any, str, str, dict, float, int]] = []  # new paths, decided after scan
            for e in entries:
                if bar is not None:
                    bar.update(1)
                local.add("scanned")
                if e.skip:
                    local.add(f"skipped_{e.skip}")
                    local.skipped.append((f"{coll.name}/{display_path(e.rel)}", e.skip))
                    if e.skip == "unreadable" and e.rel in existing:  # keep what we had: a transient failure
                        seen.add(e.rel)
                    continue
                old = existing.get(e.rel)
                if old is not None and old[5] == 1 and old[3] == e.mtime and old[4] == e.size:
                    seen.add(e.rel)
                    local.add("unchanged")
                    continue
                raw, text, skip = read_text(e.abs_path)
                if skip:
                    local.add(f"skipped_{skip}")
                    local.skipped.append((f"{coll.name}/{display_path(e.rel)}", skip))
                    if skip == "unreadable" and old is not None:  # keep what we had: a transient failure
                        seen.add(e.rel)
                    continue
                h = hashlib.sha256(raw).hexdigest()
                if old is not None and old[5] == 1 and old[2] == h:
                    seen.add(e.rel)
                    c.execute("UPDATE documents SET mtime = ?, size = ? WHERE id = ?", (e.mtime, e.size, old[0]))
                    local.add("unchanged")
                    continue
                known = c.execute("SELECT 1 FROM content WHERE hash = ?", (h,)).fetchone() is not None
                pieces = None if known else self._chunk(text)
                is_new_doc = old is None or old[5] != 1
                if (is_new_doc and n_docs + 1 > caps["documents"]) or (
                        pieces is not None and n_chunks + len(pieces) > caps["chunks"]):
                    local.add("skipped_capacity")
                    local.skipped.append((f"{coll.name}/{display_path(e.rel)}", "capacity"))
                    if not is_new_doc:  # a changed file keeps its indexed version
                        seen.add(e.rel)
                    continue
                seen.add(e.rel)
                n_docs += int(is_new_doc)
                if pieces is not None:
                    n_chunks += len(pieces)
                    local.add("chunks", self._store_content(c, h, text, pieces))
                meta, title, tags, date = self._describe(text, e.rel, e.mtime)
                if old is not None and old[5] == 1:
                    c.execute("UPDATE documents SET title=?, hash=?, mtime=?, size=?, metadata=?, tags=?, date=? "
                              "WHERE id=?", (title, h, e.mtime, e.size, json.dumps(meta, ensure_ascii=False),
                                             json.dumps(tags, ensure_ascii=False), date, old[0]))
                    local.add("changed")
                else:
                    pending.append((e.rel, old, h, title, {"meta": meta, "tags": tags, "date": date}, e.mtime, e.size))
                testhooks.point("update.file")
            vanished = {p: r for p, r in existing.items() if r[5] == 1 and p not in seen}
            vanished_by_hash: dict[str, list[str]] = {}
            for p, r in vanished.items():
                vanished_by_hash.setdefault(r[2], []).append(p)
            for rel, old, h, title, d, mtime, size in pending:
                outcome = "new"
                if vanished_by_hash.get(h):
                    outcome = "moved"  # same bytes, new path: chunks and vectors are reused (keyed by hash)
                    vanished_by_hash[h].pop(0)
                c.execute(
                    "INSERT INTO documents(collection, path, title, hash, mtime, size, active, metadata, tags, date) "
                    "VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?) ON CONFLICT(collection, path) DO UPDATE SET "
                    "title=excluded.title, hash=excluded.hash, mtime=excluded.mtime, size=excluded.size, active=1, "
                    "metadata=excluded.metadata, tags=excluded.tags, date=excluded.date",
                    (coll.name, rel, title, h, mtime, size, json.dumps(d["meta"], ensure_ascii=False),
                     json.dumps(d["tags"], ensure_ascii=False), d["date"]),
                )
                local.add(outcome)
                testhooks.point("update.insert")
            for p, r in vanished.items():
                c.execute("UPDATE documents SET active = 0 WHERE id = ?", (r[0],))
            local.values["vanished"] = len(vanished) - local.values.get("moved", 0)
        if bar is not None:
            bar.close()
        for k, n in local.values.items():
            counts.add(k, n)
        counts.skipped.extend(local.skipped)

    @staticmethod
    def _describe(text: str, rel: str, mtime: float) -> tuple[dict, str, list[str], str | None]:
        fm = parse_front_matter(text)
        title = extract_title(text[fm.body_offset:], fm.metadata, rel)
        tags = list(fm.metadata.get("tags") or [])
        date = fm.metadata.get("date") or _dt.datetime.fromtimestamp(mtime, _dt.timezone.utc).date().isoformat()
        return fm.metadata, title, tags, date

    def _store_content(self, c: sqlite3.Connection, h: str, text: str, chunks: list | None = None) -> int:
        """Insert content and its chunks unless present; returns the number of chunks added."""
        if c.execute("SELECT 1 FROM content WHERE hash = ?", (h,)).fetchone():
            return 0
        c.execute("INSERT INTO content(hash, body) VALUES (?, ?)", (h, text))
        if chunks is not None:
            _PRECHUNKED[h] = chunks
        try:
            return self._insert_chunks(c, h, text)
        finally:
            _PRECHUNKED.pop(h, None)

    @staticmethod
    def _chunk(text: str) -> list:
        off = parse_front_matter(text).body_offset
        return chunk_document(text[off:], offset=off, full_text=text)

    @staticmethod
    def _insert_chunks(c: sqlite3.Connection, h: str, text: str) -> int:
        chunks = _PRECHUNKED.get(h)
        if chunks is None:
            chunks = Index._chunk(text)
        c.executemany(
            "INSERT INTO chunks(hash, seq, char_start, char_end, line_start, line_end, heading_path) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(h, k.seq, k.char_start, k.char_end, k.line_start, k.line_end, k.heading_path) for k in chunks],
        )
        return len(chunks)

    @staticmethod
    def _gc(c: sqlite3.Connection) -> None:
        """Drop content, chunks and vectors no document row refers to."""
        c.execute("DELETE FROM vectors WHERE chunk_id IN (SELECT id FROM chunks WHERE hash NOT IN "
                  "(SELECT hash FROM documents))")
        c.execute("DELETE FROM chunks WHERE hash NOT IN (SELECT hash FROM documents)")
        c.execute("DELETE FROM content WHERE hash NOT IN (SELECT hash FROM documents)")

    # ------------------------------------------------------------------ reading
    def _coll_clause(self, collections: Iterable[str] | None, alias: str = "d") -> tuple[str, list[str]]:
        if collections is None:
            return "", []
        names = list(collections)
        for n in names:
            self.collection(n)
        if not names:
            return " AND 0", []
        return f" AND {alias}.collection IN ({','.join('?' * len(names))})", names

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
                f"d.tags, d.date FROM documents d WHERE d.active = 1{where} ORDER BY 1", params).fetchall()
        frame = pl.DataFrame(
            {
                "docno": [r[0] for r in rows], "docid": [docid_of(r[4]) for r in rows],
                "collection": [r[1] for r in rows], "path": [r[2] for r in rows], "title": [r[3] for r in rows],
                "hash": [r[4] for r in rows], "mtime": [float(r[5]) for r in rows], "size": [int(r[6]) for r in rows],
                "tags": [json.loads(r[7]) for r in rows], "date": [r[8] for r in rows],
            },
            schema={"docno": pl.Utf8, "docid": pl.Utf8, "collection": pl.Utf8, "path": pl.Utf8, "title": pl.Utf8,
                    "hash": pl.Utf8, "mtime": pl.Float64, "size": pl.Int64, "tags": pl.List(pl.Utf8),
                    "date": pl.Utf8},
        )
        if len(cache) > 8 or any(v[0] != version for v in cache.values()):
            cache.clear()
        cache[key] = (version, frame)
        return frame

    def _document_row(self, where: str, params: Sequence[Any]) -> list[tuple]:
        with self._lock:
            return self.conn.execute(
                "SELECT d.collection, d.path, d.title, d.hash, d.metadata, d.mtime, d.size, c.body, d.active "
                f"FROM documents d JOIN content c ON c.hash = d.hash WHERE {where}", params).fetchall()

    def _make_doc(self, r: tuple) -> Document:
        roots = {c.name: c.root for c in self.collections()}
        root = roots.get(r[0], Path("."))
        return Document(docno=f"{r[0]}/{r[1]}", docid=docid_of(r[3]), collection=r[0], path=r[1], title=r[2],
                        body=r[7], metadata=json.loads(r[4]), abs_path=Path(root) / r[1], hash=r[3],
                        mtime=r[5], size=r[6], active=bool(r[8]))

    def get(self, ref: str) -> Document:
        """A document by docno, ``qmd://collection/path`` URI, path inside a collection, absolute
        path, or ``#docid``.

        Raises :class:`StoreError` with "did you mean" suggestions on a miss, and on an ambiguous
        ``#docid`` or relative path.
        """
        from qmdlab.store.refs import strip_scheme

        ref = strip_scheme(ref)
        rows: list[tuple] = []
        if ref.startswith("#"):
            prefix = ref[1:].lower()
            if prefix:
                rows = self._document_row("d.active = 1 AND d.hash LIKE ? ORDER BY d.collection, d.path",
                                          (prefix + "%",))
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
                        rows = self._document_row("d.active = 1 AND d.collection = ? AND d.path = ?",
                                                  (c.name, p.relative_to(c.root).as_posix()))
                        if rows:
                            break
            if not rows:
                rows = self._document_row("d.active = 1 AND (d.path = ? OR d.path LIKE ?) ORDER BY d.collection, "
                                          "d.path", (ref, "%/" + ref.replace("%", "").replace("_", "\\_")))
                rows = [r for r in rows if r[1] == ref or r[1].endswith("/" + ref)]
                if len(rows) > 1:
                    names = ", ".join(f"{r[0]}/{r[1]}" for r in rows[:5])
                    raise StoreError(f"{ref!r} matches several documents ({names}); give the full docno")
        if not rows:
            raise StoreError(f"no document {ref!r}{self._suggest(ref)}")
        return self._make_doc(rows[0])

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

        sql = ("SELECT k.id, d.collection || '/' || d.path AS docno, k.seq, k.char_start, k.char_end, k.line_start, "
               "k.line_end, k.heading_path, substr(c.body, k.char_start + 1, k.char_end - k.char_start) "
               "FROM documents d JOIN chunks k ON k.hash = d.hash JOIN content c ON c.hash = d.hash "
               "WHERE d.active = 1")
        params: list[str] = []
        if docnos is not None:
            want = list(docnos)
            if not want:
                want = [""]
            sql += f" AND d.collection || '/' || d.path IN ({','.join('?' * len(want))})"
            params = want
        with self._lock:
            rows = self.conn.execute(sql + " ORDER BY docno, k.seq", params).fetchall()
        cols = ["chunk_id", "docno", "seq", "char_start", "char_end", "line_start", "line_end", "heading_path", "text"]
        types = [pl.Int64, pl.Utf8, pl.Int64, pl.Int64, pl.Int64, pl.Int64, pl.Int64, pl.Utf8, pl.Utf8]
        return pl.DataFrame({c: [r[i] for r in rows] for i, c in enumerate(cols)}, schema=dict(zip(cols, types)))

    # ------------------------------------------------------------------ vectors
    def chunks_needing_vectors(self, fingerprint: str, collections: Iterable[str] | None = None) -> pl.DataFrame:
        """Chunks of active documents with no vector for ``fingerprint``: chunk_id, docno, title, text
        (one row per chunk; a chunk shared by identical files is listed once)."""
        import polars as pl

        where, params = self._coll_clause(collections)
        with self._lock:
            rows = self.conn.execute(
                "SELECT k.id, min(d.collection || '/' || d.path), d.title, "
                "substr(c.body, k.char_start + 1, k.char_end - k.char_start) "
                "FROM documents d JOIN chunks k ON k.hash = d.hash JOIN content c ON c.hash = d.hash "
                f"WHERE d.active = 1{where} AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.chunk_id = k.id "
                "AND v.fingerprint = ?) GROUP BY k.id ORDER BY k.id", [*params, fingerprint]).fetchall()
        return pl.DataFrame({"chunk_id": [r[0] for r in rows], "docno": [r[1] for r in rows],
                             "title": [r[2] for r in rows], "text": [r[3] for r in rows]},
                            schema={"chunk_id": pl.Int64, "docno": pl.Utf8, "title": pl.Utf8, "text": pl.Utf8})

    def vector_fingerprints(self) -> dict[str, tuple[int, int]]:
        """``{fingerprint: (dim, count)}`` of the stored vectors."""
        with self._lock:
            rows = self.conn.execute("SELECT fingerprint, min(dim), max(dim), count(*) FROM vectors GROUP BY 1")
            return {r[0]: (r[1], r[3]) for r in rows}

    def store_vectors(self, chunk_ids: Sequence[int], matrix: np.ndarray, fingerprint: str) -> None:
        """Store one vector per chunk, in one transaction.

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
            ``dim`` differs from vectors already stored under ``fingerprint``.
        """
        import numpy as np

        m = np.asarray(matrix, dtype=np.float32)
        ids = [int(i) for i in chunk_ids]
        if m.ndim != 2 or m.shape[0] != len(ids):
            raise ValueError(f"matrix shape {m.shape} does not match {len(ids)} chunk ids")
        dim = int(m.shape[1])
        with self.transaction() as c:
            row = c.execute("SELECT dim FROM vectors WHERE fingerprint = ? AND dim != ? LIMIT 1",
                            (fingerprint, dim)).fetchone()
            if row is not None:
                raise DimensionMismatchError(
                    f"embedder {fingerprint!r} gives {dim}-d vectors but the index holds {row[0]}-d ones under "
                    "that fingerprint; re-embed everything with `qmdlab embed -f`")
            c.executemany("INSERT OR REPLACE INTO vectors(chunk_id, fingerprint, dim, blob) VALUES (?, ?, ?, ?)",
                          [(i, fingerprint, dim, np.ascontiguousarray(m[k]).tobytes()) for k, i in enumerate(ids)])
            testhooks.point("vectors.batch")

    def vector_matrix(self, fingerprint: str) -> VectorMatrix:
        """All vectors of active documents under ``fingerprint``, L2-normalised; loaded once and
        kept in memory until the next write. Empty (shape ``(0, 0)``) when there are none."""
        import numpy as np

        self._drop_stale_caches()
        cached = self._vectors.get(fingerprint)
        if cached is not None:
            return cached
        chk = self.vector_capacity(fingerprint)
        if chk.level == "over":
            raise limits.CapacityError(
                f"the vector matrix of {fingerprint!r} would take {chk.value:.0f} bytes, over the capacity limit "
                f"of {chk.limit:.0f} (${limits.ENV['vector_bytes']}); vector search is disabled until the limit "
                "is raised or collections are removed")
        with self._lock:
            rows = self.conn.execute(
                "SELECT k.id, d.collection || '/' || d.path, v.dim, v.blob FROM vectors v "
                "JOIN chunks k ON k.id = v.chunk_id JOIN documents d ON d.hash = k.hash "
                "WHERE v.fingerprint = ? AND d.active = 1 ORDER BY 2, k.seq", (fingerprint,)).fetchall()
        if not rows:
            vm = VectorMatrix(np.zeros(0, dtype=np.int64), [], np.zeros((0, 0), dtype=np.float32))
        else:
            dims = {r[2] for r in rows}
            if len(dims) > 1:
                raise DimensionMismatchError(f"vectors under {fingerprint!r} have mixed dimensions {sorted(dims)}; "
                                             "re-embed with `qmdlab embed -f`")
            mat = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32).reshape(len(rows), dims.pop()).copy()
            norms = np.linalg.norm(mat, axis=1, keepdims=True)
            mat /= np.where(norms == 0, 1.0, norms)
            vm = VectorMatrix(np.array([r[0] for r in rows], dtype=np.int64), [r[1] for r in rows], mat)
        self._vectors[fingerprint] = vm
        return vm

    def _drop_stale_caches(self) -> None:
        """Forget the in-memory vector matrices and capacity counts when another connection (another
        process's ``update`` or ``embed``) has committed since they were loaded."""
        with self._lock:
            version = self.conn.execute("PRAGMA data_version").fetchone()[0]
            if version != self._data_version:
                self._vectors.clear()
                self._capacity.clear()
                self._data_version = version

    def vector_capacity(self, fingerprint: str) -> "limits.Check":
        """Bytes the float32 matrix of ``fingerprint`` takes (or would take) against the limit."""
        with self._lock:
            row = self.conn.execute(
                "SELECT count(*), max(v.dim) FROM vectors v JOIN chunks k ON k.id = v.chunk_id "
                "JOIN documents d ON d.hash = k.hash WHERE v.fingerprint = ? AND d.active = 1",
                (fingerprint,)).fetchone()
        return limits.check("vector_bytes", int(row[0]) * int(row[1] or 0) * 4)

    def capacity(self, fingerprint: str | None = None) -> list["limits.Check"]:
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

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        """Counts for ``qmdlab status``."""
        with self._lock:
            per = dict(self.conn.execute(
                "SELECT collection, count(*) FROM documents WHERE active = 1 GROUP BY 1").fetchall())
            inactive = self.conn.execute("SELECT count(*) FROM documents WHERE active = 0").fetchone()[0]
            nchunks = self.conn.execute(
                "SELECT count(DISTINCT k.id) FROM chunks k JOIN documents d ON d.hash = k.hash "
                "WHERE d.active = 1").fetchone()[0]
        return {
            "index": str(self.dir),
            "collections": [{"name": c.name, "root": str(c.root), "mask": c.mask, "documents": per.get(c.name, 0)}
                            for c in self.collections()],
            "documents": sum(per.values()),
            "inactive_documents": inactive,
            "chunks": nchunks,
            "vectors": {fp: {"dim": d, "count": n} for fp, (d, n) in self.vector_fingerprints().items()},
            "llm_cache_entries": self.cache.count(),
        }

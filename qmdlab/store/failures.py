"""What a failing index or disk means to the user: one line naming the file and the fix.

SQLite reports a damaged file, a full disk, a read-only file and a vanished WAL as
:class:`sqlite3.DatabaseError` subclasses with terse messages, and the operating system reports
a full disk while writing ``collections.yaml`` as :class:`OSError`. :func:`as_user_error` maps
each to a :class:`~qmdlab.errors.StoreError` whose message says what happened to which file and
what to do; anything else gives ``None`` (a bug: the caller lets it propagate).

- damage (``database disk image is malformed``, ``file is not a database``, undecodable text,
  ``disk I/O error`` …): the index can be rebuilt from its collections — remove the database
  file (``collections.yaml`` beside it is kept) and run ``qmdlab update`` and ``qmdlab embed``;
- a full disk (``SQLITE_FULL``, ``ENOSPC``): the free space there and the space an index write
  may need (about the database's size: ``VACUUM`` and the WAL can take that much); nothing was
  changed, the write can be retried once space is freed;
- a read-only file or folder: which one, and that readers still work.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
from pathlib import Path

from qmdlab.errors import QmdlabError, StoreError

_FULL = ("database or disk is full", "disk is full")
_READ_ONLY = ("readonly database", "read-only", "attempt to write a readonly")
_BUSY = ("database is locked", "database table is locked", "busy")
# Limits of SQLite's statements, not damage: a search built from too much input.
_TOO_LARGE = (
    "expression tree is too large",
    "too many sql variables",
    "too many terms",
    "string or blob too big",
    "too many columns",
    "parser stack overflow",
)


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _brief(detail: str, limit: int = 120) -> str:
    """SQLite's complaint on one short line (an undecodable column's message quotes the text).

    >>> _brief("Could not decode to UTF-8 column 'body' with text '# Note\\n\\nlong'")
    "Could not decode to UTF-8 column 'body'"
    """
    detail = detail.split(" with text '", 1)[0]
    detail = " ".join(detail.split())
    return detail if len(detail) <= limit else detail[: limit - 1] + "…"


def damaged_message(db_path: str | os.PathLike, detail: str) -> str:
    """The one line for a damaged (or foreign) database file.

    >>> damaged_message("/i/index.sqlite", "database disk image is malformed")  # doctest: +NORMALIZE_WHITESPACE
    '/i/index.sqlite: not a usable qmdlab index (database disk image is malformed); pass another --index, or
    rebuild this one from its collections: remove /i/index.sqlite (and any index.sqlite-wal, -shm beside it;
    collections.yaml is kept), then run `qmdlab update` and `qmdlab embed`'
    """
    name = Path(db_path).name
    if wal_deleted_under_a_process(db_path):
        return wal_deleted_message(db_path, detail)
    return (
        f"{db_path}: not a usable qmdlab index ({_brief(detail)}); pass another --index, or rebuild this one from its "
        f"collections: remove {db_path} (and any {name}-wal, -shm beside it; collections.yaml is kept), then run "
        "`qmdlab update` and `qmdlab embed`"
    )


def wal_deleted_under_a_process(db_path: str | os.PathLike) -> bool:
    """Is the index's write-ahead log gone (or emptied: the next process to open the index makes a
    new, empty one) while the shared-memory file beside it still counts frames in it? Then a
    process still has the index open with the deleted log (the last one to close removes both):
    SQLite answers every other process "disk I/O error", and the database itself is sound."""
    import struct

    db = str(db_path)
    try:
        with open(db + "-shm", "rb") as f:
            head = f.read(48)
        wal_size = os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0
    except OSError:
        return False
    if len(head) < 48 or wal_size >= 32:
        return False
    max_frame = struct.unpack_from("=I", head, 16)[0]  # WalIndexHdr.mxFrame, native byte order
    return max_frame > 0 and os.path.exists(db)


def wal_deleted_message(db_path: str | os.PathLike, detail: str = "disk I/O error") -> str:
    """The one line for a write-ahead log deleted under a running process: stop that process, do
    not remove the index (closing it writes its last commits back from the log it still holds).

    >>> wal_deleted_message("/i/index.sqlite")  # doctest: +NORMALIZE_WHITESPACE
    '/i/index.sqlite: the index is in use by another process and its write-ahead log index.sqlite-wal was
    deleted (disk I/O error); stop that process — a running `qmdlab mcp` server: `qmdlab mcp --stop` — and
    run the command again. Do not remove the index: the process still holds its last changes and writes
    them back when it stops'
    """
    name = Path(db_path).name
    return (
        f"{db_path}: the index is in use by another process and its write-ahead log {name}-wal was deleted "
        f"({_brief(detail)}); stop that process — a running `qmdlab mcp` server: `qmdlab mcp --stop` — and run "
        "the command again. Do not remove the index: the process still holds its last changes and writes them "
        "back when it stops"
    )


def disk_full_message(path: str | os.PathLike, needed: int | None = None) -> str:
    """The one line for a write that ran out of space on ``path``'s file system."""
    where = Path(path)
    folder = where if where.is_dir() else where.parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        free = None
    if needed is None:
        try:
            needed = sum(os.path.getsize(p) for p in (str(where), str(where) + "-wal") if os.path.exists(p))
        except OSError:
            needed = None
    have = f"{_mib(free)} free" if free is not None else "no free space"
    want = f"; an index write may need up to about {_mib(max(needed, 1 << 20))} more" if needed else ""
    return (
        f"{where}: the disk is full ({have} on {folder}{want}); nothing was changed — free some space "
        "(or move the index elsewhere with --index) and run the command again"
    )


def after_committed(message: str, kept: str) -> str:
    """A failure's one line when earlier transactions of the same command had committed: the
    failing one was rolled back, the earlier ones are kept ("nothing was changed" would be false).

    >>> after_committed("/i: the disk is full (1.0 MiB free); nothing was changed — free some space", "80 vector(s)")
    '/i: the disk is full (1.0 MiB free); the failing write was rolled back, the 80 vector(s) before it are kept — free some space'
    >>> after_committed("/i: not a usable qmdlab index (x)", "80 vector(s)")
    '/i: not a usable qmdlab index (x) (the 80 vector(s) written before this failure are kept)'
    """
    if "nothing was changed" in message:
        return message.replace(
            "nothing was changed", f"the failing write was rolled back, the {kept} before it are kept"
        )
    return f"{message} (the {kept} written before this failure are kept)"


def read_only_message(path: str | os.PathLike) -> str:
    return (
        f"{path}: the index is read-only here (file or folder permissions, or a read-only file system); "
        "reading verbs still work — make it writable, or copy the index to a writable --index, to update it"
    )


def _db_path(where: object) -> Path | None:
    """The database file of ``where``: an :class:`~qmdlab.store.Index`, an index directory or name."""
    if where is None:
        return None
    db = getattr(where, "db_path", None)
    if db is not None:
        return Path(db)
    if not isinstance(where, (str, os.PathLike)):
        return None
    from qmdlab.paths import DB_NAME, resolve_index_dir

    try:
        return resolve_index_dir(where if where != "" else None) / DB_NAME
    except (OSError, ValueError):
        return None


def as_user_error(err: BaseException, where: object = None) -> QmdlabError | None:
    """The :class:`StoreError` that explains ``err``, or ``None`` when ``err`` is not a storage
    failure. ``where`` names the index (an :class:`Index`, its directory or its name)."""
    if isinstance(err, QmdlabError):
        return err
    if isinstance(err, UnicodeEncodeError) and "surrogates not allowed" in str(err):
        return QmdlabError(
            f"an argument holds bytes that are not UTF-8 ({_brief(repr(err.object[err.start : err.end]))}"
            " cannot be encoded); pass the text as UTF-8"
        )
    if isinstance(err, OverflowError):
        return QmdlabError(f"a number given is too large ({_brief(str(err))}); use a smaller one")
    if isinstance(err, sqlite3.DatabaseError):
        text = str(err)
        low = text.lower()
        db = _db_path(where) or Path("index.sqlite")
        if any(s in low for s in _FULL):
            return StoreError(disk_full_message(db))
        if any(s in low for s in _READ_ONLY):
            return StoreError(read_only_message(db))
        if any(s in low for s in _TOO_LARGE):
            return StoreError(
                f"the search is too large for SQLite ({_brief(text)}); use fewer terms, tags or collections"
            )
        if any(s in low for s in _BUSY):
            return StoreError(
                f"{db}: the index stayed busy (another qmdlab process is writing to it); retry when "
                "that update or embed has finished"
            )
        return StoreError(damaged_message(db, text))
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreError(disk_full_message(err.filename or _db_path(where) or "."))
    if isinstance(err, OSError) and err.errno == errno.EROFS:
        return StoreError(read_only_message(err.filename or _db_path(where) or "."))
    return None


def quick_check(conn: sqlite3.Connection) -> str | None:
    """``None`` when ``PRAGMA quick_check`` finds the database sound, else its first complaint.

    ``quick_check`` does not compare an index with its table: a damaged index (a ``UNIQUE``
    index that lost entries) passes it, and writes through it then store duplicates. Writers
    use :func:`integrity_check`."""
    return _pragma_check(conn, "quick_check")


def integrity_check(conn: sqlite3.Connection) -> str | None:
    """``None`` when ``PRAGMA integrity_check`` finds the database sound, else its first
    complaint: everything ``quick_check`` checks, plus every index against its table (a row
    missing from an index, a ``UNIQUE`` index holding duplicates)."""
    return _pragma_check(conn, "integrity_check")


def _pragma_check(conn: sqlite3.Connection, pragma: str) -> str | None:
    try:
        rows = conn.execute(f"PRAGMA {pragma}(1)").fetchall()
    except sqlite3.DatabaseError as err:
        return str(err)
    first = rows[0][0] if rows else "no answer"
    return None if first == "ok" else str(first)


__all__ = [
    "after_committed",
    "as_user_error",
    "damaged_message",
    "disk_full_message",
    "integrity_check",
    "quick_check",
    "read_only_message",
    "wal_deleted_message",
]

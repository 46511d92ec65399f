"""``update``: bring an index in line with its collections' files.

One write transaction per collection; a file is read only when its mtime or size changed (then
sha256 decides between unchanged, changed and moved). Scanning is :mod:`qmdlab.store.scan`,
content and chunks :mod:`qmdlab.store.content`. :class:`UpdateMixin` is one part of
:class:`~qmdlab.store.Index`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from qmdlab.errors import StoreError
from qmdlab.store import limits, schema, testhooks
from qmdlab.store.base import IndexBase
from qmdlab.store.config import Collection
from qmdlab.store.frontmatter import FrontMatter, extract_title, parse_front_matter
from qmdlab.store.scan import (
    DEFAULT_MAX_BYTES,
    SKIP_REASONS,
    display_path,
    list_files,
    read_file,
    stat_digest,
    stat_files,
)

#: Every reason a file can be left out of the index: the scanner's, ``capacity`` and
#: ``frontmatter`` (front matter over a parser limit of :mod:`qmdlab.store.limits`).
UPDATE_SKIP_REASONS = SKIP_REASONS + ("capacity", "frontmatter")
#: ``update`` refuses to let more than half of a collection's indexed files vanish at once when at
#: least this many would (and always when all would), unless told ``allow_vanish``.
VANISH_GUARD_MIN = 10
# A collection's active (path, mtime, size) in path order: what the stat-only check compares.
_STAT_ROWS = "SELECT path, mtime, size FROM documents WHERE collection = ? AND active = 1 ORDER BY path"


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
    skipped_frontmatter: int = 0
    skip_details: tuple[tuple[str, str], ...] = ()  # (printable docno, what exactly) where a reason has more to say

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
class _Counts:
    values: dict[str, int] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    details: list[tuple[str, str]] = field(default_factory=list)

    def add(self, key: str, n: int = 1) -> None:
        self.values[key] = self.values.get(key, 0) + n


class UpdateMixin(IndexBase):
    """Scanning collections and writing what changed."""

    def update(
        self,
        collections: Iterable[str] | None = None,
        progress: bool = False,
        max_bytes: int = DEFAULT_MAX_BYTES,
        allow_vanish: bool = False,
    ) -> UpdateReport:
        """Re-scan collections and bring the index in line with the files.

        Parameters
        ----------
        collections : iterable of str, optional
            Collection names (default: all).
        progress : bool
            Show a tqdm progress bar (stderr) per collection.
        max_bytes : int
            Files larger than this are skipped (``skipped_large``).
        allow_vanish : bool
            Let the files of a collection vanish wholesale (see Notes).

        Returns
        -------
        UpdateReport
            Counts of new, changed, moved (same bytes at a new path: chunks and vectors are
            reused), unchanged, vanished (deactivated, the row is kept) and skipped files.

        Notes
        -----
        A file is only read when its mtime or size differs from the index (then sha256 decides).
        Each collection is one transaction: an exception leaves it as it was. Chunks stored by
        another chunker (or an older version of this one) are re-chunked first
        (:meth:`~qmdlab.store.content.ContentMixin.ensure_chunker`).

        A folder that cannot be read is reported as skipped (``unreadable``, its path ending in
        ``/``) and the documents indexed under it are kept as they are. A collection root that
        cannot be read is refused with a :class:`StoreError`, and so, unless ``allow_vanish``, is
        a collection whose indexed files vanish wholesale: none left, or fewer than half as many
        as indexed with at least :data:`VANISH_GUARD_MIN` gone (an unmounted or emptied folder).
        Nothing is changed then.
        """
        names = list(collections) if collections is not None else [c.name for c in self.collections()]
        colls = [self.collection(n) for n in names]
        from qmdlab.store.trust import check_roots

        check_roots(self.dir, self.config_path, colls)  # a project's roots outside it: approved, or nothing changes
        self.ensure_chunker(progress=progress)  # stored chunks of another chunker (or version): re-chunk first
        counts = _Counts()
        caps = {k: limits.limit(k) for k in ("documents", "chunks")}
        for coll in colls:
            if not Path(coll.root).is_dir():
                raise StoreError(
                    f"collection {coll.name!r}: root {coll.root} is missing; restore it or "
                    f"`qmdlab collection remove {coll.name}`"
                )
            self._update_collection(coll, counts, progress, max_bytes, caps, allow_vanish)
        v = counts.values
        warnings = [c.message for c in self.capacity() if c.level != "ok" and c.kind in caps]
        if v.get("skipped_capacity"):
            warnings.append(
                f"{v['skipped_capacity']} file(s) not indexed: the capacity limit was reached "
                "(see `qmdlab update` skip reasons)"
            )
        return UpdateReport(
            collections=len(colls),
            scanned=v.get("scanned", 0),
            new=v.get("new", 0),
            changed=v.get("changed", 0),
            moved=v.get("moved", 0),
            unchanged=v.get("unchanged", 0),
            vanished=v.get("vanished", 0),
            chunks_added=v.get("chunks", 0),
            **{f"skipped_{r}": v.get(f"skipped_{r}", 0) for r in UPDATE_SKIP_REASONS},
            skipped_paths=tuple(counts.skipped),
            skip_details=tuple(counts.details),
            warnings=tuple(warnings),
        )

    def _unchanged(self, coll: Collection, counts: _Counts, max_bytes: int) -> bool:
        """The stat-only fast path: ``True`` (and counted) when every file of ``coll`` is indexed
        with its current mtime and size and no indexed file vanished. One scandir walk and one
        digest compared with the one stored by the last ``update`` (``stat_digest``; when a
        write since removed it, the rows themselves, and the digest is stored again); no file
        read, hashed or parsed, no write transaction. As with any stat-based check, a file
        rewritten with the same size and mtime is not noticed (``touch`` it)."""
        if not getattr(self, "_stat_index", False):  # an index made before documents_stat/stat_digest existed
            with self._lock:
                have = schema.has_stat_index(self.conn)
            if not have:
                with self.transaction() as c:
                    for sql in (schema.STAT_INDEX, *schema.STAT_DIGEST):
                        c.execute(sql)
            self._stat_index = True
        stats = stat_files(coll, max_bytes)
        if stats is None:  # a link, an odd name, a large file: the full path decides
            return False
        digest = stat_digest(stats)
        with self._lock:
            row = self.conn.execute("SELECT digest FROM stat_digest WHERE collection = ?", (coll.name,)).fetchone()
        if row is None:  # no digest (removed by a write since, or an older index): compare the rows
            with self._lock:  # in the order of the (collection, path) index: no sort; SQLite's BINARY = str order
                known = self.conn.execute(_STAT_ROWS, (coll.name,)).fetchall()
            if known != stats:
                return False
            with self.transaction() as c:  # once, re-read under the write lock: the next check reads one row
                if c.execute(_STAT_ROWS, (coll.name,)).fetchall() != stats:
                    return False
                c.execute("INSERT OR REPLACE INTO stat_digest(collection, digest) VALUES (?, ?)", (coll.name, digest))
        elif row[0] != digest:
            return False
        counts.add("scanned", len(stats))
        counts.add("unchanged", len(stats))
        return True

    def _update_collection(
        self,
        coll: Collection,
        counts: _Counts,
        progress: bool,
        max_bytes: int,
        caps: dict[str, float] | None = None,
        allow_vanish: bool = False,
    ) -> None:
        if self._unchanged(coll, counts, max_bytes):
            return
        unreadable: list[str] = []
        entries = list(list_files(coll, max_bytes, unreadable))
        if "" in unreadable:
            raise StoreError(
                f"collection {coll.name!r}: root {coll.root} cannot be read; fix its permissions (nothing was changed)"
            )
        kept_dirs = tuple(unreadable)
        real_root = os.path.realpath(coll.root)  # every file read must lie under it (read_file)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(entries), desc=f"update {coll.name}", unit="file", leave=False)
        local = _Counts()
        for d in unreadable:
            local.add("skipped_unreadable")
            local.skipped.append((f"{coll.name}/{display_path(d)}", "unreadable"))
        with self.transaction(label=f"update:{coll.name}") as c:
            rows = c.execute(
                "SELECT id, path, hash, mtime, size, active FROM documents WHERE collection = ?", (coll.name,)
            ).fetchall()
            caps = caps or {"documents": float("inf"), "chunks": float("inf")}
            n_docs = c.execute("SELECT count(*) FROM documents WHERE active = 1").fetchone()[0]
            n_chunks = c.execute("SELECT count(*) FROM chunks").fetchone()[0]
            existing = {r[1]: r for r in rows}
            seen: set[str] = {p for p in existing if kept_dirs and p.startswith(kept_dirs)}  # under unreadable folders
            if not allow_vanish:
                self._check_vanish(coll, existing, seen, {e.rel for e in entries})
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
                # Opened safely and checked after opening: a folder swapped for a link since the scan
                # cannot bring in a file from outside the root; the date and size stored are those
                # of the bytes read, not the scan's.
                got = read_file(e.abs_path, real_root, max_bytes=max_bytes)
                raw, text, skip = got.raw, got.text, got.skip
                if skip:
                    local.add(f"skipped_{skip}")
                    local.skipped.append((f"{coll.name}/{display_path(e.rel)}", skip))
                    if skip == "unreadable" and old is not None:  # keep what we had: a transient failure
                        seen.add(e.rel)
                    continue
                assert text is not None  # read_file gives the text whenever it gives no skip reason
                h = hashlib.sha256(raw).hexdigest()
                if old is not None and old[5] == 1 and old[2] == h:
                    seen.add(e.rel)
                    c.execute("UPDATE documents SET mtime = ?, size = ? WHERE id = ?", (got.mtime, got.size, old[0]))
                    local.add("unchanged")
                    continue
                fm = parse_front_matter(text)
                if fm.problem is not None:  # over a parser limit: skipped, never a stalled update
                    docno = f"{coll.name}/{display_path(e.rel)}"
                    local.add("skipped_frontmatter")
                    local.skipped.append((docno, "frontmatter"))
                    local.details.append((docno, fm.problem))
                    continue
                known = c.execute("SELECT 1 FROM content WHERE hash = ?", (h,)).fetchone() is not None
                pieces = None if known else self._chunk(text)
                is_new_doc = old is None or old[5] != 1
                if (is_new_doc and n_docs + 1 > caps["documents"]) or (
                    pieces is not None and n_chunks + len(pieces) > caps["chunks"]
                ):
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
                meta, title, tags, date = self._describe(text, e.rel, got.mtime, fm)
                if old is not None and old[5] == 1:
                    c.execute(
                        "UPDATE documents SET title=?, hash=?, mtime=?, size=?, metadata=?, tags=?, date=? WHERE id=?",
                        (
                            title,
                            h,
                            got.mtime,
                            got.size,
                            json.dumps(meta, ensure_ascii=False),
                            json.dumps(tags, ensure_ascii=False),
                            date,
                            old[0],
                        ),
                    )
                    local.add("changed")
                else:
                    pending.append(
                        (e.rel, old, h, title, {"meta": meta, "tags": tags, "date": date}, got.mtime, got.size)
                    )
                testhooks.point("update.file")
            vanished = {p: r for p, r in existing.items() if r[5] == 1 and p not in seen}
            vanished_by_hash: dict[str, list[str]] = {}
            for p, r in vanished.items():
                vanished_by_hash.setdefault(r[2], []).append(p)
            for rel, old, h, title, described, mtime, size in pending:
                outcome = "new"
                if vanished_by_hash.get(h):
                    outcome = "moved"  # same bytes, new path: chunks and vectors are reused (keyed by hash)
                    vanished_by_hash[h].pop(0)
                c.execute(
                    "INSERT INTO documents(collection, path, title, hash, mtime, size, active, metadata, tags, date) "
                    "VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?) ON CONFLICT(collection, path) DO UPDATE SET "
                    "title=excluded.title, hash=excluded.hash, mtime=excluded.mtime, size=excluded.size, active=1, "
                    "metadata=excluded.metadata, tags=excluded.tags, date=excluded.date",
                    (
                        coll.name,
                        rel,
                        title,
                        h,
                        mtime,
                        size,
                        json.dumps(described["meta"], ensure_ascii=False),
                        json.dumps(described["tags"], ensure_ascii=False),
                        described["date"],
                    ),
                )
                local.add(outcome)
                testhooks.point("update.insert")
            for p, r in vanished.items():
                c.execute("UPDATE documents SET active = 0 WHERE id = ?", (r[0],))
            local.values["vanished"] = len(vanished) - local.values.get("moved", 0)
            # the digest of the rows as this transaction leaves them (the triggers removed the old one)
            c.execute(
                "INSERT OR REPLACE INTO stat_digest(collection, digest) VALUES (?, ?)",
                (coll.name, stat_digest(c.execute(_STAT_ROWS, (coll.name,)).fetchall())),
            )
        if bar is not None:
            bar.close()
        for k, n in local.values.items():
            counts.add(k, n)
        counts.skipped.extend(local.skipped)
        counts.details.extend(local.details)

    @staticmethod
    def _check_vanish(coll: Collection, existing: dict[str, tuple], kept: set[str], present: set[str]) -> None:
        """Refuse an ``update`` after which ``coll`` would hold no file, or fewer than half as many
        as are indexed (with at least :data:`VANISH_GUARD_MIN` gone): a folder unmounted or
        emptied, not notes deleted one by one (moves keep the count, so they pass)."""
        active = [p for p, r in existing.items() if r[5] == 1]
        gone = sum(1 for p in active if p not in present and p not in kept)
        after = len(present | kept)
        if gone and (after == 0 or (gone >= VANISH_GUARD_MIN and 2 * after < len(active))):
            raise StoreError(
                f"collection {coll.name!r}: {gone} of its {len(active)} indexed file(s) are gone from {coll.root} "
                f"and {after} remain (an unmounted or emptied folder?); nothing was changed. If they were removed "
                "on purpose, run `qmdlab update --allow-vanish`"
            )

    @staticmethod
    def _describe(
        text: str, rel: str, mtime: float, fm: FrontMatter | None = None
    ) -> tuple[dict, str, list[str], str | None]:
        fm = parse_front_matter(text) if fm is None else fm
        title = extract_title(text[fm.body_offset :], fm.metadata, rel)
        tags = list(fm.metadata.get("tags") or [])
        date = fm.metadata.get("date") or _dt.datetime.fromtimestamp(mtime, _dt.timezone.utc).date().isoformat()
        return fm.metadata, title, tags, date

"""Content-addressed file text and its chunks: insert once per sha256, drop what nothing uses.

A document row points at ``content(hash)``; chunks are keyed by that hash, so a moved or
duplicated file is never re-chunked or re-embedded. :class:`ContentMixin` is one part of
:class:`~qmdlab.store.Index`; its methods run inside a write transaction (``c``).
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from qmdlab.store.base import IndexBase
from qmdlab.store.chunkers import DEFAULT_CHUNKER, LEGACY_FINGERPRINT, check_chunker, chunker_fingerprint
from qmdlab.store.chunking import chunk_document
from qmdlab.store.frontmatter import parse_front_matter
from qmdlab.store.schema import next_chunk_id

# Chunks already computed by ``update`` (for the capacity check), by content hash.
_PRECHUNKED: dict[str, list] = {}


def chunk_text(text: str, chunker: str = DEFAULT_CHUNKER) -> list:
    """The chunks of one file's text (front matter excluded, offsets into the whole text)."""
    off = parse_front_matter(text).body_offset
    return chunk_document(text[off:], offset=off, full_text=text, chunker=chunker)


class RechunkReport(NamedTuple):
    """What :meth:`ContentMixin.rechunk` did.

    ``kept``: chunks whose span did not change (their vectors are kept); ``replaced``/``added``/
    ``removed``: chunk rows rewritten, new and dropped (with their vectors: ``vectors_dropped``).
    """

    chunker: str
    fingerprint: str
    previous: str
    contents: int = 0
    kept: int = 0
    replaced: int = 0
    added: int = 0
    removed: int = 0
    vectors_dropped: int = 0

    @property
    def changed(self) -> bool:
        return self.previous != self.fingerprint

    def summary(self) -> str:
        """One line for the CLI.

        >>> RechunkReport("headings", "headings/v1", "breakpoints/v2", 3, 1, 2, 4, 0, 5).summary()
        're-chunked 3 file(s) with headings (was breakpoints/v2): 1 chunk(s) kept, 2 replaced, 4 added, 0 removed; 5 vector(s) dropped (`qmdlab embed` re-embeds them)'
        """
        return (
            f"re-chunked {self.contents} file(s) with {self.chunker} (was {self.previous}): {self.kept} chunk(s) "
            f"kept, {self.replaced} replaced, {self.added} added, {self.removed} removed; "
            f"{self.vectors_dropped} vector(s) dropped (`qmdlab embed` re-embeds them)"
        )


class ContentMixin(IndexBase):
    """Writing content and chunks, and garbage-collecting them."""

    def _store_content(self, c: sqlite3.Connection, h: str, text: str, chunks: list | None = None) -> int:
        """Insert content and its chunks unless present; returns the number of chunks added."""
        if c.execute("SELECT 1 FROM content WHERE hash = ?", (h,)).fetchone():
            return 0
        c.execute("INSERT INTO content(hash, body) VALUES (?, ?)", (h, text))
        _PRECHUNKED[h] = chunks if chunks is not None else self._chunk(text)  # with the index's chunker
        try:
            return self._insert_chunks(c, h, text)
        finally:
            _PRECHUNKED.pop(h, None)

    def _chunk(self, text: str) -> list:
        return chunk_text(text, self.chunker)

    @staticmethod
    def _insert_chunks(c: sqlite3.Connection, h: str, text: str) -> int:
        chunks = _PRECHUNKED.get(h)
        if chunks is None:  # only when called directly: the default chunker
            chunks = chunk_text(text)
        if not chunks:
            return 0
        first = next_chunk_id(c, len(chunks))
        c.executemany(
            "INSERT INTO chunks(id, hash, seq, char_start, char_end, line_start, line_end, heading_path) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (first + i, h, k.seq, k.char_start, k.char_end, k.line_start, k.line_end, k.heading_path)
                for i, k in enumerate(chunks)
            ],
        )
        return len(chunks)

    @staticmethod
    def _gc(c: sqlite3.Connection) -> None:
        """Drop content, chunks and vectors no document row refers to."""
        c.execute(
            "DELETE FROM vectors WHERE chunk_id IN (SELECT id FROM chunks WHERE hash NOT IN "
            "(SELECT hash FROM documents))"
        )
        c.execute("DELETE FROM chunks WHERE hash NOT IN (SELECT hash FROM documents)")
        c.execute("DELETE FROM content WHERE hash NOT IN (SELECT hash FROM documents)")

    # -- the chunker setting (index level: ``meta.chunker`` and ``meta.chunker_fingerprint``) ----------
    def _meta(self, key: str) -> str | None:
        with self._lock:
            row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    @property
    def chunker(self) -> str:
        """The index's chunking strategy (:mod:`qmdlab.store.chunkers`; ``breakpoints`` unless set)."""
        return self._meta("chunker") or DEFAULT_CHUNKER

    def stored_chunker_fingerprint(self) -> str:
        """The fingerprint of the strategy the stored chunks were made with (an index holding chunks
        from before the setting existed: :data:`~qmdlab.store.chunkers.LEGACY_FINGERPRINT`)."""
        fp = self._meta("chunker_fingerprint")
        if fp is not None:
            return fp
        with self._lock:
            any_chunk = self.conn.execute("SELECT 1 FROM chunks LIMIT 1").fetchone()
        return LEGACY_FINGERPRINT if any_chunk else chunker_fingerprint(self.chunker)

    def set_chunker(self, name: str, *, progress: bool = False) -> RechunkReport:
        """Make ``name`` the index's chunker and re-chunk what it changes (see :meth:`rechunk`)."""
        check_chunker(name)
        if name != self.chunker:
            with self.transaction() as c:
                c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('chunker', ?)", (name,))
        return self.ensure_chunker(progress=progress)

    def ensure_chunker(self, *, progress: bool = False) -> RechunkReport:
        """Re-chunk when the stored chunks' fingerprint is not the current chunker's (a changed
        setting, a new strategy version, an index older than the setting); else nothing."""
        want, have = chunker_fingerprint(self.chunker), self.stored_chunker_fingerprint()
        if want == have:
            if self._meta("chunker_fingerprint") is None:
                with self.transaction() as c:
                    c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('chunker_fingerprint', ?)", (want,))
            return RechunkReport(self.chunker, want, have)
        return self.rechunk(progress=progress)

    def rechunk(self, *, progress: bool = False) -> RechunkReport:
        """Chunk every stored text again with the index's chunker, in one transaction.

        A chunk whose ``(seq, char_start, char_end)`` is unchanged keeps its row and its vectors
        (only its lines and heading path are refreshed); every other chunk row is replaced and its
        vectors are dropped, so ``qmdlab embed`` re-embeds exactly the changed chunks and no vector
        of an old chunk is ever paired with a new one. The capacity limits are not checked here.
        """
        name = self.chunker
        want, have = chunker_fingerprint(name), self.stored_chunker_fingerprint()
        counts = dict(contents=0, kept=0, replaced=0, added=0, removed=0, vectors_dropped=0)
        with self.transaction() as c:
            hashes = [r[0] for r in c.execute("SELECT hash FROM content ORDER BY hash").fetchall()]
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=len(hashes), desc=f"re-chunk ({name})", unit="file", leave=False)
            for h in hashes:
                body = c.execute("SELECT body FROM content WHERE hash = ?", (h,)).fetchone()[0]
                old = {
                    r[1]: r
                    for r in c.execute(
                        "SELECT id, seq, char_start, char_end, line_start, line_end, heading_path FROM chunks "
                        "WHERE hash = ?",
                        (h,),
                    ).fetchall()
                }
                new = chunk_text(body, name)
                touched = False
                drop = [
                    o[0]
                    for seq, o in old.items()
                    if seq >= len(new) or (o[2], o[3]) != (new[seq].char_start, new[seq].char_end)
                ]
                for cid in drop:
                    counts["vectors_dropped"] += c.execute("DELETE FROM vectors WHERE chunk_id = ?", (cid,)).rowcount
                    c.execute("DELETE FROM chunks WHERE id = ?", (cid,))
                dropped = set(drop)
                for k in new:
                    o = old.get(k.seq)
                    if o is not None and o[0] not in dropped:
                        counts["kept"] += 1
                        if (o[4], o[5], o[6]) != (k.line_start, k.line_end, k.heading_path):
                            c.execute(
                                "UPDATE chunks SET line_start = ?, line_end = ?, heading_path = ? WHERE id = ?",
                                (k.line_start, k.line_end, k.heading_path, o[0]),
                            )
                        continue
                    touched = True
                    counts["replaced" if o is not None else "added"] += 1
                    c.execute(
                        "INSERT INTO chunks(id, hash, seq, char_start, char_end, line_start, line_end, "
                        "heading_path) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            next_chunk_id(c, 1),
                            h,
                            k.seq,
                            k.char_start,
                            k.char_end,
                            k.line_start,
                            k.line_end,
                            k.heading_path,
                        ),
                    )
                removed = sum(1 for seq in old if seq >= len(new))
                counts["removed"] += removed
                counts["contents"] += int(touched or removed > 0)
                if bar is not None:
                    bar.update(1)
            if bar is not None:
                bar.close()
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('chunker_fingerprint', ?)", (want,))
        return RechunkReport(name, want, have, **counts)

"""Content-addressed file text and its chunks: insert once per sha256, drop what nothing uses.

A document row points at ``content(hash)``; chunks are keyed by that hash, so a moved or
duplicated file is never re-chunked or re-embedded. :class:`ContentMixin` is one part of
:class:`~qmdlab.store.Index`; its methods run inside a write transaction (``c``).
"""
from __future__ import annotations

import sqlite3

from qmdlab.store.chunking import chunk_document
from qmdlab.store.frontmatter import parse_front_matter

# Chunks already computed by ``update`` (for the capacity check), by content hash.
_PRECHUNKED: dict[str, list] = {}


def chunk_text(text: str) -> list:
    """The chunks of one file's text (front matter excluded, offsets into the whole text)."""
    off = parse_front_matter(text).body_offset
    return chunk_document(text[off:], offset=off, full_text=text)


class ContentMixin:
    """Writing content and chunks, and garbage-collecting them."""

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
        return chunk_text(text)

    @staticmethod
    def _insert_chunks(c: sqlite3.Connection, h: str, text: str) -> int:
        chunks = _PRECHUNKED.get(h)
        if chunks is None:
            chunks = chunk_text(text)
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

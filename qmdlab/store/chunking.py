"""A document → addressed chunks, with the chunker the index is set to.

The driver above both chunking modules: :mod:`qmdlab.store.chunkers` picks the strategy's spans
(its ``headings`` and ``fences-and-tables`` cut long pieces with qmd's break points) and
:mod:`qmdlab.store.breakpoints` is qmd's chunker itself; this module turns spans into
:class:`Chunk` values with lines and heading paths.
"""

from __future__ import annotations

from typing import NamedTuple

from qmdlab.store.breakpoints import (
    CHUNK_OVERLAP_CHARS,
    CHUNK_SIZE_CHARS,
    CHUNK_WINDOW_CHARS,
    chunk_spans,
    heading_paths,
)
from qmdlab.store.chunkers import spans


class Chunk(NamedTuple):
    """One chunk: ``text == doc[char_start:char_end]``; lines are 1-based and inclusive."""

    seq: int
    char_start: int
    char_end: int
    line_start: int
    line_end: int
    heading_path: str
    text: str


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def chunk_document(
    text: str,
    *,
    offset: int = 0,
    max_chars: int = CHUNK_SIZE_CHARS,
    overlap_chars: int = CHUNK_OVERLAP_CHARS,
    window_chars: int = CHUNK_WINDOW_CHARS,
    full_text: str | None = None,
    chunker: str = "breakpoints",
) -> list[Chunk]:
    """Chunk ``text`` and address every chunk.

    ``chunker`` picks the strategy (:mod:`qmdlab.store.chunkers`; default qmd's break points).

    ``offset`` is where ``text`` starts inside ``full_text`` (the whole file, e.g. when a
    front-matter block was skipped); char offsets and lines refer to ``full_text``.
    ``line_start`` is the line of the chunk's first non-newline character, ``line_end`` the
    line of its last character. ``heading_path`` is the heading path in effect at the chunk's
    first non-whitespace character (a heading that starts there counts).

    >>> [c[:6] for c in chunk_document("# A\\nx\\n## B\\ny")]
    [(0, 0, 12, 1, 4, 'A')]
    """
    full = text if full_text is None else full_text
    heads = heading_paths(text)
    chunks: list[Chunk] = []
    if chunker == "breakpoints":
        cuts = chunk_spans(text, max_chars, overlap_chars, window_chars)
    else:
        cuts = spans(text, chunker, max_chars, overlap_chars, window_chars)
    for seq, (s, e) in enumerate(cuts):
        body = text[s:e]
        lead = len(body) - len(body.lstrip())
        first = s + lead
        path = ""
        for hpos, hpath in heads:
            if hpos <= first:
                path = hpath
            else:
                break
        nl = len(body) - len(body.lstrip("\n"))
        line_start = _line_of(full, offset + s + min(nl, max(len(body) - 1, 0)))
        line_end = _line_of(full, offset + max(e - 1, s))
        chunks.append(Chunk(seq, offset + s, offset + e, line_start, line_end, path, body))
    return chunks

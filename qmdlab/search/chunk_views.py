"""A document's chunks as previews (``qmdlab chunks``, MCP ``read_chunks``) and child → parent
backfill: the section or document that holds a chunk, with the chunk's lines marked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from qmdlab.errors import QmdlabError
from qmdlab.search.navigate import DEFAULT_MAX_CHARS, DEFAULT_PREVIEW_CHARS, cap_text
from qmdlab.store.outline import DocumentOutline
from qmdlab.store.refs import parse_ref

if TYPE_CHECKING:
    from qmdlab.store import Index


class ChunkPreview(NamedTuple):
    """One chunk of a document: where it is and its text (a preview, or the capped full text)."""

    chunk_id: int
    docno: str
    seq: int
    line_start: int
    line_end: int
    chars: int
    address: str
    heading_path: tuple[str, ...]
    text: str
    truncated: bool

    def as_dict(self) -> dict:
        d = self._asdict()
        d["heading_path"] = list(self.heading_path)
        return d


def _preview(text: str, chars: int) -> tuple[str, bool]:
    flat = " ".join(text.split())
    return (flat, False) if len(flat) <= chars else (flat[: max(chars - 1, 0)].rstrip() + "…", True)


def read_chunks(
    idx: Index,
    ref: str,
    chunk_ids: Sequence[int] | None = None,
    *,
    preview_chars: int = DEFAULT_PREVIEW_CHARS,
    full: bool = False,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> list[ChunkPreview]:
    """The chunks of one document, in order: a one-line preview of each (``full=False``; text
    whitespace-collapsed, cut to ``preview_chars`` with ``…``) or each chunk's text capped to
    ``max_chars`` (``full=True``). ``chunk_ids`` keeps only those chunks (a hit's ``chunk_id``);
    an id that is not a chunk of the document is an error naming the document's ids.
    """
    doc = idx.get(parse_ref(ref).name)
    chunks = idx.chunks([doc.docno])
    outline = DocumentOutline.parse(doc.body or "", doc.title or "")
    ids = chunks["chunk_id"].to_list()
    if chunk_ids is not None:
        missing = [int(c) for c in chunk_ids if int(c) not in set(ids)]
        if missing:
            raise QmdlabError(
                f"chunk id(s) {missing} are not chunks of {doc.docno}; its chunks are {ids} "
                f"(list them with `qmdlab chunks {doc.docno}`)"
            )
        keep = {int(c) for c in chunk_ids}
    else:
        keep = set(ids)
    out = []
    for row in chunks.iter_rows(named=True):
        if row["chunk_id"] not in keep:
            continue
        text = row["text"] or ""
        if full:
            lead = len(text) - len(text.lstrip("\n"))  # line_start is the line of the first non-newline
            capped = cap_text(text, max_chars, read_on=(doc.docno, int(row["line_start"]) - text.count("\n", 0, lead)))
            shown, cut = capped.text, capped.truncated
        else:
            shown, cut = _preview(text, preview_chars)
        sec = outline.section_at_line(int(row["line_start"]))
        out.append(
            ChunkPreview(
                int(row["chunk_id"]),
                doc.docno,
                int(row["seq"]),
                int(row["line_start"]),
                int(row["line_end"]),
                len(text),
                sec.address,
                tuple(sec.heading_path),
                shown,
                cut,
            )
        )
    return out


class Backfilled(NamedTuple):
    """A chunk read in its parent: the smallest section holding all of the chunk (``level``
    ``section``) or the whole document (``document``); ``highlight`` = the chunk's lines."""

    docno: str
    chunk_id: int
    level: str
    address: str
    heading_path: tuple[str, ...]
    line_start: int
    line_end: int
    highlight: tuple[int, int]
    text: str
    truncated: bool

    def marked(self) -> str:
        """The text with line numbers, the chunk's lines marked ``*`` (a CLI rendering)."""
        lines = self.text.split("\n")
        note = lines.pop() if self.truncated else None
        width = len(str(self.line_start + len(lines) - 1))
        lo, hi = self.highlight
        out = [f"{no:>{width}}{'*' if lo <= no <= hi else ' '} {t}" for no, t in enumerate(lines, self.line_start)]
        return "\n".join(out + ([note] if note else []))


BACKFILL_LEVELS = ("section", "document")


def backfill(
    idx: Index, ref: str, chunk_id: int, *, level: str = "section", max_chars: int = DEFAULT_MAX_CHARS
) -> Backfilled:
    """Child → parent (ranks only): the section or document that holds chunk ``chunk_id`` of the
    document ``ref``, with the chunk's lines as ``highlight``.

    ``section`` is the innermost section containing both the chunk's first and last line (a chunk
    that crosses into a sibling section gets their common parent); ``document`` the whole text.
    The text is capped to ``max_chars`` from the section's start, or — when the chunk would fall
    past the cap — from a little above the chunk, so the highlighted lines are always shown.
    """
    if level not in BACKFILL_LEVELS:
        raise QmdlabError(f"level {level!r}: expected one of {', '.join(BACKFILL_LEVELS)}")
    [chunk] = read_chunks(idx, ref, [int(chunk_id)], preview_chars=0)
    doc = idx.get(chunk.docno)
    outline = DocumentOutline.parse(doc.body or "", doc.title or "")
    lines = outline._lines
    n = len(lines) - (1 if len(lines) > 1 and lines[-1] == "" else 0)
    if level == "document":
        sec = outline.sections[0]
    else:
        sec = outline.section_at_line(chunk.line_start)
        while sec.address and sec.line_end < chunk.line_end:
            sec = outline.parent(sec.address) or outline.sections[0]
    first, last = (1, n) if not sec.address else (sec.line_start, sec.line_end)
    text = "\n".join(lines[first - 1 : last])
    if max_chars > 0 and len(text) > max_chars:
        upto = len("\n".join(lines[first - 1 : chunk.line_end]))
        if upto > max_chars:  # the chunk would be cut off: start a few lines above it
            first = max(first, chunk.line_start - 2)
            text = "\n".join(lines[first - 1 : last])
    capped = cap_text(text, max_chars, read_on=(doc.docno, first))
    shown_last = first + capped.text.count("\n") - (1 if capped.truncated else 0)
    return Backfilled(
        doc.docno,
        chunk.chunk_id,
        level,
        sec.address,
        tuple(sec.heading_path),
        first,
        min(last, shown_last) if capped.truncated else last,
        (chunk.line_start, chunk.line_end),
        capped.text,
        capped.truncated,
    )


__all__ = ["ChunkPreview", "read_chunks", "Backfilled", "BACKFILL_LEVELS", "backfill"]

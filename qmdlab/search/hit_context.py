"""Where a hit sits in its document: its section's address and heading path, the parent
section's title and summary, the sibling sections (``--context``, MCP ``parent``/``siblings``),
and the heading breadcrumb every result format shows."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from qmdlab.errors import QmdlabError
from qmdlab.search.navigate import DEFAULT_MAX_SIBLINGS, DEFAULT_SUMMARY_CHARS, FENCE
from qmdlab.store.outline import DocumentOutline, Section

if TYPE_CHECKING:
    from qmdlab.store import Index


class HitContext(NamedTuple):
    """Where a hit's line sits: its section (``address``, ``heading_path``), the parent section
    (address, title, a short summary; ``None`` for a top-level hit in a document without a
    title) and the sibling sections' ``(address, title)``."""

    docno: str
    line: int
    address: str
    heading_path: tuple[str, ...]
    parent_address: str | None
    parent_title: str
    parent_summary: str
    siblings: tuple[tuple[str, str], ...]

    def breadcrumb(self) -> str:
        """``"A > B"`` (empty for a hit above the first heading)."""
        return " > ".join(self.heading_path)

    def as_dict(self) -> dict:
        return {
            "address": self.address,
            "heading_path": list(self.heading_path),
            "parent": None
            if self.parent_address is None
            else {"address": self.parent_address, "title": self.parent_title, "summary": self.parent_summary},
            "siblings": [{"address": a, "title": t} for a, t in self.siblings],
        }


def section_summary(outline: DocumentOutline, sec: Section, max_chars: int = DEFAULT_SUMMARY_CHARS) -> str:
    """A section's own lead text: its first paragraph below the heading (before any
    subsection), whitespace collapsed and capped to ``max_chars`` with ``…``; for the document
    root, the text before the first heading (front matter skipped).

    >>> out = DocumentOutline.parse("# Install\\nRun the\\ninstaller first.\\n\\nMore.\\n## Linux\\napt\\n")
    >>> section_summary(out, out.section("install")), section_summary(out, out.section("install"), 10)
    ('Run the installer first.', 'Run the i…')
    """
    lines = outline._lines
    first = sec.line_start if sec.address else 1
    last = sec.line_end
    for child in sec.children:
        last = min(last, outline.section(child).line_start - 1)
    body = lines[first - 1 + (1 if sec.address else 0) : last]
    if not sec.address and body and body[0].strip() == "---":  # front matter
        for j in range(1, len(body)):
            if body[j].strip() in ("---", "..."):
                body = body[j + 1 :]
                break
    para: list[str] = []
    fence = False
    for line in body:
        s = line.strip()
        if FENCE.match(line):
            fence = not fence
            if para:
                break
            continue
        if fence or (not s and not para) or s.startswith("#") or re.fullmatch(r"[=-]{3,}", s):
            continue
        if not s:
            break
        para.append(s)
    text = " ".join(" ".join(para).split())
    return text if len(text) <= max_chars else text[: max(max_chars - 1, 0)].rstrip() + "…"


def context_of(
    outline: DocumentOutline,
    docno: str,
    line: int,
    summary_chars: int = DEFAULT_SUMMARY_CHARS,
    max_siblings: int = DEFAULT_MAX_SIBLINGS,
) -> HitContext:
    """:class:`HitContext` of a 1-based line in a parsed document. Siblings are the sections
    next to the hit's under the same parent, at most ``max_siblings`` (the nearest ones, in
    document order).

    >>> out = DocumentOutline.parse("# Guide\\nIntro.\\n## Install\\nsteps\\n## Use\\nrun\\n", "Guide")
    >>> c = context_of(out, "kb/g.md", 4)
    >>> c.breadcrumb(), c.address, c.parent_address, c.parent_summary, c.siblings
    ('Guide > Install', 'guide/install', 'guide', 'Intro.', (('guide/use', 'Use'),))
    """
    sec = outline.section_at_line(max(int(line), 1))
    parent = outline.parent(sec.address) if sec.address else None
    if parent is None:
        p_addr, p_title, p_sum = None, "", ""
        sibs: tuple[tuple[str, str], ...] = ()
    else:
        p_addr, p_title = parent.address, parent.title
        p_sum = section_summary(outline, parent, summary_chars)
        kids = parent.children
        at = kids.index(sec.address)
        near = sorted((k for k in range(len(kids)) if k != at), key=lambda k: (abs(k - at), k))[: max(max_siblings, 0)]
        sibs = tuple((kids[k], outline.section(kids[k]).title) for k in sorted(near))
    return HitContext(docno, int(line), sec.address, tuple(sec.heading_path), p_addr, p_title, p_sum, sibs)


def hit_context(
    idx: Index,
    docno: str,
    line: int,
    summary_chars: int = DEFAULT_SUMMARY_CHARS,
    max_siblings: int = DEFAULT_MAX_SIBLINGS,
) -> HitContext:
    """:class:`HitContext` of line ``line`` of an indexed document (see :func:`context_of`)."""
    doc = idx.get(docno)
    return context_of(
        DocumentOutline.parse(doc.body or "", doc.title or ""), doc.docno, line, summary_chars, max_siblings
    )


def snippet_hit_line(line: int, snippet: str) -> int:
    """The line a result is about: a multi-line snippet opens one context line above its best
    line (:func:`qmdlab.pipeline.results.snippet`, context 1), except at the top of its range.

    >>> snippet_hit_line(7, "a\\nb\\nc"), snippet_hit_line(1, "a\\nb"), snippet_hit_line(5, "one line")
    (8, 1, 5)
    """
    return int(line) + (1 if int(line) > 1 and "\n" in (snippet or "") else 0)


def _row_outlines(idx: Index, rows: Iterable) -> list[tuple[Any, DocumentOutline | None]]:
    """``(row, outline)`` per result row; ``None`` for a document no longer indexed or a row
    without a line. Each document is parsed once."""
    cache: dict[str, DocumentOutline | None] = {}
    out = []
    for r in rows:
        if r.docno not in cache:
            try:
                doc = idx.get(r.docno)
                cache[r.docno] = DocumentOutline.parse(doc.body or "", doc.title or "")
            except QmdlabError:
                cache[r.docno] = None
        out.append((r, cache[r.docno] if r.line else None))
    return out


def breadcrumbs(idx: Index, rows: Iterable) -> list[str]:
    """``"A > B"`` for each result row (``docno``, ``line``, ``snippet`` attributes): the heading
    path of the line the row's snippet is about; ``""`` above the first heading or for a
    document no longer indexed. Each document is parsed once."""
    return [
        "" if outline is None else " > ".join(outline.section_at_line(snippet_hit_line(r.line, r.snippet)).heading_path)
        for r, outline in _row_outlines(idx, rows)
    ]


def hit_contexts(
    idx: Index, rows: Iterable, summary_chars: int = DEFAULT_SUMMARY_CHARS, max_siblings: int = DEFAULT_MAX_SIBLINGS
) -> list[HitContext | None]:
    """:func:`hit_context` of each result row (``docno``, ``line``, ``snippet`` attributes) at the
    line its snippet is about — what the MCP tools put on every hit (``parent``, ``siblings``);
    ``None`` for a document no longer indexed. Each document is parsed once."""
    return [
        None
        if outline is None
        else context_of(outline, r.docno, snippet_hit_line(r.line, r.snippet), summary_chars, max_siblings)
        for r, outline in _row_outlines(idx, rows)
    ]


__all__ = [
    "HitContext",
    "section_summary",
    "context_of",
    "hit_context",
    "hit_contexts",
    "snippet_hit_line",
    "breadcrumbs",
]

"""Structural navigation of one markdown document: outline, sections, parents.

An agent that found a chunk through search can move through the document's structure
instead of only receiving top-k chunks. Every heading opens a
*section*; a section runs until the next heading of the same or a higher level, so it
includes its subsections. Sections are addressed by a **slug path**: the GitHub-style
slugs of the headings from the top, joined by ``/`` (``installation/linux``). A slug
repeated among siblings gets ``-2``, ``-3`` …; the text before the first heading belongs
to the document root, whose address is ``""``. Addresses depend only on the heading
texts, so they survive edits of the body and re-chunking.

The parser is deliberately small: ATX headings (``#`` … ``######``), setext headings
(``===`` / ``---`` under a text line), fenced code blocks (never headings) and a leading
YAML front-matter block (skipped). Line numbers are 1-based and refer to the text given.

>>> text = "intro\\n# Install\\nsteps\\n## Linux\\napt\\n## macOS\\nbrew\\n# Use\\nrun\\n"
>>> out = DocumentOutline.parse(text)
>>> [s.address for s in out.sections]
['', 'install', 'install/linux', 'install/macos', 'use']
>>> out.section("install/linux").lines
(4, 5)
>>> out.section("install").lines
(2, 7)
>>> out.parent("install/macos").address
'install'
>>> out.section_at_line(7).address
'install/macos'
>>> out.section_text("install/macos")
'## macOS\\nbrew'
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from qmdlab.errors import QmdlabError

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT_1 = re.compile(r"^ {0,3}=+[ \t]*$")
_SETEXT_2 = re.compile(r"^ {0,3}-+[ \t]*$")
# Lines that cannot be the text of a setext heading (list items, quotes, tables, html, hr).
_NOT_PARAGRAPH = re.compile(r"^ {0,3}(?:[-*+>|<]|\d+[.)]\s|#|={3,}|-{3,}|\*{3,}|_{3,})")


def slugify(title: str) -> str:
    """GitHub-style heading slug: lower case, punctuation dropped, spaces → ``-``.

    >>> slugify("Step 2: Configure `nginx` (TLS)!")
    'step-2-configure-nginx-tls'
    >>> slugify("???")
    'section'
    """
    text = unicodedata.normalize("NFKC", title).strip().lower()
    text = re.sub(r"[^\w\- ]+", "", text)
    text = re.sub(r"[\s_]+", "-", text).strip("-")
    text = re.sub(r"-{2,}", "-", text)
    return text or "section"


def parse_headings(text: str) -> list[tuple[int, int, str]]:
    """Headings of a markdown text as ``(line, level, title)`` with 1-based lines.

    >>> parse_headings("---\\ntitle: x\\n---\\n# A\\n```\\n# not\\n```\\nB\\n---\\n### C ###\\n")
    [(4, 1, 'A'), (8, 2, 'B'), (10, 3, 'C')]
    """
    lines = text.split("\n")
    out: list[tuple[int, int, str]] = []
    i = 0
    if lines and lines[0].strip() == "---":  # YAML front matter
        for j in range(1, len(lines)):
            if lines[j].strip() in ("---", "..."):
                i = j + 1
                break
    fence: str | None = None
    prev_text: str | None = None  # previous line when it can carry a setext underline
    while i < len(lines):
        line = lines[i]
        m = _FENCE.match(line)
        if fence is not None:
            if (
                m
                and m.group(1)[0] == fence[0]
                and len(m.group(1)) >= len(fence)
                and not line.strip()[len(m.group(1)) :].strip()
            ):
                fence = None
            i += 1
            prev_text = None
            continue
        if m:
            fence = m.group(1)
            prev_text = None
            i += 1
            continue
        atx = _ATX.match(line)
        if atx:
            out.append((i + 1, len(atx.group(1)), (atx.group(2) or "").strip()))
            prev_text = None
        elif prev_text is not None and (_SETEXT_1.match(line) or _SETEXT_2.match(line)):
            out.append((i, 1 if "=" in line else 2, prev_text.strip()))
            prev_text = None
        elif line.strip() and not _NOT_PARAGRAPH.match(line) and not line.startswith(("    ", "\t")):
            prev_text = line
        else:
            prev_text = None
        i += 1
    return out


@dataclass
class Section:
    """One heading's section (or the document root, level 0, address ``""``)."""

    address: str
    title: str
    level: int
    heading_path: tuple[str, ...]
    line_start: int
    line_end: int
    parent: str | None
    children: list[str] = field(default_factory=list)
    chunk_ids: list[int] = field(default_factory=list)

    @property
    def lines(self) -> tuple[int, int]:
        return (self.line_start, self.line_end)

    def as_dict(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "title": self.title,
            "level": self.level,
            "heading_path": list(self.heading_path),
            "line_start": self.line_start,
            "line_end": self.line_end,
            "parent": self.parent,
            "children": list(self.children),
            "chunk_ids": list(self.chunk_ids),
        }


class DocumentOutline:
    """The section tree of one document's text (see the module docstring)."""

    def __init__(self, text: str, sections: list[Section]):
        self.text = text
        self._lines = text.split("\n")
        self.sections = sections
        self._by_address = {s.address: s for s in sections}

    @classmethod
    def parse(cls, text: str, title: str = "") -> DocumentOutline:
        lines = text.split("\n")
        n = len(lines)
        if n > 1 and lines[-1] == "":  # a trailing newline does not open a line
            n -= 1
        root = Section("", title, 0, (), 1, max(n, 1), None)
        sections = [root]
        stack: list[Section] = [root]
        for line, level, head in parse_headings(text):
            while stack[-1].level >= level:
                stack[-1].line_end = line - 1
                stack.pop()
            parent = stack[-1]
            slug = slugify(head)
            taken = {a.rsplit("/", 1)[-1] for a in parent.children}
            base, k = slug, 2
            while slug in taken:
                slug, k = f"{base}-{k}", k + 1
            address = f"{parent.address}/{slug}" if parent.address else slug
            sec = Section(address, head, level, parent.heading_path + (head,), line, max(n, line), parent.address)
            parent.children.append(address)
            sections.append(sec)
            stack.append(sec)
        for sec in stack[1:]:
            sec.line_end = max(n, sec.line_start)
        return cls(text, sections)

    # -- lookups -------------------------------------------------------------------
    def section(self, address: str) -> Section:
        key = (address or "").strip().strip("/").lstrip("#")
        if key in self._by_address:
            return self._by_address[key]
        slugged = "/".join(slugify(part) for part in key.split("/")) if key else ""
        if slugged in self._by_address:
            return self._by_address[slugged]
        known = ", ".join(repr(s.address) for s in self.sections[1:21]) or "none (the document has no headings)"
        raise QmdlabError(f"no section {address!r} in this document; addresses: {known} (see the outline tool)")

    def parent(self, address: str) -> Section | None:
        sec = self.section(address)
        return None if sec.parent is None else self._by_address[sec.parent]

    def section_at_line(self, line: int) -> Section:
        """The innermost section containing a 1-based line."""
        best = self.sections[0]
        for sec in self.sections[1:]:
            if sec.line_start <= line <= sec.line_end and sec.level > best.level:
                best = sec
        return best

    def section_text(self, address: str) -> str:
        sec = self.section(address)
        return "\n".join(self._lines[sec.line_start - 1 : sec.line_end]).strip("\n")

    def attach_chunks(self, chunks: Iterable[tuple[int, int]]) -> None:
        """Record which chunks start in which section: ``(chunk_id, line_start)`` pairs."""
        for chunk_id, line_start in chunks:
            self.section_at_line(int(line_start)).chunk_ids.append(int(chunk_id))

    def tree_text(self) -> str:
        """An indented, human-readable outline: ``address  (lines a-b)`` per heading."""
        rows = []
        for sec in self.sections[1:]:
            rows.append(
                f"{'  ' * (sec.level - 1)}{'#' * sec.level} {sec.title}  [{sec.address}] lines {sec.line_start}-{sec.line_end}"
            )
        return "\n".join(rows) if rows else "(no headings)"


def breadcrumb(heading_path: Any) -> list[str]:
    """Normalise a stored heading path (list, tuple, ``" > "``-joined or JSON string) to a list.

    >>> breadcrumb("Install > Linux")
    ['Install', 'Linux']
    >>> breadcrumb(["A", "B"])
    ['A', 'B']
    >>> breadcrumb(None)
    []
    """
    if heading_path is None:
        return []
    if isinstance(heading_path, str):
        text = heading_path.strip()
        if not text:
            return []
        if text.startswith("["):
            import json

            try:
                return [str(x) for x in json.loads(text)]
            except ValueError:
                pass
        for sep in (" > ", " › ", " / ", "\x1f", "\n"):
            if sep in text:
                return [p.strip() for p in text.split(sep) if p.strip()]
        return [text]
    try:
        return [str(x) for x in heading_path]
    except TypeError:
        return [str(heading_path)]

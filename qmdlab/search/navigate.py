"""Moving from a search hit through a document's structure (heading-tree navigation).

A hit is a chunk or a line of a document; an agent (or a person at the CLI) then wants to
see *where* it is and to move from there instead of searching again:

- :func:`hit_context` — the hit's breadcrumb (heading path), section ``address``, its parent
  section's title and a short summary of it, and its sibling sections;
- :func:`read_chunks` — the chunks of a document (or chosen chunk ids) as short previews with
  their lines, breadcrumb and section address; ``full=True`` gives each chunk's text (capped);
- :func:`backfill` — child → parent (ranks only): the section (or whole document) that holds a chunk,
  with the chunk's lines marked, so a chunk hit can be read in its context;
- :func:`section_refs` / :func:`jump_to_ref` — the cross-references written in a section and
  following one of them to the section it names.

A cross-reference is any of (:func:`find_refs`): a markdown link ``[text](../a.md#anchor)``
(relative to the document's folder, or to the collection root when that is where the file
is; ``#anchor`` alone is the same document), a wiki link ``[[name#heading|alias]]`` (a document
whose file name is ``name``, the shortest path first), a ``qmd://collection/path#anchor`` URI,
or a bare collection-relative path ending in ``.md`` such as ``see runbooks/deploy-rollback.md``
(how the default corpus refers to other notes). Anchors are resolved against the target's
outline (:mod:`qmdlab.store.outline`): a slug path (``install/linux``), a heading's slug or
its text. Links to other schemes (``https://`` …) are listed but cannot be followed.

Text handed back is capped (:func:`cap_text`, caps on result text): past the cap it
ends with a line saying how much was left out and how to read on.

The three parts live in their own modules: :mod:`qmdlab.search.crossrefs` (cross-references and
jumps), :mod:`qmdlab.search.hit_context` (a hit's section, parent and siblings; breadcrumbs) and
:mod:`qmdlab.search.chunk_views` (chunk previews and backfill). This module holds what they share:
the caps on returned text (:func:`cap_text`) and the code-fence pattern.

Everything reads the index's copy of a document (:meth:`qmdlab.store.Index.get`), never a
fresh file. The CLI (``qmdlab refs``, ``qmdlab jump``, ``qmdlab chunks``, breadcrumbs and
``--context`` (:func:`hit_contexts`) on ``search``/``vsearch``/``query`` results, ``--max-chars``
with ``--full``) and the MCP server (``jump_to_ref``, ``read_chunks``,
``parent``/``siblings`` on every hit) are thin front ends over these functions.
"""

from __future__ import annotations

import re
from typing import NamedTuple

DEFAULT_MAX_CHARS = 4000
"""Cap on the text of a jump, a backfilled section or a full chunk (characters)."""
DEFAULT_PREVIEW_CHARS = 240
"""Characters of a chunk preview."""
DEFAULT_SUMMARY_CHARS = 200
"""Characters of a parent section's summary on a hit."""
DEFAULT_MAX_SIBLINGS = 6
"""Sibling sections listed on a hit (the nearest ones)."""


class Capped(NamedTuple):
    """Text cut to a cap: ``text`` (with a closing note when cut), ``truncated``, ``total_chars``."""

    text: str
    truncated: bool
    total_chars: int


def cap_text(text: str, max_chars: int, *, more: str = "", read_on: tuple[str, int] | None = None) -> Capped:
    """Cut ``text`` to at most ``max_chars`` characters at a line end when one is near (the last
    quarter), then add a note saying how many characters were left out and ``more`` (how to
    read on). ``read_on=(docno, first_line)`` (the document and the number of ``text``'s first
    line) writes ``more`` as the ``qmdlab get`` command that resumes at the first line not shown
    in full. ``max_chars <= 0`` means no cap.

    >>> cap_text("abc", 10)
    Capped(text='abc', truncated=False, total_chars=3)
    >>> cap_text("line one\\nline two\\nline three", 10, more="get x.md:2")
    Capped(text='line one\\n… [20 more characters; get x.md:2]', truncated=True, total_chars=28)
    >>> cap_text("abcdefghij", 4).text
    'abcd\\n… [6 more characters]'
    >>> cap_text("one\\ntwo\\nthree", 8, read_on=("kb/a.md", 10)).text  # cut after line 11
    'one\\ntwo\\n… [6 more characters; read on with `qmdlab get kb/a.md:12`]'
    >>> cap_text("one\\ntwo three four", 10, read_on=("kb/a.md", 10)).text  # cut inside line 11
    'one\\ntwo th\\n… [8 more characters; read on with `qmdlab get kb/a.md:11`]'
    """
    n = len(text)
    if max_chars <= 0 or n <= max_chars:
        return Capped(text, False, n)
    cut = text.rfind("\n", 0, max_chars + 1)
    if cut < max_chars * 3 // 4:
        cut = max_chars
    kept = text[:cut].rstrip("\n")
    if read_on is not None:
        resume = read_on[1] + text.count("\n", 0, cut) + (1 if text[cut : cut + 1] == "\n" else 0)
        more = f"read on with `qmdlab get {read_on[0]}:{resume}`"
    note = f"… [{n - cut} more characters" + (f"; {more}" if more else "") + "]"
    return Capped(f"{kept}\n{note}", True, n)


FENCE = re.compile(r"^ {0,3}(```|~~~)")
"""An opening or closing code-fence line (references and headings inside fences are not read)."""


__all__ = [
    "DEFAULT_MAX_CHARS",
    "DEFAULT_PREVIEW_CHARS",
    "DEFAULT_SUMMARY_CHARS",
    "DEFAULT_MAX_SIBLINGS",
    "FENCE",
    "Capped",
    "cap_text",
]

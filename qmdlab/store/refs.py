"""Document references as people type them — one parser for the CLI (``qmdlab get``,
``multi-get``) and the MCP server (``get``, ``multi_get``).

A reference is ``path[#address][:from[:count]]``: a docno (``collection/path``), a path inside a
collection or a ``#docid``; ``#address`` names a section (:mod:`qmdlab.store.outline`), a
trailing ``:from[:count]`` a line range. A leading ``#`` is a docid, not an address. A
*pattern* is either a glob over docnos and collection-relative paths (:func:`glob_match`:
``*``/``?`` inside one folder, ``**`` across) or a comma-separated list of references.

Wherever a document, a glob or a context target is named, qmd's URI form
``qmd://collection/path`` is accepted too and means the docno ``collection/path``
(:func:`strip_scheme`; percent-escapes are decoded, as qmd's MCP clients send them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from qmdlab.store.scan import glob_match

SCHEME = "qmd://"
_RANGE = re.compile(r"^(?P<ref>.*?)(?::(?P<start>\d+)(?::(?P<count>\d+))?)?$")


class Ref(NamedTuple):
    """A parsed reference: ``name`` (docno, path or ``#docid``), section ``address`` (``None``:
    none given), line range ``start`` and ``n_lines`` (``None``: not given)."""

    name: str
    address: str | None
    start: int | None
    n_lines: int | None


def strip_scheme(text: str) -> str:
    """``qmd://collection/path`` → ``collection/path``; anything else unchanged (stripped).

    Percent-escapes of the URI form are decoded (``%20`` → space); ``qmd://`` alone or
    ``qmd:///`` names the root (``/``), used by ``context add qmd:/// TEXT``.

    >>> strip_scheme("qmd://notes/a b.md"), strip_scheme("QMD://notes/x%20y.md:3"), strip_scheme(" notes/a.md ")
    ('notes/a b.md', 'notes/x y.md:3', 'notes/a.md')
    >>> strip_scheme("qmd://"), strip_scheme("#abc123")
    ('/', '#abc123')
    """
    text = text.strip()
    if text[: len(SCHEME)].lower() != SCHEME:
        return text
    from urllib.parse import unquote

    rest = unquote(text[len(SCHEME) :]).lstrip("/")
    return rest or "/"


def split_range(text: str) -> tuple[str, int | None, int | None]:
    """``ref[:from[:count]]`` → ``(ref, from, count)``.

    >>> split_range("#abc123:10:5"), split_range("notes/a.md"), split_range("a.md:3")
    (('#abc123', 10, 5), ('notes/a.md', None, None), ('a.md', 3, None))
    """
    m = _RANGE.match(text.strip())
    assert m is not None  # the pattern matches every string
    start, count = m.group("start"), m.group("count")
    return m.group("ref"), int(start) if start else None, int(count) if count else None


def split_address(ref: str) -> tuple[str, str | None]:
    """``ref#address`` → ``(ref, address)``; a leading ``#`` is a docid, not an address.

    >>> split_address("notes/a.md#install/linux"), split_address("#abc123"), split_address("#abc123#use")
    (('notes/a.md', 'install/linux'), ('#abc123', None), ('#abc123', 'use'))
    >>> split_address("a.md#"), split_address("a.md")
    (('a.md', ''), ('a.md', None))
    """
    text = ref.strip()
    cut = text.find("#", 1)
    if cut < 0:
        return text, None
    return text[:cut], text[cut + 1 :]


def parse_ref(text: str) -> Ref:
    """Split ``path[#address][:from[:count]]`` into its parts.

    >>> parse_ref("notes/a.md:10:5")
    Ref(name='notes/a.md', address=None, start=10, n_lines=5)
    >>> parse_ref("#abc123:3")
    Ref(name='#abc123', address=None, start=3, n_lines=None)
    >>> parse_ref("notes/a.md#install/linux")
    Ref(name='notes/a.md', address='install/linux', start=None, n_lines=None)
    >>> parse_ref("qmd://notes/a.md#install:2:3")
    Ref(name='notes/a.md', address='install', start=2, n_lines=3)
    """
    base, start, count = split_range(strip_scheme(text))
    name, address = split_address(base)
    return Ref(name, address, start, count)


def resolve_ref(lookup: Callable[[str], Any], text: str, missing: type[Exception]) -> tuple[Any, Ref]:
    """The document a typed reference names, and the reference's parts — the one rule of the CLI's
    ``qmdlab get`` and the MCP server's ``get``.

    ``lookup(name)`` returns a document or raises ``missing``. The whole text is tried first (a
    file name holding ``#`` or ``:``); then, when it names a ``#address``, the part before it
    (with a ``:from:count`` suffix of that part dropped); else the ``:from[:count]`` suffix is
    split off. A section's address and a line range never come together: with an address the
    range is ``None``.

    >>> docs = {"kb/a.md": "A", "kb/b#1.md": "B"}
    >>> def look(name):
    ...     if name not in docs:
    ...         raise KeyError(name)
    ...     return docs[name]
    >>> resolve_ref(look, "kb/a.md:3:2", KeyError), resolve_ref(look, "qmd://kb/a.md#install", KeyError)
    (('A', Ref(name='kb/a.md', address=None, start=3, n_lines=2)), ('A', Ref(name='kb/a.md', address='install', start=None, n_lines=None)))
    >>> resolve_ref(look, "kb/b#1.md", KeyError)
    ('B', Ref(name='kb/b#1.md', address=None, start=None, n_lines=None))
    """
    text = strip_scheme(text)
    try:
        return lookup(text), Ref(text, None, None, None)
    except missing:
        pass
    name, address = split_address(text)
    if address is not None:
        try:
            return lookup(name), Ref(name, address, None, None)
        except missing:
            base = split_range(name)[0]
            return lookup(base), Ref(base, address, None, None)
    name, start, count = split_range(text)
    return lookup(name), Ref(name, None, start, count)


def line_window(
    total: int, start: int | None, count: int | None, section: tuple[int, int] | None = None
) -> tuple[int, int]:
    """The 1-based, inclusive lines ``(first, last)`` to show of a document of ``total`` lines:
    a ``section``'s own lines (the range is not applied to a section, as ``qmdlab get FILE#address``),
    else from ``start`` (default 1) for ``count`` lines (default: to the end). A start past the end
    raises :class:`ValueError`.

    >>> line_window(10, 3, 2), line_window(10, None, None), line_window(10, 4, 100), line_window(10, 2, 1, (5, 8))
    ((3, 4), (1, 10), (4, 10), (5, 8))
    """
    if section is not None:
        return section
    first = max(1, start or 1)
    if first > total and total:
        raise ValueError(f"line {first} is past the end ({total} lines)")
    last = total if count is None else min(total, first + count - 1)
    return first, last


def is_glob(pattern: str) -> bool:
    """A glob (``*``, ``?``, ``[``) rather than a comma-separated list of references.

    >>> is_glob("notes/**/*.md"), is_glob("a.md, b.md"), is_glob("a.md")
    (True, False, False)
    """
    return any(ch in pattern for ch in "*?[") and "," not in pattern


def split_refs(pattern: str) -> list[str]:
    """The references of a comma-separated list.

    >>> split_refs(" a.md, #abc123 ,, qmd://kb/b.md")
    ['a.md', '#abc123', 'kb/b.md']
    """
    return [strip_scheme(r) for r in pattern.split(",") if r.strip()]


def glob_docnos(docnos: Iterable[str], pattern: str) -> list[str]:
    """Docnos matching ``pattern`` as a whole docno or as the path inside their collection, sorted.

    >>> glob_docnos(["kb/a.md", "kb/x/b.md", "other/a.md"], "kb/*.md")
    ['kb/a.md']
    >>> glob_docnos(["kb/a.md", "kb/x/b.md", "other/a.md"], "a.md")
    ['kb/a.md', 'other/a.md']
    >>> glob_docnos(["kb/a.md", "kb/x/b.md", "other/a.md"], "qmd://kb/**/*.md")
    ['kb/a.md', 'kb/x/b.md']
    """
    pattern = strip_scheme(pattern)
    return sorted(d for d in docnos if glob_match(d, pattern) or glob_match(d.partition("/")[2], pattern))


__all__ = [
    "Ref",
    "SCHEME",
    "strip_scheme",
    "parse_ref",
    "resolve_ref",
    "line_window",
    "split_range",
    "split_address",
    "is_glob",
    "split_refs",
    "glob_docnos",
]

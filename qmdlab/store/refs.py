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
from collections.abc import Iterable
from typing import NamedTuple

from qmdlab.store.scan import glob_match

SCHEME = "qmd://"
_RANGE = re.compile(r"^(?P<ref>.*?)(?::(?P<start>\d+)(?::(?P<count>\d+))?)?$")


class Ref(NamedTuple):
    """A parsed reference: ``name`` (docno, path or ``#docid``), section ``address`` (``None``:
    none given), line range ``start`` and ``count`` (``None``: not given)."""

    name: str
    address: str | None
    start: int | None
    count: int | None


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
    Ref(name='notes/a.md', address=None, start=10, count=5)
    >>> parse_ref("#abc123:3")
    Ref(name='#abc123', address=None, start=3, count=None)
    >>> parse_ref("notes/a.md#install/linux")
    Ref(name='notes/a.md', address='install/linux', start=None, count=None)
    >>> parse_ref("qmd://notes/a.md#install:2:3")
    Ref(name='notes/a.md', address='install', start=2, count=3)
    """
    base, start, count = split_range(strip_scheme(text))
    name, address = split_address(base)
    return Ref(name, address, start, count)


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
    "split_range",
    "split_address",
    "is_glob",
    "split_refs",
    "glob_docnos",
]

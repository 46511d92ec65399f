"""``multi-get``: several documents by glob or list, size-capped, each cut to a line limit.

:func:`collect` resolves a pattern (:mod:`qmdlab.store.refs`: a glob over docnos/paths, or a
comma-separated list of refs, ``qmd://`` URIs included) into :class:`Fetched` items;
:func:`format_documents` renders them as ``cli``, ``json``, ``csv``, ``md``, ``xml`` or
``files`` (qmd's ``multi-get`` formats).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple
from xml.sax.saxutils import escape, quoteattr

from qmdlab.display import json_text, number_lines, printable, xml_text  # names escaped as in search results
from qmdlab.errors import QmdlabError
from qmdlab.store.refs import glob_docnos, is_glob, split_refs

if TYPE_CHECKING:
    from qmdlab.store.index import Index

FORMATS = ("cli", "json", "csv", "md", "xml", "files")


class Fetched(NamedTuple):
    """One document of a multi-get: ``body`` is ``None`` when ``skipped`` (over ``max_bytes``);
    ``truncated`` when ``max_lines`` cut it (``lines`` = the lines kept)."""

    docno: str
    docid: str
    title: str
    bytes: int
    lines: int
    total_lines: int
    skipped: bool
    truncated: bool
    body: str | None


def _lines(body: str) -> list[str]:
    lines = body.split("\n")
    return lines[:-1] if body.endswith("\n") else lines


def collect(idx: Index, pattern: str, *, max_bytes: int = 10240, max_lines: int | None = None) -> list[Fetched]:
    """The documents ``pattern`` names, in glob order (sorted docnos) or list order.

    A document larger than ``max_bytes`` is listed with ``skipped=True`` and no body; a body
    longer than ``max_lines`` lines keeps its first ``max_lines``.
    """
    if max_lines is not None and max_lines < 1:
        raise QmdlabError(f"-l/--max-lines must be 1 or more, got {max_lines}")
    pattern = (pattern or "").strip()
    if not pattern:
        raise QmdlabError("empty pattern; give a glob like 'notes/**/*.md' or a comma-separated list of refs")
    if is_glob(pattern):
        docs = [idx.get(d) for d in glob_docnos(idx.documents()["docno"].to_list(), pattern)]
    else:
        docs = [idx.get(r) for r in split_refs(pattern)]
    out = []
    for d in docs:
        size = len(d.body.encode("utf-8"))
        lines = _lines(d.body)
        if size > max_bytes:
            out.append(Fetched(d.docno, d.docid, d.title, size, 0, len(lines), True, False, None))
            continue
        kept = lines if max_lines is None else lines[:max_lines]
        out.append(
            Fetched(
                d.docno, d.docid, d.title, size, len(kept), len(lines), False, len(kept) < len(lines), "\n".join(kept)
            )
        )
    return out


def _numbered(body: str) -> str:
    return number_lines(body, 1)


def format_documents(
    items: Sequence[Fetched], fmt: str = "cli", *, line_numbers: bool = False, max_bytes: int = 10240
) -> str:
    """Render multi-get items (no trailing newline).

    >>> f = [Fetched("kb/a.md", "abc123", "A", 4, 1, 2, False, True, "x"), Fetched("kb/b.md", "def456", "B", 99, 0, 9, True, False, None)]
    >>> print(format_documents(f, "files"))
    #abc123,kb/a.md,4,truncated
    #def456,kb/b.md,99,skipped
    >>> print(format_documents(f, "csv"))
    file,docid,title,bytes,lines,total_lines,skipped,truncated,body
    kb/a.md,#abc123,A,4,1,2,0,1,x
    kb/b.md,#def456,B,99,0,9,1,0,
    """
    if fmt not in FORMATS:
        raise QmdlabError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if line_numbers:
        items = [it._replace(body=_numbered(it.body)) if it.body is not None else it for it in items]
    if fmt == "json":
        return json_text(
            [
                {
                    "file": it.docno,
                    "docid": f"#{it.docid}",
                    "title": it.title,
                    "bytes": it.bytes,
                    "lines": it.lines,
                    "total_lines": it.total_lines,
                    "skipped": it.skipped,
                    "truncated": it.truncated,
                    "body": it.body,
                }
                for it in items
            ]
        )
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["file", "docid", "title", "bytes", "lines", "total_lines", "skipped", "truncated", "body"])
        for it in items:
            w.writerow(
                [
                    printable(it.docno),
                    f"#{it.docid}",
                    printable(it.title),
                    it.bytes,
                    it.lines,
                    it.total_lines,
                    int(it.skipped),
                    int(it.truncated),
                    it.body or "",
                ]
            )
        return buf.getvalue().rstrip("\n")
    if fmt == "files":
        return "\n".join(
            f"#{it.docid},{printable(it.docno)},{it.bytes},"
            + ("skipped" if it.skipped else "truncated" if it.truncated else "")
            for it in items
        )
    if fmt == "xml":
        out = ["<documents>"]
        for it in items:
            out.append(
                f"  <document file={quoteattr(it.docno)} docid={quoteattr('#' + it.docid)} "
                f'bytes="{it.bytes}" skipped="{str(it.skipped).lower()}" '
                f'truncated="{str(it.truncated).lower()}">'
            )
            out.append(f"    <title>{escape(it.title)}</title>")
            if it.body is not None:
                out.append(f"    <body>{escape(it.body)}</body>")
            out.append("  </document>")
        out.append("</documents>")
        return xml_text("\n".join(out))
    if not items:
        return "No documents match."
    out = []
    for it in items:
        if fmt == "md":
            out.append(f"## {printable(it.title)}\n\n`{printable(it.docno)}` · #{it.docid}\n")
            if it.skipped:
                out.append(f"_skipped: {it.bytes} bytes > --max-bytes {max_bytes}_\n")
            else:
                out.append("````markdown\n" + (it.body or "") + "\n````\n")
                if it.truncated:
                    out.append(f"_first {it.lines} of {it.total_lines} lines_\n")
            continue
        out.append(f"=== {printable(it.docno)} (#{it.docid}) ===")
        if it.skipped:
            out.append(f"[skipped: {it.bytes} bytes > --max-bytes {max_bytes}]")
        else:
            out.append(it.body or "")  # None only when skipped
            if it.truncated:
                out.append(f"[… {it.total_lines - it.lines} more lines; first {it.lines} of {it.total_lines} shown]")
    return "\n".join(out).rstrip("\n")


__all__ = ["Fetched", "FORMATS", "collect", "format_documents"]

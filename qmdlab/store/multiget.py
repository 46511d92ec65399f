"""``multi-get``: several documents by glob or list, size-capped, each cut to a line limit.

:func:`collect` resolves a pattern (:mod:`qmdlab.store.refs`: a glob over docnos/paths, or a
comma-separated list of refs, ``qmd://`` URIs included) into :class:`Fetched` items;
:func:`format_documents` renders them as ``cli``, ``json``, ``csv``, ``md``, ``xml`` or
``files``, in the shapes of qmd's ``multi-get`` (``src/cli/qmd.ts`` ``multiGet``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple
from xml.sax.saxutils import escape, quoteattr

from qmdlab.display import (  # names escaped as in search results
    json_text,
    number_lines,
    printable,
    printable_text,
    xml_text,
)
from qmdlab.errors import QmdlabError
from qmdlab.store.refs import glob_docnos, is_glob, split_refs

if TYPE_CHECKING:
    from qmdlab.store.index import Index

FORMATS = ("cli", "json", "csv", "md", "xml", "files")


class Fetched(NamedTuple):
    """One document of a multi-get: ``body`` is ``None`` when ``skipped`` (over ``max_bytes``);
    ``truncated`` when ``max_lines`` cut it (``lines`` = the lines kept, and the body ends with
    qmd's ``[... truncated N more lines]`` marker)."""

    docno: str
    docid: str
    title: str
    bytes: int
    lines: int
    total_lines: int
    skipped: bool
    truncated: bool
    body: str | None
    context: str | None = None
    #: qmd's ``file``: the ``qmd://collection/path`` URI of a listed document, the path inside its
    #: collection of one a glob found (qmd's ``displayPath`` of each); ``""``: the URI.
    shown_as: str = ""

    @property
    def file(self) -> str:
        return self.shown_as or f"qmd://{self.docno}"

    def skip_reason(self, max_bytes: int) -> str:
        """qmd's reason for a skipped document."""
        return (
            f"File too large ({round(self.bytes / 1024)}KB > {round(max_bytes / 1024)}KB). "
            f"Use 'qmdlab get {self.file}' to retrieve."
        )


class Collected(NamedTuple):
    """What a pattern named: the documents found, one message per name of a list that names none,
    and ``failed``: nothing was found where qmd exits 1 (a glob or a single docid that matches no
    document; a comma-separated list reports its misses and goes on, as qmd's)."""

    items: list[Fetched]
    misses: list[str]
    failed: bool


def collect(idx: Index, pattern: str, *, max_bytes: int = 10240, max_lines: int | None = None) -> Collected:
    """The documents ``pattern`` names, in glob order (sorted docnos) or list order.

    A document larger than ``max_bytes`` is listed with ``skipped=True`` and no body; a body
    longer than ``max_lines`` lines keeps its first ``max_lines``.
    """
    from qmdlab.store.documents import DocumentNotFoundError

    if max_lines is not None and max_lines < 1:
        raise QmdlabError(f"-l/--max-lines must be 1 or more, got {max_lines}")
    pattern = (pattern or "").strip()
    if not pattern:
        raise QmdlabError("empty pattern; give a glob like 'notes/**/*.md' or a comma-separated list of refs")
    misses: list[str] = []
    globbed = is_glob(pattern)
    if globbed:
        docs = [idx.get(d) for d in glob_docnos(idx.documents()["docno"].to_list(), pattern)]
        if not docs:
            misses.append(f"No files matched pattern: {printable(pattern)}")
        failed = not docs
    else:
        refs = split_refs(pattern)
        docs = []
        for ref in refs:
            try:
                docs.append(idx.get(ref))
            except DocumentNotFoundError as err:
                misses.append(str(err))
        failed = not docs and len(refs) == 1
    contexts = idx.contexts()
    out = []
    for d in docs:
        size = len(d.body.encode("utf-8"))
        lines = d.body.split("\n")  # as qmd counts them: a final newline ends an empty last line
        context = idx.context_text(d.docno, contexts)
        shown_as = d.path if globbed else ""
        if size > max_bytes:
            name = d.docno.rsplit("/", 1)[-1]
            out.append(Fetched(d.docno, d.docid, name, size, 0, len(lines), True, False, None, context, shown_as))
            continue
        kept = lines if max_lines is None else lines[:max_lines]
        body = "\n".join(kept)
        if len(kept) < len(lines):
            body += f"\n\n[... truncated {len(lines) - len(kept)} more lines]"
        cut = len(kept) < len(lines)
        out.append(Fetched(d.docno, d.docid, d.title, size, len(kept), len(lines), False, cut, body, context, shown_as))
    return Collected(out, misses, failed)


def _xml(text: str) -> str:
    """qmd's ``escapeXml``: ``& < > " '`` as entities."""
    return escape(text, {'"': "&quot;", "'": "&apos;"})


def _numbered(body: str) -> str:
    return number_lines(body, 1)


def _csv_field(value: str | None) -> str:
    """qmd's CSV field: quoted only when it holds a comma, a quote or a newline."""
    if value is None:
        return ""
    if any(c in value for c in ',"\n'):
        return '"' + value.replace('"', '""') + '"'
    return value


def format_documents(
    items: Sequence[Fetched], fmt: str = "cli", *, line_numbers: bool = False, max_bytes: int = 10240
) -> str:
    """Render multi-get items in qmd's shapes (no trailing newline): ``file`` is the ``qmd://``
    URI, the docid ``#``-prefixed, ``context`` present when one applies, a skipped document has
    qmd's reason instead of a body.

    >>> f = [Fetched("kb/a.md", "abc123", "A", 4, 1, 2, False, True, "x", "Team notes"), Fetched("kb/b.md", "def456", "b.md", 99, 0, 9, True, False, None)]
    >>> print(format_documents(f, "files"))
    #abc123,qmd://kb/a.md,"Team notes"
    #def456,qmd://kb/b.md,[SKIPPED]
    >>> print(format_documents(f, "csv", max_bytes=50))
    docid,file,title,context,skipped,body
    #abc123,qmd://kb/a.md,A,Team notes,false,x
    #def456,qmd://kb/b.md,b.md,,true,File too large (0KB > 0KB). Use 'qmdlab get qmd://kb/b.md' to retrieve.
    """
    if fmt not in FORMATS:
        raise QmdlabError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if line_numbers:
        items = [it._replace(body=_numbered(it.body)) if it.body is not None else it for it in items]
    if fmt == "json":
        return json_text(
            [
                {
                    "file": it.file,
                    "docid": f"#{it.docid}",
                    "title": it.title,
                    **({"context": it.context} if it.context else {}),
                    **({"skipped": True, "reason": it.skip_reason(max_bytes)} if it.skipped else {"body": it.body}),
                }
                for it in items
            ]
        )
    if fmt == "csv":
        out = ["docid,file,title,context,skipped,body"]
        for it in items:
            fields = [
                f"#{it.docid}",
                printable(it.file),
                printable(it.title),
                printable_text(it.context) if it.context else None,
                "true" if it.skipped else "false",
                it.skip_reason(max_bytes) if it.skipped else it.body,
            ]
            out.append(",".join(_csv_field(v) for v in fields))
        return "\n".join(out)
    if fmt == "files":
        rows = []
        for it in items:
            ctx = ',"' + printable_text(it.context).replace('"', '""') + '"' if it.context else ""
            rows.append(f"#{it.docid},{printable(it.file)}{ctx}" + (",[SKIPPED]" if it.skipped else ""))
        return "\n".join(rows)
    if fmt == "xml":
        out = ['<?xml version="1.0" encoding="UTF-8"?>', "<documents>"]
        for it in items:
            out.append(f"  <document docid={quoteattr('#' + it.docid)}>")
            out.append(f"    <file>{_xml(it.file)}</file>")
            out.append(f"    <title>{_xml(it.title)}</title>")
            if it.context:
                out.append(f"    <context>{_xml(it.context)}</context>")
            if it.skipped:
                out.append("    <skipped>true</skipped>")
                out.append(f"    <reason>{_xml(it.skip_reason(max_bytes))}</reason>")
            else:
                out.append(f"    <body>{_xml(it.body or '')}</body>")
            out.append("  </document>")
        out.append("</documents>")
        return xml_text("\n".join(out))
    out = []
    for it in items:
        if fmt == "md":
            out.append(f"## {printable(it.file)}\n")
            out.append(f"**docid:** `#{it.docid}`\n")
            if it.title and it.title != it.file:
                out.append(f"**Title:** {printable(it.title)}\n")
            if it.context:
                out.append(f"**Context:** {printable_text(it.context)}\n")
            if it.skipped:
                out.append(f"> {it.skip_reason(max_bytes)}\n")
            else:
                out.append("```\n" + (it.body or "") + "\n```\n")
            continue
        rule = "=" * 60
        out.append(f"\n{rule}\nFile: {printable(it.file)}  #{it.docid}\n{rule}\n")
        if it.skipped:
            out.append(f"[SKIPPED: {it.skip_reason(max_bytes)}]")
            continue
        if it.context:
            out.append(f"Folder Context: {printable_text(it.context)}\n---\n")
        out.append(it.body or "")
    return "\n".join(out)


__all__ = ["Collected", "Fetched", "FORMATS", "collect", "format_documents"]

"""Result formatting for ``search``, ``vsearch`` and ``query``: ``--format cli|json|csv|md|xml|files``.

Build :class:`~qmdlab.pipeline.results.ResultRow` values with
:func:`~qmdlab.pipeline.results.build_rows` (re-exported here) or directly, then render them with
:func:`format_results`. The machine formats are qmd's (``src/cli/qmd.ts``'s ``outputResults``):
docid, score, file (the ``qmd://collection/path`` URI), title, context, line (the best-matching
line) and snippet (qmd's ``@@`` header and capped text) or, with ``--full``, the body; qmdlab's
own fields (docno, breadcrumb, parent, siblings, explain) are added beside them.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence

from qmdlab.display import json_text, printable, printable_text, xml_text
from qmdlab.errors import QmdlabError
from qmdlab.pipeline.results import (  # noqa: F401 — re-exported
    SNIPPET_CAP,
    SNIPPET_CAP_JSON,
    ResultRow,
    Snippet,
    build_rows,
    cap_snippet,
    hit_line,
    numbered_rows,
    query_terms,
    snippet,
    snippet_header,
)

FORMATS = ("cli", "json", "csv", "md", "xml", "files")


def qmd_uri(docno: str) -> str:
    """A document's ``qmd://collection/path`` URI (qmd's ``file``) from its docno.

    >>> qmd_uri("notes/a b.md")
    'qmd://notes/a b.md'
    """
    return f"qmd://{docno}"


def _machine_text(r: ResultRow, *, full: bool, cap: int, line_numbers: bool) -> str:
    """A row's snippet (or, with ``full``, its whole document) as the machine formats show it:
    capped at ``cap`` characters, numbered with ``line_numbers``, and — a snippet — opened by
    qmd's ``@@ -FIRST,COUNT @@ (B before, A after)`` header."""
    text = r.snippet if full else cap_snippet(r.snippet, cap)
    if line_numbers:
        text = numbered_rows([r._replace(snippet=text)])[0].snippet
    header = None if full else snippet_header(r)
    return text if header is None else f"{header}\n{text}"


def _dicts(
    rows: Sequence[ResultRow],
    contexts: Sequence | None = None,
    *,
    full: bool = False,
    line_numbers: bool = False,
    crumbs: Sequence[str] | None = None,
    explains: Sequence | None = None,
    cap: int = SNIPPET_CAP_JSON,
) -> list[dict]:
    """qmd's JSON result objects (``docid``, ``score``, ``file`` as a ``qmd://`` URI, ``line`` = the
    best-matching line, ``title``, ``context`` when there is one, ``snippet`` — or ``body`` with
    ``full``), then qmdlab's: ``docno``, ``breadcrumb``, ``parent``/``siblings``, ``explain``."""
    out = []
    for i, r in enumerate(rows):
        d: dict = {
            "docid": f"#{r.docid}",
            "score": round(r.score, 4),
            "file": qmd_uri(r.docno),
            "line": hit_line(r),
            "title": r.title,
        }
        if r.context:
            d["context"] = r.context
        d["body" if full else "snippet"] = _machine_text(r, full=full, cap=cap, line_numbers=line_numbers)
        d["docno"] = r.docno
        if crumbs is not None:
            d["breadcrumb"] = crumbs[i]
        if contexts is not None:
            hc = contexts[i]
            shown = hc.as_dict() if hc is not None else {"parent": None, "siblings": []}
            d["parent"], d["siblings"] = shown["parent"], shown["siblings"]
        if explains is not None and explains[i] is not None:
            d["explain"] = explains[i]
        out.append(d)
    return out


def result_dicts(
    rows: Sequence[ResultRow], *, cap: int = SNIPPET_CAP_JSON, line_numbers: bool = False, full: bool = False
) -> list[dict]:
    r"""qmd's result objects for ``rows`` — the one definition behind ``--json``, the MCP server's
    ``structuredContent`` and its REST ``/query`` and ``/search`` replies (each front end adds its
    own fields beside them).

    >>> result_dicts([ResultRow("n/a.md", "abc123", 0.5, 3, "A", "C", "x", total_lines=4)], line_numbers=True)[0]
    {'docid': '#abc123', 'score': 0.5, 'file': 'qmd://n/a.md', 'line': 3, 'title': 'A', 'context': 'C', 'snippet': '@@ -3,1 @@ (2 before, 1 after)\n3: x', 'docno': 'n/a.md'}
    """
    return _dicts(rows, full=full, line_numbers=line_numbers, cap=cap)


def _context_lines(hc) -> list[str]:
    """``parent: Title — summary`` and ``siblings: A · B`` of a hit (what there is of them)."""
    if hc is None:
        return []
    out = []
    if hc.parent_address is not None:
        summary = f" — {hc.parent_summary}" if hc.parent_summary else ""
        out.append(f"parent: {hc.parent_title or '(document)'}{summary}")
    if hc.siblings:
        out.append("siblings: " + " · ".join(t for _, t in hc.siblings))
    return out


EDITOR_ENV = ("QMDLAB_EDITOR_URI", "QMD_EDITOR_URI")


def editor_template(configured: str | None = None, environ=None) -> str | None:
    """The editor link template: ``$QMDLAB_EDITOR_URI``, else ``$QMD_EDITOR_URI``, else the
    index's ``editor_uri`` (``configured``); ``None``: no links.

    >>> editor_template("zed://file/{path}", {}), editor_template(None, {"QMD_EDITOR_URI": "x://{path}"})
    ('zed://file/{path}', 'x://{path}')
    """
    env = os.environ if environ is None else environ
    for name in EDITOR_ENV:
        if env.get(name):
            return env[name]
    return configured or None


def editor_link(template: str, path: str, line: int = 1, col: int = 1) -> str:
    """Fill an editor template: ``{path}`` (absolute, URI-encoded), ``{line}``, ``{col}``/``{column}``.

    >>> editor_link("vscode://file/{path}:{line}:{col}", "/n/a b.md", 3)
    'vscode://file//n/a%20b.md:3:1'
    """
    from urllib.parse import quote

    return (
        template.replace("{path}", quote(path))
        .replace("{line}", str(line))
        .replace("{column}", str(col))
        .replace("{col}", str(col))
    )


def hyperlink(text: str, uri: str | None) -> str:
    """``text`` as an OSC 8 terminal hyperlink to ``uri`` (unchanged without one).

    >>> hyperlink("a.md:3", "x://a").split(chr(27)), hyperlink("a.md", None)
    (['', ']8;;x://a', '\\\\a.md:3', ']8;;', '\\\\'], 'a.md')
    """
    esc = "\x1b"
    return f"{esc}]8;;{uri}{esc}\\{text}{esc}]8;;{esc}\\" if uri else text


def format_results(
    rows: Sequence[ResultRow],
    fmt: str = "cli",
    *,
    crumbs: Sequence[str] | None = None,
    contexts: Sequence | None = None,
    links: Sequence[str | None] | None = None,
    full: bool = False,
    line_numbers: bool = False,
    explains: Sequence | None = None,
    cap: int | None = None,
) -> str:
    """Render rows as qmd's formats do; the text ends without a trailing newline (``click.echo`` adds one).

    json, csv, xml, md and files are qmd's shapes: ``file`` is the ``qmd://collection/path`` URI,
    ``line`` the best-matching line, a snippet opens with qmd's ``@@ -FIRST,COUNT @@ (B before, A
    after)`` header and is capped at ``cap`` characters (qmd's: 300 in json, 500 in the others;
    0 = no cap); ``full`` (rows from :func:`~qmdlab.pipeline.results.full_rows`) shows whole
    documents (json: under ``body``); ``line_numbers`` numbers the lines from the document's line
    numbers (cli always does). csv's columns are qmd's ``docid,score,file,title,context,line,snippet``.

    qmdlab's fields come on top: ``crumbs`` (one ``"A > B"`` heading breadcrumb per row,
    :func:`qmdlab.search.hit_context.breadcrumbs`) adds a ``§ A > B`` line (cli), a ``**section:**``
    line (md) or a ``breadcrumb`` key (json); ``contexts`` (one
    :class:`~qmdlab.search.hit_context.HitContext` or ``None`` per row,
    :func:`~qmdlab.search.hit_context.hit_contexts`: ``--context``) adds the parent section and the
    sibling headings (cli, md; json's ``parent``/``siblings``); ``explains`` (one explain block or
    ``None`` per row: ``query --explain``) adds json's ``explain`` key; json rows also carry the
    ``docno``. A capped document's closing note (``truncated``) is not numbered. ``links`` (one
    editor URI or ``None`` per row, cli only) makes each ``path:line`` a terminal hyperlink
    (:func:`hyperlink`).

    >>> r = [ResultRow("n/a.md", "abc123", 0.5, 3, "A", None, "x", total_lines=4)]
    >>> print(format_results(r, "files"))
    #abc123,0.5000,qmd://n/a.md
    >>> print(format_results([r[0]._replace(docno="n/a, b.md", context="C")], "files"))  # CSV-quoted when needed
    #abc123,0.5000,"qmd://n/a, b.md",C
    >>> print(format_results(r, "csv"))
    docid,score,file,title,context,line,snippet
    #abc123,0.5000,qmd://n/a.md,A,,3,"@@ -3,1 @@ (2 before, 1 after)
    x"
    """
    if fmt not in FORMATS:
        raise QmdlabError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    limit = (SNIPPET_CAP_JSON if fmt == "json" else SNIPPET_CAP) if cap is None else cap
    if fmt == "json":
        return json_text(
            _dicts(rows, contexts, full=full, line_numbers=line_numbers, crumbs=crumbs, explains=explains, cap=limit)
        )
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["docid", "score", "file", "title", "context", "line", "snippet"])
        for r in rows:
            w.writerow(
                [
                    f"#{r.docid}",
                    f"{r.score:.4f}",
                    printable(qmd_uri(r.docno)),
                    printable(r.title),
                    printable_text(r.context or ""),
                    hit_line(r),
                    printable_text(_machine_text(r, full=full, cap=limit, line_numbers=line_numbers)),
                ]
            )
        return buf.getvalue().rstrip("\n")
    if fmt == "files":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        for r in rows:
            fields = [f"#{r.docid}", f"{r.score:.4f}", printable(qmd_uri(r.docno))]
            w.writerow(fields + [printable(r.context)] if r.context else fields)
        return buf.getvalue().rstrip("\n")
    if fmt == "xml":
        from xml.sax.saxutils import escape, quoteattr  # imports urllib.request: only when asked

        if not rows:
            return "<results></results>"
        items = []
        for r in rows:
            attrs = f"docid={quoteattr('#' + r.docid)} name={quoteattr(qmd_uri(r.docno))}"
            if r.title:
                attrs += f" title={quoteattr(r.title)}"
            if r.context:
                attrs += f" context={quoteattr(r.context)}"
            attrs += f' line="{hit_line(r)}" score="{r.score:.4f}"'
            text = _machine_text(r, full=full, cap=limit, line_numbers=line_numbers)
            items.append(f"<file {attrs}>\n{escape(text)}\n</file>")
        return xml_text("\n\n".join(items))
    if fmt == "md":
        out = []
        for i, r in enumerate(rows):
            block = [
                "---",
                f"# {printable(r.title or qmd_uri(r.docno))}",
                f"**file:** `{printable(qmd_uri(r.docno))}`",
                f"**docid:** `#{r.docid}`",
            ]
            if r.context:
                block.append(f"**context:** {printable_text(r.context)}")
            if crumbs is not None and crumbs[i]:
                block.append(f"**section:** {printable(crumbs[i])}")
            if contexts is not None:
                block.extend(f"**{printable(line).replace(': ', ':** ', 1)}" for line in _context_lines(contexts[i]))
            block.append("")
            block.append(printable_text(_machine_text(r, full=full, cap=limit, line_numbers=line_numbers)))
            out.append("\n".join(block))
        return "\n\n".join(out)
    if not rows:
        return "No results."
    out = []
    for i, r in enumerate(rows):
        where = f"{printable(r.docno)}:{hit_line(r)}"
        out.append(f"{hyperlink(where, links[i]) if links is not None else where}  #{r.docid}  score {r.score:.4f}")
        out.append(f"  {printable(r.title)}")
        if crumbs is not None and crumbs[i]:
            out.append(f"  § {printable(crumbs[i])}")
        if contexts is not None:
            out.extend(f"  {printable(line)}" for line in _context_lines(contexts[i]))
        if r.context:
            out.append(f"  context: {printable_text(r.context)}")
        lines = printable_text(r.snippet if full else cap_snippet(r.snippet, limit)).split("\n")
        for k, text in enumerate(lines):
            last_note = r.truncated and k == len(lines) - 1
            out.append(f"  {'':>5}  {text}" if last_note else f"  {r.line + k:>5}: {text}")
        out.append("")
    return "\n".join(out).rstrip("\n")

"""Result formatting for ``search``, ``vsearch`` and ``query``: ``--format cli|json|csv|md|xml|files``.

Build :class:`~qmdlab.pipeline.results.ResultRow` values with
:func:`~qmdlab.pipeline.results.build_rows` (re-exported here) or directly, then render them with
:func:`format_results`. Every format carries the
same fields as qmd's JSON: docid, score, file, line, title, context, snippet. ``file`` is the
docno (``collection/path``); ``line`` is the 1-based line where the snippet starts.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Sequence

from qmdlab.errors import QmdlabError
from qmdlab.pipeline.results import ResultRow, Snippet, build_rows, query_terms, snippet  # noqa: F401 — re-exported

FORMATS = ("cli", "json", "csv", "md", "xml", "files")


def printable(text: str) -> str:
    """``text`` for a terminal: Unicode format characters (bidirectional overrides such as
    U+202E, zero-width ones) written as ``\\uXXXX``, so a file name cannot display as another.
    The machine formats (json, csv, xml, files) keep names exact.

    >>> printable("notes/\u202egnp.md"), printable("東京.md")
    ('notes/\\\\u202egnp.md', '東京.md')
    """
    if text.isascii():
        return text
    import unicodedata

    return "".join(f"\\u{ord(ch):04x}" if unicodedata.category(ch) == "Cf" else ch for ch in text)


def _dicts(rows: Iterable[ResultRow], contexts: Sequence | None = None) -> list[dict]:
    out = [
        {
            "docid": f"#{r.docid}",
            "score": round(r.score, 4),
            "file": r.docno,
            "line": r.line,
            "title": r.title,
            "context": r.context,
            "snippet": r.snippet,
        }
        for r in rows
    ]
    if contexts is not None:
        for d, hc in zip(out, contexts):
            shown = hc.as_dict() if hc is not None else {"parent": None, "siblings": []}
            d["parent"], d["siblings"] = shown["parent"], shown["siblings"]
    return out


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
) -> str:
    """Render rows; the text ends without a trailing newline (``click.echo`` adds one).

    ``crumbs`` (one ``"A > B"`` heading breadcrumb per row, :func:`qmdlab.search.navigate.breadcrumbs`)
    adds a ``§ A > B`` line (cli) or a ``§`` item (md); json, csv, xml and files keep qmd's fields
    (the MCP tools' results carry ``heading_path``). ``contexts`` (one
    :class:`~qmdlab.search.navigate.HitContext` or ``None`` per row,
    :func:`~qmdlab.search.navigate.hit_contexts`: ``--context``) adds the parent section (title and
    summary) and the sibling headings: ``parent:``/``siblings:`` lines (cli, md) or the MCP hits'
    ``parent``/``siblings`` keys (json). A capped snippet's closing note (``truncated``) is not numbered. ``links`` (one editor URI or ``None`` per
    row, cli only) makes each ``path:line`` a terminal hyperlink (:func:`hyperlink`).

    >>> r = [ResultRow("n/a.md", "abc123", 0.5, 3, "A", None, "x")]
    >>> print(format_results(r, "files"))
    #abc123,0.5000,n/a.md,
    >>> print(format_results([r[0]._replace(docno="n/a, b.md")], "files"))  # CSV-quoted when needed
    #abc123,0.5000,"n/a, b.md",
    >>> print(format_results(r, "csv"))
    docid,score,file,line,title,context,snippet
    #abc123,0.5000,n/a.md,3,A,,x
    """
    if fmt not in FORMATS:
        raise QmdlabError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(_dicts(rows, contexts), ensure_ascii=False, indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["docid", "score", "file", "line", "title", "context", "snippet"])
        for r in rows:
            w.writerow([f"#{r.docid}", f"{r.score:.4f}", r.docno, r.line, r.title, r.context or "", r.snippet])
        return buf.getvalue().rstrip("\n")
    if fmt == "files":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        for r in rows:
            w.writerow([f"#{r.docid}", f"{r.score:.4f}", r.docno, r.context or ""])
        return buf.getvalue().rstrip("\n")
    if fmt == "xml":
        from xml.sax.saxutils import escape, quoteattr  # imports urllib.request: only when asked

        out = ["<results>"]
        for r in rows:
            out.append(
                f'  <result docid={quoteattr("#" + r.docid)} score="{r.score:.4f}" file={quoteattr(r.docno)} '
                f'line="{r.line}">'
            )
            out.append(f"    <title>{escape(r.title)}</title>")
            if r.context:
                out.append(f"    <context>{escape(r.context)}</context>")
            out.append(f"    <snippet>{escape(r.snippet)}</snippet>")
            out.append("  </result>")
        out.append("</results>")
        return "\n".join(out)
    if not rows:
        return "No results."
    if fmt == "md":
        out = []
        for i, r in enumerate(rows, 1):
            crumb = f" · § {crumbs[i - 1]}" if crumbs is not None and crumbs[i - 1] else ""
            out.append(
                f"## {i}. {printable(r.title)}\n\n`{printable(r.docno)}:{r.line}` · #{r.docid} · "
                f"score {r.score:.4f}{crumb}\n"
            )
            if contexts is not None and _context_lines(contexts[i - 1]):
                out.append("".join(f"- {line}\n" for line in _context_lines(contexts[i - 1])))
            if r.context:
                out.append(f"> {r.context}\n")
            out.append("```\n" + r.snippet + "\n```\n")
        return "\n".join(out).rstrip("\n")
    out = []
    for i, r in enumerate(rows):
        where = f"{printable(r.docno)}:{r.line}"
        out.append(f"{hyperlink(where, links[i]) if links is not None else where}  #{r.docid}  score {r.score:.4f}")
        out.append(f"  {printable(r.title)}")
        if crumbs is not None and crumbs[i]:
            out.append(f"  § {crumbs[i]}")
        if contexts is not None:
            out.extend(f"  {line}" for line in _context_lines(contexts[i]))
        if r.context:
            out.append(f"  context: {r.context}")
        lines = r.snippet.split("\n")
        for k, text in enumerate(lines):
            last_note = r.truncated and k == len(lines) - 1
            out.append(f"  {'':>5}  {text}" if last_note else f"  {r.line + k:>5}: {text}")
        out.append("")
    return "\n".join(out).rstrip("\n")

"""Result formatting for ``search``, ``vsearch`` and ``query``: ``--format cli|json|csv|md|xml|files``.

Build :class:`ResultRow` values with :func:`build_rows` (from :class:`~qmdlab.search.Hit`\\ s and
an index) or directly, then render them with :func:`format_results`. Every format carries the
same fields as qmd's JSON: docid, score, file, line, title, context, snippet. ``file`` is the
docno (``collection/path``); ``line`` is the 1-based line where the snippet starts.
"""
from __future__ import annotations

import csv
import io
import json
import re
from typing import TYPE_CHECKING, Iterable, NamedTuple, Sequence
from xml.sax.saxutils import escape, quoteattr

from qmdlab.errors import QmdlabError
from qmdlab.search.cjk import CJK_RUN, bigrams

if TYPE_CHECKING:
    from qmdlab.search import Hit
    from qmdlab.store import Index

FORMATS = ("cli", "json", "csv", "md", "xml", "files")
_WORD = re.compile(r"[^\W_]+")
_STOP = frozenset("a an and are as at be by for from how i in is it of on or the to what when where who why with".split())


class ResultRow(NamedTuple):
    docno: str
    docid: str
    score: float
    line: int
    title: str
    context: str | None
    snippet: str
    chunk_id: int | None = None


class Snippet(NamedTuple):
    line: int  # 1-based number of the first line of ``text``
    best_line: int  # 1-based number of the best-matching line
    text: str


def query_terms(query: str) -> list[str]:
    """Lower-cased words of a query for snippet matching (small stopword list; CJK → bigrams).

    >>> query_terms("How to rebase in Git? 東京大学")
    ['rebase', 'git', '東京', '京大', '大学']
    """
    out: list[str] = []
    for w in _WORD.findall(query.lower()):
        parts = [w]
        if CJK_RUN.search(w):
            parts = []
            pos = 0
            for m in CJK_RUN.finditer(w):
                if m.start() > pos:
                    parts.append(w[pos : m.start()])
                parts.extend(bigrams(m.group(0)))
                pos = m.end()
            if pos < len(w):
                parts.append(w[pos:])
        for p in parts:
            if p not in _STOP and p not in out:
                out.append(p)
    return out


def _stem(term: str) -> str:
    return term[: max(4, len(term) - 3)] if len(term) > 5 else term


def snippet(body: str, query: str, *, context: int = 1, lines: tuple[int, int] | None = None) -> Snippet:
    """The best line (most distinct query terms, crude stemming; first on ties) ± ``context``
    lines. ``lines=(first, last)`` (1-based, inclusive) restricts the choice, e.g. to a chunk.
    Without any match the first non-blank line of the range is used.

    >>> snippet("title\\nalpha\\nbeta gamma\\nalpha beta\\nend", "beta alpha", context=1)
    Snippet(line=3, best_line=4, text='beta gamma\\nalpha beta\\nend')
    >>> snippet("a\\n\\nzzz", "nothing")
    Snippet(line=1, best_line=1, text='a\\n')
    >>> snippet("---\\ntitle: x\\n---\\n# Backups\\ntext", "backups", lines=(4, 5))
    Snippet(line=4, best_line=4, text='# Backups\\ntext')
    """
    all_lines = body.split("\n")
    lo, hi = (1, len(all_lines)) if lines is None else (max(1, lines[0]), min(len(all_lines), lines[1]))
    stems = [_stem(t) for t in query_terms(query)]
    best, best_score = None, 0
    for no in range(lo, hi + 1):
        low = all_lines[no - 1].lower()
        s = sum(1 for t in stems if t in low)
        if s > best_score:
            best, best_score = no, s
    if best is None:
        best = next((no for no in range(lo, hi + 1) if all_lines[no - 1].strip()), lo)
    # context stays inside the range too, so a title line never drags in the front matter's `---`
    first = max(lo, best - context)
    last = min(hi, best + context)
    return Snippet(first, best, "\n".join(all_lines[first - 1 : last]))


def build_rows(idx: "Index", hits: Sequence["Hit"], query: str, *, context: int = 1) -> list[ResultRow]:
    """Rows for hits: title, all matching contexts (joined by `` | ``), and a snippet (inside
    the hit's chunk when it has one, else anywhere below the front matter)."""
    rows = []
    span_of: dict[int, tuple[int, int]] = {}
    chunk_ids = [h.chunk_id for h in hits if h.chunk_id is not None]
    if chunk_ids:
        ch = idx.chunks([h.docno for h in hits if h.chunk_id is not None])
        for cid, ls, le in zip(ch["chunk_id"].to_list(), ch["line_start"].to_list(), ch["line_end"].to_list()):
            span_of[cid] = (ls, le)
    from qmdlab.store.frontmatter import parse_front_matter

    for h in hits:
        doc = idx.get(h.docno)
        span = span_of.get(h.chunk_id) if h.chunk_id is not None else None
        if span is None:  # whole document: search below the front matter
            off = parse_front_matter(doc.body).body_offset
            span = (doc.body.count("\n", 0, off) + 1, doc.body.count("\n") + 1)
        snip = snippet(doc.body, query, context=context, lines=span)
        ctx = idx.contexts_for(h.docno)
        rows.append(ResultRow(h.docno, doc.docid, h.score, snip.line, doc.title, " | ".join(ctx) or None,
                              snip.text, h.chunk_id))
    return rows


def _dicts(rows: Iterable[ResultRow]) -> list[dict]:
    return [{"docid": f"#{r.docid}", "score": round(r.score, 4), "file": r.docno, "line": r.line, "title": r.title,
             "context": r.context, "snippet": r.snippet} for r in rows]


def format_results(rows: Sequence[ResultRow], fmt: str = "cli") -> str:
    """Render rows; the text ends without a trailing newline (``click.echo`` adds one).

    >>> r = [ResultRow("n/a.md", "abc123", 0.5, 3, "A", None, "x")]
    >>> print(format_results(r, "files"))
    #abc123,0.5000,n/a.md,
    >>> print(format_results(r, "csv"))
    docid,score,file,line,title,context,snippet
    #abc123,0.5000,n/a.md,3,A,,x
    """
    if fmt not in FORMATS:
        raise QmdlabError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(_dicts(rows), ensure_ascii=False, indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["docid", "score", "file", "line", "title", "context", "snippet"])
        for r in rows:
            w.writerow([f"#{r.docid}", f"{r.score:.4f}", r.docno, r.line, r.title, r.context or "", r.snippet])
        return buf.getvalue().rstrip("\n")
    if fmt == "files":
        return "\n".join(f"#{r.docid},{r.score:.4f},{r.docno},{r.context or ''}" for r in rows)
    if fmt == "xml":
        out = ["<results>"]
        for r in rows:
            out.append(f"  <result docid={quoteattr('#' + r.docid)} score=\"{r.score:.4f}\" file={quoteattr(r.docno)} "
                       f"line=\"{r.line}\">")
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
            out.append(f"## {i}. {r.title}\n\n`{r.docno}:{r.line}` · #{r.docid} · score {r.score:.4f}\n")
            if r.context:
                out.append(f"> {r.context}\n")
            out.append("```\n" + r.snippet + "\n```\n")
        return "\n".join(out).rstrip("\n")
    out = []
    for r in rows:
        out.append(f"{r.docno}:{r.line}  #{r.docid}  score {r.score:.4f}")
        out.append(f"  {r.title}")
        if r.context:
            out.append(f"  context: {r.context}")
        for k, text in enumerate(r.snippet.split("\n")):
            out.append(f"  {r.line + k:>5}: {text}")
        out.append("")
    return "\n".join(out).rstrip("\n")

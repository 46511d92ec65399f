"""Result rows and snippets: what the engine hands every front end (CLI formats, MCP, traces).

:func:`build_rows` turns :class:`~qmdlab.search.Hit`\\ s of an index into :class:`ResultRow`
values — title, docid, context and a snippet (:func:`snippet`: the line with most query terms,
:func:`qmdlab.terms.terms`). The pipeline's ``results`` table is made from them
(:meth:`qmdlab.Lab.query`), the CLI renders them (:func:`qmdlab.output.format_results`) and the
MCP server serves them; this module knows no front end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from qmdlab.display import number_lines
from qmdlab.terms import terms

if TYPE_CHECKING:
    from qmdlab.search import Hit
    from qmdlab.store import Index


class ResultRow(NamedTuple):
    docno: str
    docid: str
    score: float
    line: int
    title: str
    context: str | None
    snippet: str
    chunk_id: int | None = None
    truncated: bool = False
    """The snippet was capped (:func:`full_rows` with ``max_chars``): its last line is the note
    saying how much was left out, not a line of the document."""
    best_line: int = 0
    """1-based number of the best-matching line (qmd's ``line``); 0 = not known (a row read back
    from a trace: :func:`located_rows` estimates it)."""
    total_lines: int = 0
    """Lines in the whole document (for the snippet header's before/after counts); 0 = not known."""


class Snippet(NamedTuple):
    line: int  # 1-based number of the first line of ``text``
    best_line: int  # 1-based number of the best-matching line
    text: str


def query_terms(query: str) -> list[str]:
    """The terms of a query for snippet matching (:func:`qmdlab.terms.terms`).

    >>> query_terms("How to rebase in Git? 東京大学")
    ['rebase', 'git', '東京', '京大', '大学']
    """
    return terms(query)


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


def build_rows(
    idx: Index,
    hits: Sequence[Hit],
    query: str,
    *,
    context: int = 1,
    spans: dict[int, tuple[int, int]] | None = None,
    vanished: list[str] | None = None,
) -> list[ResultRow]:
    """Rows for hits: title, all matching contexts (joined by `` | ``), and a snippet (inside
    the hit's chunk when it has one, else anywhere below the front matter).

    ``spans`` (``{chunk_id: (line_start, line_end)}`` covering the hits' chunks, e.g. from the
    ``Index.chunks`` rows a caller already read) saves reading the chunks again.

    A hit whose document left the index after the search found it (an ``update`` renamed or
    removed the file meanwhile) gets no row; its docno is appended to ``vanished`` for the
    caller's note. A damaged index still raises."""
    rows = []
    span_of: dict[int, tuple[int, int]] = {}
    chunk_ids = [h.chunk_id for h in hits if h.chunk_id is not None]
    if chunk_ids and spans is not None and all(c in spans for c in chunk_ids):
        span_of = spans
    elif chunk_ids:
        ch = idx.chunks([h.docno for h in hits if h.chunk_id is not None])
        for cid, ls, le in zip(ch["chunk_id"].to_list(), ch["line_start"].to_list(), ch["line_end"].to_list()):
            span_of[cid] = (ls, le)
    from qmdlab.store.frontmatter import parse_front_matter

    docs = idx.get_many(h.docno for h in hits)  # one query for the list
    contexts = idx.contexts()
    for h in hits:
        doc = docs.get(h.docno) or _still_there(idx, h.docno)
        if doc is None:
            if vanished is not None:
                vanished.append(h.docno)
            continue
        span = span_of.get(h.chunk_id) if h.chunk_id is not None else None
        if span is None:  # whole document: search below the front matter
            off = parse_front_matter(doc.body).body_offset
            span = (doc.body.count("\n", 0, off) + 1, doc.body.count("\n") + 1)
        snip = snippet(doc.body, query, context=context, lines=span)
        rows.append(
            ResultRow(
                h.docno,
                doc.docid,
                h.score,
                snip.line,
                doc.title,
                idx.context_text(h.docno, contexts),
                snip.text,
                h.chunk_id,
                best_line=snip.best_line,
                total_lines=doc.body.count("\n") + 1,
            )
        )
    return rows


def _still_there(idx: Index, docno: str):
    """The document ``docno``, or ``None`` when it is no longer indexed (a damaged index raises)."""
    from qmdlab.errors import DocumentNotFoundError

    try:
        return idx.get(docno)
    except DocumentNotFoundError:
        return None


def vanished_note(docnos: Sequence[str]) -> str:
    """The note for hits whose documents left the index while the query ran.

    >>> vanished_note(["a/x.md"])
    'a/x.md: renamed or removed from the index while the query ran; left out (run the query again)'
    """
    return f"{', '.join(docnos)}: renamed or removed from the index while the query ran; left out (run the query again)"


def full_rows(idx: Index, rows: Sequence[ResultRow], *, max_chars: int = 0) -> list[ResultRow]:
    """The same rows with the whole document as the snippet (starting at line 1): ``--full``.

    ``max_chars`` > 0 caps each document (``--max-chars``) with
    :func:`qmdlab.search.navigate.cap_text`: a capped snippet ends with a line saying how many
    characters were left out and the ``qmdlab get`` that reads on (``truncated=True``).
    """
    from qmdlab.search.navigate import cap_text

    out = []
    for r in rows:
        doc = _still_there(idx, r.docno)
        if doc is None:  # renamed or removed since the search: left out, as build_rows does
            continue
        body = doc.body
        capped = cap_text(body[:-1] if body.endswith("\n") else body, max_chars, read_on=(r.docno, 1))
        out.append(r._replace(line=1, snippet=capped.text, truncated=capped.truncated))
    return out


#: qmd's snippet caps (``extractSnippet``'s ``maxLen``): 300 characters in JSON and MCP replies,
#: 500 in every other format.
SNIPPET_CAP_JSON = 300
SNIPPET_CAP = 500


def cap_snippet(text: str, max_len: int) -> str:
    """``text`` cut to ``max_len`` characters, ending in ``...`` when cut (qmd's snippet cap).

    >>> cap_snippet("abcdefgh", 6), cap_snippet("abc", 6), cap_snippet("abcdefgh", 0)
    ('abc...', 'abc', 'abcdefgh')
    """
    if max_len <= 0 or len(text) <= max_len:
        return text
    return text[: max(0, max_len - 3)] + "..."


def hit_line(row: ResultRow) -> int:
    """The row's best-matching line: :attr:`ResultRow.best_line`, else estimated from the snippet
    (one context line above the best one, :func:`qmdlab.search.hit_context.snippet_hit_line`).

    >>> hit_line(ResultRow("k/a.md", "d", 1.0, 3, "A", None, "x\\ny\\nz", best_line=5)), hit_line(ResultRow("k/a.md", "d", 1.0, 3, "A", None, "x\\ny"))
    (5, 4)
    """
    if row.best_line:
        return row.best_line
    line = int(row.line or 1)
    return line + (1 if line > 1 and "\n" in (row.snippet or "") else 0)


def snippet_header(row: ResultRow) -> str | None:
    """qmd's diff-style snippet header: ``@@ -FIRST,COUNT @@ (B before, A after)`` — where the
    snippet starts, its lines and how many lines of the document are above and below it; ``None``
    when the document's length is not known.

    >>> snippet_header(ResultRow("k/a.md", "d", 1.0, 3, "A", None, "x\\ny\\nz", total_lines=10))
    '@@ -3,3 @@ (2 before, 5 after)'
    """
    if not row.total_lines:
        return None
    count = row.snippet.count("\n") + 1
    before = row.line - 1
    after = max(0, row.total_lines - (row.line + count - 1))
    return f"@@ -{row.line},{count} @@ ({before} before, {after} after)"


def located_rows(idx: Index, rows: Sequence[ResultRow]) -> list[ResultRow]:
    """The rows with :attr:`~ResultRow.best_line` and :attr:`~ResultRow.total_lines` filled where
    they are not known (rows read back from a trace); one read for the list."""
    todo = [r.docno for r in rows if not r.total_lines]
    docs = idx.get_many(todo) if todo else {}
    out = []
    for r in rows:
        doc = docs.get(r.docno)
        total = r.total_lines or (doc.body.count("\n") + 1 if doc is not None else 0)
        out.append(r._replace(best_line=hit_line(r), total_lines=total))
    return out


def numbered_rows(rows: Sequence[ResultRow]) -> list[ResultRow]:
    """The same rows with line-numbered snippets (``--line-numbers`` for json/csv/md/xml); a
    capped snippet's closing note is not numbered.

    >>> capped = ResultRow("k/a.md", "d", 1.0, 1, "A", None, "x\\ny\\n… [9 more characters]", None, True)
    >>> numbered_rows([capped])[0].snippet
    '1: x\\n2: y\\n… [9 more characters]'
    """
    out = []
    for r in rows:
        text, note = r.snippet, None
        if r.truncated:
            text, _, note = text.rpartition("\n")
        out.append(r._replace(snippet=number_lines(text, r.line) + (f"\n{note}" if note is not None else "")))
    return out

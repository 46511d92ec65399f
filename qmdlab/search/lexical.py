"""Lexical retrieval: FTS5 query building and BM25 search.

Two query modes (DESIGN §3.3):

``and`` — qmd's builder. Every bare term becomes a prefix term ``"term"*`` and all positive
parts are joined by ``AND``; ``"quoted phrases"`` stay exact phrases; ``-term`` / ``-"phrase"``
are negated (``… NOT "term"*``); a term made of several word pieces (``multi-agent``,
``node.js``) becomes the phrase of its pieces (qmd only does this for hyphens and glues other
punctuation together; splitting matches how ``unicode61`` tokenises the text); a CJK run
becomes the phrase of its characters. Negations without any positive part give ``None``.

``or`` — any-term ranking: bare terms (stopwords dropped unless nothing else is left) are
prefix terms ``"term"*`` OR-ed together, word pieces become separate terms, phrases stay
phrases, a CJK run becomes its character-bigram phrases (see :mod:`qmdlab.search.cjk`), and
negations apply to the whole disjunction. On CISI (76 judged queries, nDCG@10) prefix terms
scored 0.348 against 0.340 for plain ``"term"`` strings (0.322 with plain terms and no
stopword removal); ``and`` scored 0.010 (long natural-language queries rarely match every term).

Safety: the query text is cut into word pieces (letters, digits and inner apostrophes) and
every piece is emitted inside double quotes, so no user character can act as FTS5 syntax
(``"``, ``*``, ``^``, ``:``, ``(``, ``NEAR``, ``AND`` …).
"""
from __future__ import annotations

import re
import sqlite3
from typing import TYPE_CHECKING, Iterable

from qmdlab.errors import QmdlabError
from qmdlab.search.cjk import CJK_RUN, bigrams
from qmdlab.search.filters import SearchFilters
from qmdlab.search.hit import Hit, normalize_bm25

if TYPE_CHECKING:
    from qmdlab.store import Index

#: FTS5 column weights: filepath, title, body.
BM25_WEIGHTS = (1.5, 4.0, 1.0)
MODES = ("and", "or")

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves""".split()
)

_PIECE = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


def _pieces(token: str) -> list[str]:
    """Word pieces of a token, lower-cased; CJK runs are split off as their own pieces.

    >>> _pieces("Node.js"), _pieces("multi-agent"), _pieces("东京tower"), _pieces('"*^:(')
    (['node', 'js'], ['multi', 'agent'], ['东京', 'tower'], [])
    """
    out: list[str] = []
    for p in _PIECE.findall(token):
        pos = 0
        for m in CJK_RUN.finditer(p):
            if m.start() > pos:
                out.append(p[pos : m.start()].lower())
            out.append(m.group(0))
            pos = m.end()
        if pos < len(p):
            out.append(p[pos:].lower())
    return out


def _split_query(text: str) -> list[tuple[bool, bool, str]]:
    """``(negated, quoted, raw)`` parts, qmd's scanner: whitespace-separated terms, ``"…"``
    phrases (an unclosed quote runs to the end), a leading ``-`` negates.

    >>> _split_query('a -"b c" -d "e')
    [(False, False, 'a'), (True, True, 'b c'), (True, False, 'd'), (False, True, 'e')]
    """
    parts: list[tuple[bool, bool, str]] = []
    s = text.strip()
    i, n = 0, len(s)
    while i < n:
        while i < n and s[i].isspace():
            i += 1
        if i >= n:
            break
        neg = s[i] == "-"
        if neg:
            i += 1
        if i < n and s[i] == '"':
            j = s.find('"', i + 1)
            j = n if j < 0 else j
            parts.append((neg, True, s[i + 1 : j]))
            i = j + 1
        else:
            j = i
            while j < n and not s[j].isspace() and s[j] != '"':
                j += 1
            if j > i:
                parts.append((neg, False, s[i:j]))
            i = j
    return parts


def _phrase(pieces: list[str]) -> str:
    """A quoted FTS5 phrase; CJK pieces are spelled out character by character."""
    toks: list[str] = []
    for p in pieces:
        toks.extend(list(p) if CJK_RUN.fullmatch(p) else [p])
    return '"' + " ".join(toks) + '"'


def build_fts_query(text: str, mode: str = "and") -> str | None:
    """Turn user text into a safe FTS5 MATCH expression; ``None`` when nothing is searchable.

    >>> build_fts_query("git rebase -force")
    '"git"* AND "rebase"* NOT "force"*'
    >>> build_fts_query('"exact phrase" multi-agent 東京')
    '"exact phrase" AND "multi agent" AND "東 京"'
    >>> build_fts_query("how to use the git rebase", mode="or")
    '"use"* OR "git"* OR "rebase"*'
    >>> build_fts_query('東京大学 -"old notes"', mode="or")
    '("東 京" OR "京 大" OR "大 学") NOT "old notes"'
    >>> build_fts_query("the") is None, build_fts_query("the", mode="or"), build_fts_query('-x "*:^"')
    (False, '"the"*', None)
    """
    if mode not in MODES:
        raise QmdlabError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    positive: list[str] = []
    negative: list[str] = []
    stop_only: list[str] = []
    for neg, quoted, raw in _split_query(text):
        pieces = _pieces(raw)
        if not pieces:
            continue
        target = negative if neg else positive
        if quoted:
            exprs = [_phrase(pieces)]
        elif mode == "and":
            if len(pieces) == 1 and not CJK_RUN.fullmatch(pieces[0]):
                exprs = [f'"{pieces[0]}"*']
            else:
                exprs = [_phrase(pieces)]
        else:
            exprs = []
            for p in pieces:
                if CJK_RUN.fullmatch(p):
                    exprs.extend(_phrase([g]) for g in bigrams(p))
                elif p in STOPWORDS and not neg:
                    stop_only.append(f'"{p}"*')
                else:
                    exprs.append(f'"{p}"*')
        for e in exprs:
            if e not in target:
                target.append(e)
    if mode == "or" and not positive:
        positive = list(dict.fromkeys(stop_only))
    if not positive:
        return None
    if mode == "and":
        result = " AND ".join(positive)
        for n in negative:
            result += f" NOT {n}"
        return result
    result = " OR ".join(positive)
    if negative:
        if len(positive) > 1:
            result = f"({result})"
        result += "".join(f" NOT {n}" for n in negative)
    return result


def bm25_search(
    idx: "Index",
    text: str,
    *,
    limit: int = 20,
    mode: str = "or",
    collections: Iterable[str] | None = None,
    filters: SearchFilters | None = None,
) -> list[Hit]:
    """BM25 over active documents, best first (ties by docno).

    Parameters
    ----------
    idx : qmdlab.store.Index
        The index to search.
    text : str
        User query text; turned into FTS5 syntax by :func:`build_fts_query`.
    limit : int
        Maximum number of hits.
    mode : {"or", "and"}
        Query mode (see the module docstring).
    collections : iterable of str, optional
        Restrict to these collections (unknown names raise :class:`~qmdlab.errors.ConfigError`).
    filters : SearchFilters, optional
        Tag and date filters.

    Returns
    -------
    list of Hit
        ``backend_score`` is FTS5's ``bm25(documents_fts, 1.5, 4.0, 1.0)`` (negative; lower is
        better); ``score`` is ``|bm25| / (1 + |bm25|)``; ``chunk_id`` is ``None``. Empty when
        nothing matches or nothing in ``text`` is searchable.
    """
    query = build_fts_query(text, mode)
    if query is None or limit <= 0:
        return []
    w = ", ".join(str(x) for x in BM25_WEIGHTS)
    rows = None
    if collections is None and (filters is None or filters.empty):
        rows = _top_rows_first(idx, query, w, int(limit))
    if rows is None:
        where, params = idx._coll_clause(collections)
        fsql, fparams = (filters or SearchFilters()).sql("d")
        sql = (
            f"SELECT d.collection || '/' || d.path AS docno, bm25(documents_fts, {w}) AS s "
            "FROM documents_fts JOIN documents d ON d.id = documents_fts.rowid "
            f"WHERE documents_fts MATCH ? AND d.active = 1{where}{fsql} ORDER BY s, docno LIMIT ?"
        )
        try:
            with idx._lock:
                rows = idx.conn.execute(sql, [query, *params, *fparams, int(limit)]).fetchall()
        except sqlite3.OperationalError as err:  # a builder bug, never user syntax: report it plainly
            raise RuntimeError(f"FTS5 rejected the built query {query!r}: {err}") from err
    return [Hit(docno, None, rank, float(s), normalize_bm25(float(s))) for rank, (docno, s) in enumerate(rows, 1)]


def _top_rows_first(idx: "Index", query: str, weights: str, limit: int) -> list[tuple[str, float]] | None:
    """The unfiltered search's ``(docno, score)`` rows, ranking only FTS5's best ``limit + 1`` rows
    and joining just those to ``documents`` (instead of every matching row); ``None`` when that
    cannot be exact, and the caller runs the full query.

    Exact because FTS5 holds active documents only (the schema's triggers), which is checked
    here anyway: a fetched row without an active document gives ``None``. When the ``limit``-th
    and the next score are equal, which of the tied rows make the cut is decided by docno, which
    the inner query does not see: ``None`` too.
    """
    sql = (
        "SELECT d.collection || '/' || d.path AS docno, f.s, d.active FROM "
        f"(SELECT rowid AS id, bm25(documents_fts, {weights}) AS s FROM documents_fts "
        "WHERE documents_fts MATCH ? ORDER BY s LIMIT ?) f "
        "LEFT JOIN documents d ON d.id = f.id ORDER BY f.s, docno"
    )
    try:
        with idx._lock:
            rows = idx.conn.execute(sql, [query, limit + 1]).fetchall()
    except sqlite3.OperationalError as err:  # a builder bug, never user syntax: report it plainly
        raise RuntimeError(f"FTS5 rejected the built query {query!r}: {err}") from err
    if any(active != 1 for _, _, active in rows):
        return None
    if len(rows) > limit and rows[limit - 1][1] == rows[limit][1]:
        return None
    return [(docno, s) for docno, s, _ in rows[:limit]]

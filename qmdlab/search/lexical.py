"""Lexical retrieval: FTS5 query building and BM25 search.

Two query modes (docs/design.md, pipeline step 3):

``and`` — qmd's builder. Every bare term becomes a prefix term ``"term"*`` and all positive
parts are joined by ``AND``; ``"quoted phrases"`` stay exact phrases; ``-term`` / ``-"phrase"``
are negated (``… NOT "term"*``); a term made of several word pieces (``multi-agent``,
``node.js``) becomes the phrase of its pieces (qmd only does this for hyphens and glues other
punctuation together; splitting matches how ``unicode61`` tokenises the text); a CJK run
becomes the phrase of its characters. Negations without any positive part give ``None``.

``or`` — any-term ranking: bare terms are OR-ed together, word pieces become separate
terms, phrases stay phrases, a CJK run becomes its character-bigram phrases (see
:mod:`qmdlab.terms`), and negations apply to the whole disjunction. Three switches
(defaults in brackets, the same as :class:`~qmdlab.pipeline.config.PipelineConfig`'s):
``prefix`` writes bare terms as prefix terms ``"term"*`` [on]; ``stopwords`` drops
:data:`qmdlab.terms.BM25_STOPWORDS` unless nothing else is left [on]; ``query_tf`` repeats a
term once per occurrence in the query [on], so ``bm25()`` — a sum over the expression's phrases — weights it by its query
frequency (BM25's ``qtf``). On CISI (76 judged queries, nDCG@10) writing each term once was
what cost qmdlab's BM25 most against a plain FTS5 query: 0.348 with each term once, 0.403
with ``query_tf`` (``experiments/cisi_bm25_factors/run.py``). ``and`` scored 0.010 there (long
natural-language queries rarely match every term).

``msm`` — minimum-should-match: the ``or`` expression, keeping only documents that match at
least :func:`required_matches` of the distinct positive terms (``min_match`` ≥ 1 is a count,
0 < ``min_match`` < 1 a share of the terms, rounded down, at least one — Elasticsearch's
``minimum_should_match``). Ranking is unchanged: it is the ``or`` ranking, filtered.

Column weights (``filepath, title, body`` and, optionally, ``expansions``) go straight to FTS5's
``bm25()``. ``expansions`` holds the document's kept generated queries (doc2query,
``qmdlab expand-docs``; :mod:`qmdlab.store.doc_expansions`). At expansion weight 0 (the default) the
match itself is restricted to the other three columns (``{filepath title body} : (…)``), so no
document is found through its expansions alone and no expansion term adds to a score; what stays is
FTS5's length normalisation, which counts every column's tokens: once an index has expansions, a
document's length includes them at any weight (as the appended queries of docT5query do), and
``qmdlab expand-docs --clear`` gives the index its old scores back. An index made before the column
existed has three columns (:func:`fts_column_count`): the fourth weight is ignored there.
``experiments/cisi_bm25_factors/run.py`` measures each choice (experiments/cisi_bm25_factors/README.md).

Limits: a query longer than :data:`MAX_QUERY_CHARS` characters or with more than
:data:`MAX_QUERY_TERMS` distinct terms is refused with a :class:`~qmdlab.errors.QmdlabError`, and
``query_tf`` repeats a term at most :data:`MAX_TERM_REPEAT` times, so the built expression — and
the time FTS5 takes on it — stays bounded whatever the input.

Safety: the query text is cut into word pieces (letters, digits and inner apostrophes,
:func:`qmdlab.terms.query_pieces`) and every piece is emitted inside double quotes, so no user
character can act as FTS5 syntax (``"``, ``*``, ``^``, ``:``, ``(``, ``NEAR``, ``AND`` …).
"""

from __future__ import annotations

import contextlib
import functools
import math
import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, NoReturn

from qmdlab.errors import QmdlabError
from qmdlab.search.filters import SearchFilters, document_scope
from qmdlab.search.hit import Hit, normalize_bm25
from qmdlab.terms import BM25_STOPWORDS, CJK_RUN, bigrams, query_pieces

if TYPE_CHECKING:
    from qmdlab.store import Index

#: FTS5 column weights: filepath, title, body (see ``PipelineConfig.bm25_weight_*``); the
#: doc-queries column, when no fourth weight is given, has weight 0.
BM25_WEIGHTS = (1.5, 4.0, 1.0)
#: The column filter of a search that leaves the doc-queries column out (its weight is 0).
TEXT_COLUMNS = "{filepath title body}"
MODES = ("and", "or", "msm")
#: Longest query text searched (characters); longer ones are refused.
MAX_QUERY_CHARS = 10_000
#: Most distinct terms (words, phrases) one query may hold.
MAX_QUERY_TERMS = 256
#: ``query_tf``: a term repeated in the query counts at most this many times.
MAX_TERM_REPEAT = 8
#: Larger result limits are this one (more than any index holds).
MAX_LIMIT = 2**31 - 1


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


class FtsQuery(NamedTuple):
    """A built query: the full MATCH ``expression`` and its distinct ``positive`` terms (each a
    valid MATCH expression on its own; ``msm`` counts how many of them a document matches)."""

    expression: str | None
    positive: tuple[str, ...]


def parse_fts_query(
    text: str, mode: str = "and", *, prefix: bool = True, stopwords: bool = True, query_tf: bool = True
) -> FtsQuery:
    """:func:`build_fts_query` with the positive terms kept apart (see :class:`FtsQuery`).

    Remembered for the last 512 distinct calls (the result is an immutable tuple): a repeated
    query — a search box, the pipeline's probe and its BM25 list — is parsed once.

    >>> parse_fts_query("git rebase -merge", "msm", prefix=False)
    FtsQuery(expression='("git" OR "rebase") NOT "merge"', positive=('"git"', '"rebase"'))
    """
    if mode not in MODES:
        raise QmdlabError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    text = text.encode("utf-8", "ignore").decode("utf-8")  # bytes that were not UTF-8 are dropped
    if len(text) > MAX_QUERY_CHARS:
        raise QmdlabError(
            f"search query of {len(text)} characters is over the limit of {MAX_QUERY_CHARS}; "
            "shorten it to its key words"
        )
    return _parse_fts_query(text, mode, bool(prefix), bool(stopwords), bool(query_tf))


def check_query_length(text: str | None, what: str = "query") -> None:
    """Refuse query text over :data:`MAX_QUERY_CHARS` characters with a one-line
    :class:`~qmdlab.errors.QmdlabError` — the cap every query text has (keyword, vector and hyde
    sub-queries and intents alike: a megabyte of text costs seconds to embed).

    >>> check_query_length("x" * MAX_QUERY_CHARS)
    >>> check_query_length("x" * (MAX_QUERY_CHARS + 1), "vec search")
    Traceback (most recent call last):
    ...
    qmdlab.errors.QmdlabError: vec search of 10001 characters is over the limit of 10000; shorten it
    """
    if text is not None and len(text) > MAX_QUERY_CHARS:
        raise QmdlabError(f"{what} of {len(text)} characters is over the limit of {MAX_QUERY_CHARS}; shorten it")


@functools.lru_cache(maxsize=512)
def _parse_fts_query(text: str, mode: str, prefix: bool, stopwords: bool, query_tf: bool) -> FtsQuery:
    if mode not in MODES:
        raise QmdlabError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    prefix = prefix or mode == "and"  # qmd's and-mode builder always uses prefix terms
    star = "*" if prefix else ""
    positive: list[str] = []
    negative: list[str] = []
    stop_only: list[str] = []
    counts: dict[tuple[bool, str], int] = {}
    for neg, quoted, raw in _split_query(text):
        pieces = query_pieces(raw)
        if not pieces:
            continue
        target = negative if neg else positive
        if quoted:
            exprs = [_phrase(pieces)]
        elif mode == "and":
            if len(pieces) == 1 and not CJK_RUN.fullmatch(pieces[0]):
                exprs = [f'"{pieces[0]}"{star}']
            else:
                exprs = [_phrase(pieces)]
        else:
            exprs = []
            for p in pieces:
                if CJK_RUN.fullmatch(p):
                    exprs.extend(_phrase([g]) for g in bigrams(p))
                elif stopwords and p in BM25_STOPWORDS and not neg:
                    stop_only.append(f'"{p}"{star}')
                else:
                    exprs.append(f'"{p}"{star}')
        repeat = MAX_TERM_REPEAT if query_tf and not neg and mode != "and" else 1
        for e in exprs:
            seen = counts.get((neg, e), 0)
            if seen < repeat:
                target.append(e)
            counts[(neg, e)] = seen + 1
        if len(counts) > MAX_QUERY_TERMS:
            raise QmdlabError(
                f"search query has more than {MAX_QUERY_TERMS} distinct terms; shorten it to its key words"
            )
    if mode != "and" and not positive:
        positive = list(dict.fromkeys(stop_only))
    if not positive:
        return FtsQuery(None, ())
    if mode == "and":
        result = " AND ".join(positive)
        for n in negative:
            result += f" NOT {n}"
        return FtsQuery(result, tuple(positive))
    distinct = tuple(dict.fromkeys(positive))
    result = " OR ".join(positive)
    if negative:
        if len(positive) > 1:
            result = f"({result})"
        result += "".join(f" NOT {n}" for n in negative)
    return FtsQuery(result, distinct)


def build_fts_query(
    text: str, mode: str = "and", *, prefix: bool = True, stopwords: bool = True, query_tf: bool = True
) -> str | None:
    """Turn user text into a safe FTS5 MATCH expression; ``None`` when nothing is searchable.

    The defaults are :class:`~qmdlab.pipeline.config.PipelineConfig`'s: prefix terms, stopwords
    dropped (``or``/``msm``, unless nothing else is left), repeated words repeated (``query_tf``,
    ``or``/``msm``). ``and`` mode always uses prefix terms and each term once (qmd).

    >>> build_fts_query("git rebase -force")
    '"git"* AND "rebase"* NOT "force"*'
    >>> build_fts_query('"exact phrase" multi-agent 東京')
    '"exact phrase" AND "multi agent" AND "東 京"'
    >>> build_fts_query("how to use the git rebase", mode="or")
    '"use"* OR "git"* OR "rebase"*'
    >>> build_fts_query("how to use the git rebase", mode="or", prefix=False, stopwords=False)
    '"how" OR "to" OR "use" OR "the" OR "git" OR "rebase"'
    >>> build_fts_query("rebase git rebase", mode="or"), build_fts_query("rebase git rebase", mode="or", query_tf=False)
    ('"rebase"* OR "git"* OR "rebase"*', '"rebase"* OR "git"*')
    >>> build_fts_query('東京大学 -"old notes"', mode="or")
    '("東 京" OR "京 大" OR "大 学") NOT "old notes"'
    >>> build_fts_query("the") is None, build_fts_query("the", mode="or"), build_fts_query('-x "*:^"')
    (False, '"the"*', None)
    """
    return parse_fts_query(text, mode, prefix=prefix, stopwords=stopwords, query_tf=query_tf).expression


def required_matches(n_terms: int, min_match: float) -> int:
    """How many of ``n_terms`` distinct positive terms a document must match in ``msm`` mode.

    ``min_match`` ≥ 1 is a count (capped at ``n_terms``); 0 < ``min_match`` < 1 a share of
    the terms rounded down (Elasticsearch's percentage rule), at least 1; 0 means 1.

    >>> [required_matches(5, m) for m in (0.5, 0.75, 0.2, 0.0, 2, 9)]
    [2, 3, 1, 1, 2, 5]
    """
    if not math.isfinite(min_match) or min_match < 0:
        raise QmdlabError(f"--min-match {min_match!r}: must be a finite number >= 0 (a count >= 1 or a share below 1)")
    if n_terms <= 0:
        return 0
    need = int(min_match) if min_match >= 1 else math.floor(min_match * n_terms + 1e-9)
    return max(1, min(n_terms, need))


def check_weights(weights: Sequence[float]) -> tuple[float, ...]:
    """Validate FTS5 column weights ``(filepath, title, body[, expansions])``: three or four numbers
    ≥ 0, at least one of the first three above 0 (the doc-queries column is empty in most indexes).

    >>> check_weights((1.5, 4, 1)), check_weights((1.5, 4, 1, 0.5))
    ((1.5, 4.0, 1.0), (1.5, 4.0, 1.0, 0.5))
    """
    w = tuple(float(x) for x in weights)
    if len(w) not in (3, 4) or any(not math.isfinite(x) or x < 0 for x in w) or not any(w[:3]):
        raise QmdlabError(
            f"BM25 column weights {list(weights)!r}: need three or four finite numbers >= 0 "
            "(filepath, title, body[, expansions]), at least one of the first three above 0"
        )
    return w


@functools.lru_cache(maxsize=64)
def _weights_sql(weights: tuple) -> str:
    """The ``bm25()`` weight arguments of validated column weights, always four (FTS5 ignores a
    weight past the table's columns and gives a missing one 1.0), e.g. ``'1.5, 4.0, 1.0, 0.0'``."""
    w = check_weights(weights)
    return ", ".join(repr(x) for x in w + (0.0,) * (4 - len(w)))


def expansion_weight(weights: Sequence[float]) -> float:
    """The doc-queries column's weight of a weight list (0 when it has three).

    >>> expansion_weight((1.5, 4.0, 1.0)), expansion_weight((1.5, 4.0, 1.0, 2.0))
    (0.0, 2.0)
    """
    return float(weights[3]) if len(weights) > 3 else 0.0


def fts_column_count(idx: Index) -> int:
    """Columns of the index's ``documents_fts`` (4; 3 in an index made before ``expansions``),
    kept on ``idx`` until the schema changes (``PRAGMA schema_version``: a migration by any
    connection)."""
    from qmdlab.store.schema import fts_columns

    conn = idx.conn
    with idx._lock:
        version = conn.execute("PRAGMA schema_version").fetchone()[0]
        held = getattr(idx, "_fts_column_count", None)
        if held is not None and held[0] is conn and held[1] == version:
            return held[2]
        n = fts_columns(conn)
        with contextlib.suppress(AttributeError):  # an index object that takes no attributes
            idx._fts_column_count = (conn, version, n)
        return n


def column_filter(idx: Index, weights: Sequence[float]) -> str:
    """``TEXT_COLUMNS`` when the index has an doc-queries column and its weight is 0 (the match
    must leave it out), else ``""`` (every column)."""
    if expansion_weight(weights) > 0:
        return ""
    return TEXT_COLUMNS if fts_column_count(idx) > 3 else ""


def scoped(expression: str, columns: str) -> str:
    """``expression`` restricted to ``columns`` (an FTS5 column filter; ``""`` = unrestricted).

    >>> scoped('"a" OR "b"', TEXT_COLUMNS), scoped('"a"', "")
    ('{filepath title body} : ("a" OR "b")', '"a"')
    """
    return f"{columns} : ({expression})" if columns else expression


def bm25_search(
    idx: Index,
    text: str,
    *,
    limit: int = 20,
    mode: str = "or",
    collections: Iterable[str] | None = None,
    filters: SearchFilters | None = None,
    weights: Sequence[float] = BM25_WEIGHTS,
    prefix: bool = True,
    stopwords: bool = True,
    query_tf: bool = True,
    min_match: float = 0.5,
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
    mode : {"or", "and", "msm"}
        Query mode (see the module docstring).
    collections : iterable of str, optional
        Restrict to these collections (unknown names raise :class:`~qmdlab.errors.ConfigError`).
    filters : SearchFilters, optional
        Tag and date filters.
    weights : (float, float, float) or (float, float, float, float)
        FTS5 column weights for ``filepath, title, body`` and optionally ``expansions``
        (:func:`check_weights`; no fourth weight or 0: the doc-queries column is left out of
        the match, see the module docstring).
    prefix : bool
        Bare terms as prefix terms ``"t"*`` (``and`` mode: always).
    stopwords : bool
        Drop stopwords in ``or``/``msm`` mode (unless nothing else is left).
    query_tf : bool
        ``or``/``msm``: a word repeated in the query is repeated in the expression, so FTS5's
        ``bm25()`` (a sum over the query's phrases) weights it by its query frequency.
    min_match : float
        ``msm`` mode only: see :func:`required_matches`.

    Returns
    -------
    list of Hit
        ``backend_score`` is FTS5's ``bm25(documents_fts, *weights)`` (negative; lower is
        better); ``score`` is ``|bm25| / (1 + |bm25|)``; ``chunk_id`` is ``None``. Empty when
        nothing matches or nothing in ``text`` is searchable.
    """
    built = parse_fts_query(text, mode, prefix=prefix, stopwords=stopwords, query_tf=query_tf)
    query = built.expression
    if query is None or limit <= 0:
        return []
    limit = min(int(limit), MAX_LIMIT)  # "all": no more rows than SQLite's integers (or the index) hold
    w = _weights_sql(tuple(weights))
    columns = column_filter(idx, weights)
    query = scoped(query, columns)
    need = required_matches(len(built.positive), min_match) if mode == "msm" else 0
    rows = None
    if collections is None:  # an unscoped search leaves out excluded collections
        collections = idx.default_collections()
    if collections is None and (filters is None or filters.empty) and need <= 1:
        docnos = _docno_map(idx)
        if docnos is not None:
            rows = _top_rows_mapped(idx, query, w, int(limit), docnos)
        if rows is None:
            rows = _top_rows_first(idx, query, w, int(limit))
    if rows is None:
        where, params = document_scope(idx, collections, filters)
        msm_sql, msm_params = "", []
        if need > 1:
            counted = " + ".join(
                "(documents_fts.rowid IN (SELECT rowid FROM documents_fts WHERE documents_fts MATCH ?))"
                for _ in built.positive
            )
            msm_sql, msm_params = f" AND ({counted}) >= ?", [*(scoped(t, columns) for t in built.positive), need]
        sql = (
            f"SELECT d.collection || '/' || d.path AS docno, bm25(documents_fts, {w}) AS s "
            "FROM documents_fts JOIN documents d ON d.id = documents_fts.rowid "
            f"WHERE documents_fts MATCH ? AND d.active = 1{where}{msm_sql} ORDER BY s, docno LIMIT ?"
        )
        try:
            with idx._lock:
                rows = idx.conn.execute(sql, [query, *params, *msm_params, int(limit)]).fetchall()
        except sqlite3.OperationalError as err:
            _raise_fts_error(query, err)
    norm = normalize_bm25
    return [Hit(r[0], None, rank, r[1], norm(r[1])) for rank, r in enumerate(rows, 1)]


def _raise_fts_error(query: str, err: sqlite3.OperationalError) -> NoReturn:
    """Raise for a failed MATCH: an FTS5 syntax error is a builder bug (never user syntax) and is
    reported plainly; anything else (a damaged or vanished file) is the database's own error,
    which the CLI and the servers turn into the rebuild instructions."""
    text = str(err).lower()
    if "fts5" in text or "syntax error" in text or "unterminated" in text:
        raise RuntimeError(f"FTS5 rejected the built query {query!r}: {err}") from err
    raise err


def _docno_map(idx: Index) -> dict[int, str] | None:
    """``{rowid: docno}`` of the active documents, kept on ``idx`` until the next write by any
    connection (``PRAGMA data_version`` and this connection's ``total_changes``, as
    ``Index.documents()`` does). Built on the *second* search at one index state, so a one-shot
    ``qmdlab search`` pays nothing; ``None`` until then (the caller joins in SQL)."""
    conn = idx.conn
    with idx._lock:
        state = (conn.execute("PRAGMA data_version").fetchone()[0], conn.total_changes)
        held = getattr(idx, "_bm25_docnos", None)
        same = held is not None and held[0] is conn and held[1] == state
        if same and held is not None and held[2] is not None:
            return held[2]
        if not same:
            built = None  # first search at this state: remember the state, build nothing yet
        else:
            built = dict(conn.execute("SELECT id, collection || '/' || path FROM documents WHERE active = 1"))
        try:
            idx._bm25_docnos = (conn, state, built)
        except AttributeError:  # an index object that takes no attributes: no map
            return None
        return built


def _top_rows_mapped(idx: Index, query: str, weights: str, limit: int, docnos: dict[int, str]) -> list[tuple] | None:
    """:func:`_top_rows_first` with the docnos looked up in ``docnos`` (:func:`_docno_map`) instead
    of joined in SQL: the raw FTS5 query plus dictionary lookups. When the ``limit``-th and the
    next score tie, every match is fetched (still without the join) so docno decides the cut as
    in SQL. ``None`` when a rowid has no active document (the caller runs the SQL join)."""
    sql = (
        f"SELECT rowid, bm25(documents_fts, {weights}) AS s FROM documents_fts "
        "WHERE documents_fts MATCH ? ORDER BY s LIMIT ?"
    )
    rows = _mapped(idx, sql, query, limit + 1, docnos)
    if rows is not None and len(rows) > limit and rows[limit - 1][1] == rows[limit][1]:
        rows = _mapped(idx, sql, query, -1, docnos)  # LIMIT -1: every match
    return None if rows is None else rows[:limit]


def _mapped(idx: Index, sql: str, query: str, limit: int, docnos: dict[int, str]) -> list[tuple] | None:
    """``(docno, score)`` rows of ``sql``, ordered as SQL's ``ORDER BY s, docno`` (BINARY collation
    is code-point order, as Python's); ``None`` when a rowid is not in ``docnos``."""
    try:
        with idx._lock:
            got = idx.conn.execute(sql, (query, limit)).fetchall()
    except sqlite3.OperationalError as err:
        _raise_fts_error(query, err)
    rows = []
    for rowid, score in got:
        docno = docnos.get(rowid)
        if docno is None:
            return None
        rows.append((docno, score))
    rows.sort(key=_score_then_docno)
    return rows


def _score_then_docno(row: tuple) -> tuple:
    return row[1], row[0]


def _top_rows_first(idx: Index, query: str, weights: str, limit: int) -> list[tuple] | None:
    """The unfiltered search's ``(docno, score, active)`` rows, ranking only FTS5's best ``limit + 1`` rows
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
    except sqlite3.OperationalError as err:
        _raise_fts_error(query, err)
    for row in rows:
        if row[2] != 1:
            return None
    if len(rows) > limit and rows[limit - 1][1] == rows[limit][1]:
        return None
    return rows[:limit]

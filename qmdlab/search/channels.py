"""Extra keyword channels beside BM25, from the seed systems; each gives a ranked hit list of the
original query that the pipeline fuses like any other list (off by default: weight 0).

``phrase`` — the whole query verbatim (a verbatim whole-query bonus, a phrase
channel): an FTS5 phrase of every word piece of the query in order, stopwords kept, ranked by
BM25 with the pipeline's column weights (the doc-queries column as BM25's, see
:mod:`qmdlab.search.lexical`). Needs at least two pieces (one word is the BM25 list).

``like`` — the substring leg (a third keyword leg, the ``LIKE`` one beside FTS and
vectors): a document is listed when its text contains a query term as a plain substring
(case-insensitive for ASCII), so terms FTS5's tokeniser splits differently still match
(``pgbouncer`` in ``PgBouncer's``, ``k8s`` in ``k8s-deploy``, CJK words without spaces). Terms
are :func:`qmdlab.terms.terms` (stopwords dropped; CJK runs as bigrams); Latin terms shorter
than :data:`MIN_LIKE_CHARS` are left out (they match inside too many words). Ranked by the
number of distinct terms contained, ties by docno; ``score`` is the share of the terms.

``trigram`` — the CJK trigram channel beside the bigram one : the query's CJK runs
cut into overlapping three-character pieces, each matched as a substring of the text; ranked
like ``like``. A run of two characters has no trigram (the FTS bigram list covers it), so a
query without a CJK run of three or more characters gives no list.

``heading`` — the heading channel: a document is listed when its section headings (every
markdown heading outside code fences, :func:`qmdlab.store.breakpoints.heading_paths`; the FTS table has
no heading column) contain query terms (:func:`qmdlab.terms.terms`, exact lower-case words, no
stemming), ranked by how many distinct terms they contain, ties by docno; ``score`` is the share of
the terms.

The substring and heading channels scan every active document's text (SQLite ``instr``), which is fine for
notes collections (CISI's 1,460 abstracts: well under a second per query) but grows linearly
with the corpus — hence off by default.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from qmdlab.search.filters import SearchFilters, document_scope
from qmdlab.search.hit import Hit, normalize_bm25
from qmdlab.search.lexical import BM25_WEIGHTS, _raise_fts_error, _split_query, _weights_sql, column_filter, scoped
from qmdlab.terms import CJK_RUN, query_pieces, terms

if TYPE_CHECKING:
    from qmdlab.store import Index

CHANNELS = ("phrase", "like", "trigram", "heading")
MIN_LIKE_CHARS = 3


def phrase_expression(text: str) -> str | None:
    """The FTS5 phrase of a query's word pieces in order (negated parts left out; CJK runs spelled
    out character by character); ``None`` with fewer than two tokens.

    >>> phrase_expression('How to "rebase" a branch -merge'), phrase_expression("git")
    ('"how to rebase a branch"', None)
    >>> phrase_expression("東京 tower")
    '"東 京 tower"'
    """
    toks: list[str] = []
    for neg, _quoted, raw in _split_query(text):
        if neg:
            continue
        for p in query_pieces(raw):
            toks.extend(list(p) if CJK_RUN.fullmatch(p) else [p])
    if len(toks) < 2:
        return None
    return '"' + " ".join(toks) + '"'


def like_terms(text: str) -> list[str]:
    """The distinct terms of the ``like`` channel, in query order.

    >>> like_terms("How to use PgBouncer with k8s in 东京大学?")
    ['use', 'pgbouncer', 'k8s', '东京', '京大', '大学']
    """
    out = [t for t in terms(text) if CJK_RUN.fullmatch(t) or len(t) >= MIN_LIKE_CHARS]
    return list(dict.fromkeys(out))


def cjk_trigrams(text: str) -> list[str]:
    """The distinct CJK trigrams of a query, in order.

    >>> cjk_trigrams("Redis 内存淘汰 k8s 回滚"), cjk_trigrams("no cjk")
    (['内存淘', '存淘汰'], [])
    """
    out: list[str] = []
    for run in CJK_RUN.findall(text):
        out.extend(run[i : i + 3] for i in range(len(run) - 2))
    return list(dict.fromkeys(out))


def phrase_search(
    idx: Index,
    text: str,
    *,
    limit: int = 20,
    collections: Iterable[str] | None = None,
    filters: SearchFilters | None = None,
    weights: Sequence[float] = BM25_WEIGHTS,
) -> list[Hit]:
    """Documents containing the whole query as a phrase, by BM25 (see the module docstring).

    ``backend_score`` is FTS5's ``bm25()`` (negative), ``score`` ``|bm25| / (1 + |bm25|)``.
    """
    expr = phrase_expression(text)
    if expr is None or limit <= 0:
        return []
    w = _weights_sql(tuple(weights))
    expr = scoped(expr, column_filter(idx, weights))
    where, params = document_scope(idx, collections, filters, scoped=True)
    sql = (
        f"SELECT d.collection || '/' || d.path AS docno, bm25(documents_fts, {w}) AS s "
        "FROM documents_fts JOIN documents d ON d.id = documents_fts.rowid "
        f"WHERE documents_fts MATCH ? AND d.active = 1{where} ORDER BY s, docno LIMIT ?"
    )
    try:
        with idx._lock:
            rows = idx.conn.execute(sql, [expr, *params, int(limit)]).fetchall()
    except sqlite3.OperationalError as err:  # FTS5 syntax is a builder bug; a damaged file is the database's
        _raise_fts_error(expr, err)
    return [Hit(docno, None, rank, float(s), normalize_bm25(float(s))) for rank, (docno, s) in enumerate(rows, 1)]


def substring_search(
    idx: Index,
    units: Sequence[str],
    *,
    limit: int = 20,
    collections: Iterable[str] | None = None,
    filters: SearchFilters | None = None,
) -> list[Hit]:
    """Documents whose text contains any of ``units`` as a substring (ASCII case-insensitive),
    ranked by how many distinct units they contain, ties by docno.

    ``backend_score`` is that count, ``score`` the count divided by ``len(units)``.
    """
    units = [u.lower() for u in dict.fromkeys(units) if u]
    if not units or limit <= 0:
        return []
    where, params = document_scope(idx, collections, filters, scoped=True)
    count = " + ".join("(instr(lower(c.body), ?) > 0)" for _ in units)
    sql = (
        f"SELECT docno, m FROM (SELECT d.collection || '/' || d.path AS docno, ({count}) AS m "
        f"FROM documents d JOIN content c ON c.hash = d.hash WHERE d.active = 1{where}) "
        "WHERE m > 0 ORDER BY m DESC, docno LIMIT ?"
    )
    with idx._lock:
        rows = idx.conn.execute(sql, [*units, *params, int(limit)]).fetchall()
    n = len(units)
    return [Hit(docno, None, rank, float(m), float(m) / n) for rank, (docno, m) in enumerate(rows, 1)]


def like_search(idx: Index, text: str, **kwargs) -> list[Hit]:
    """The ``like`` channel: :func:`substring_search` over :func:`like_terms`."""
    return substring_search(idx, like_terms(text), **kwargs)


def trigram_search(idx: Index, text: str, **kwargs) -> list[Hit]:
    """The CJK ``trigram`` channel: :func:`substring_search` over :func:`cjk_trigrams`."""
    return substring_search(idx, cjk_trigrams(text), **kwargs)


def heading_terms(body: str) -> set[str]:
    """The distinct terms of a text's headings (outside code fences).

    >>> sorted(heading_terms("# Restore a backup\\n```\\n# not a heading\\n```\\n## Point-in-time recovery\\ntext"))
    ['backup', 'point', 'recovery', 'restore', 'time']
    """
    from qmdlab.store.breakpoints import heading_paths

    out: set[str] = set()
    for _, path in heading_paths(body):
        out.update(terms(path.rsplit(" > ", 1)[-1]))
    return out


def heading_search(
    idx: Index,
    text: str,
    *,
    limit: int = 20,
    collections: Iterable[str] | None = None,
    filters: SearchFilters | None = None,
) -> list[Hit]:
    """The ``heading`` channel (see the module docstring): documents whose headings hold query terms.

    ``backend_score`` is the number of distinct query terms in the headings, ``score`` that number
    divided by the number of query terms.
    """
    units = terms(text)
    if not units or limit <= 0:
        return []
    where, params = document_scope(idx, collections, filters, scoped=True)
    sql = (
        f"SELECT d.collection || '/' || d.path AS docno, c.body FROM documents d JOIN content c ON c.hash = d.hash "
        f"WHERE d.active = 1{where} AND instr(c.body, '#') > 0"
    )
    with idx._lock:
        rows = idx.conn.execute(sql, params).fetchall()
    scored = []
    for docno, body in rows:
        m = len(heading_terms(body).intersection(units))
        if m:
            scored.append((-m, docno))
    scored.sort()
    n = len(units)
    return [Hit(docno, None, rank, float(-m), float(-m) / n) for rank, (m, docno) in enumerate(scored[:limit], 1)]


#: The search of each channel in :data:`CHANNELS`.
CHANNEL_SEARCHES: dict[str, Callable[..., list[Hit]]] = {
    "phrase": phrase_search,
    "like": like_search,
    "trigram": trigram_search,
    "heading": heading_search,
}


def channel_search(
    idx: Index, channel: str, text: str, *, weights: Sequence[float] = BM25_WEIGHTS, **scope: Any
) -> list[Hit]:
    """Run one channel by name (:data:`CHANNELS`). ``scope`` is what every channel takes (``limit``,
    ``collections``, ``filters``); the BM25 column ``weights`` only ``phrase`` ranks by."""
    search = CHANNEL_SEARCHES.get(channel)
    if search is None:
        raise ValueError(f"unknown keyword channel {channel!r}; expected one of {', '.join(CHANNELS)}")
    if search is phrase_search:
        scope["weights"] = weights
    return search(idx, text, **scope)


__all__ = [
    "CHANNELS",
    "MIN_LIKE_CHARS",
    "phrase_expression",
    "like_terms",
    "cjk_trigrams",
    "phrase_search",
    "substring_search",
    "like_search",
    "trigram_search",
    "heading_terms",
    "heading_search",
    "CHANNEL_SEARCHES",
    "channel_search",
]

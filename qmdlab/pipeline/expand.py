"""Expansion: typed sub-queries from the expander (or the user), filtered.

docs/design.md, pipeline step 2: a line equal to the query is dropped, and so is a line that
shares no query term. Terms are language-aware (:func:`query_terms`): words for
alphabetic scripts, character bigrams for CJK runs (a single CJK character is its
own term), so a Chinese or Japanese query is filtered like any other instead of
being passed through untouched. Lines of a type whose stage is switched off
(``hyde``, or ``vec``/``hyde`` without vectors) are recorded as dropped too.

An expander's lines are bounded before they are searched: at most :data:`MAX_EXPANDER_LINES`
are kept, and a ``lex`` line the keyword search would refuse (over its term or character limit,
:mod:`qmdlab.search.lexical`) is dropped with that reason — the query's own text was fine, so
the expander's excess never fails it. (What is read of an answer at all is bounded by its parser,
:func:`qmdlab.models.expansion.parse_expansion`.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.terms import terms

TYPES = ("lex", "vec", "hyde")
#: Expander lines kept at most (each is a retrieval list): qmd's expander writes 1–3 lex,
#: 1–3 vec and at most one hyde line, a generic instruct model at most 6 (its grammar).
MAX_EXPANDER_LINES = 10


class Expansion(NamedTuple):
    """One expansion line and the filter's decision (a row of the ``expansions`` table)."""

    type: str
    text: str
    kept: bool
    reason_dropped: str | None
    origin: str  # "expander" | "user"


def query_terms(text: str, *, stopwords: bool = True) -> list[str]:
    """Language-aware terms, lowercase, in order, unique: :func:`qmdlab.terms.terms`.

    >>> query_terms("How do I rebase in Git?")
    ['rebase', 'git']
    """
    return terms(text, stopwords=stopwords)


def shares_term(query: str, line: str) -> bool:
    """Whether ``line`` contains at least one term of ``query`` (see :func:`query_terms`).

    >>> shares_term("東京の天気", "東京 weather"), shares_term("東京の天気", "大阪")
    (True, False)
    """
    q = set(query_terms(query))
    return bool(q & set(query_terms(line, stopwords=False)))


def _same(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def filter_expansions(
    query: str,
    lines: Iterable[tuple[str, str]],
    config: PipelineConfig,
    *,
    origin: str = "expander",
    check_terms: bool = True,
) -> list[Expansion]:
    """Decide, per line, whether it is kept, and why not.

    User-typed searches (``origin="user"``) skip the term checks but not the stage
    switches.

    >>> c = PipelineConfig(hyde=False)
    >>> [(e.text, e.reason_dropped) for e in filter_expansions("git rebase",
    ...     [("lex", "Git  Rebase"), ("vec", "rebase onto main"), ("lex", "pasta"), ("hyde", "rebase is")], c)]
    [('Git  Rebase', 'equals the query'), ('rebase onto main', None), ('pasta', 'shares no query term'), ('rebase is', 'hyde disabled')]
    """
    out: list[Expansion] = []
    kept = 0
    for kind, text in lines:
        reason = None
        if kind not in TYPES:
            reason = f"unknown type {kind!r}"
        elif kind in ("vec", "hyde") and not config.vector:
            reason = "vector search disabled"
        elif kind == "hyde" and not config.hyde:
            reason = "hyde disabled"
        elif check_terms and _same(text, query):
            reason = "equals the query"
        elif check_terms and not shares_term(query, text):
            reason = "shares no query term"
        elif origin == "expander":
            reason = _over_limits(kind, text, kept)
        kept += reason is None
        out.append(Expansion(kind, text, reason is None, reason, origin))
    return out


def _over_limits(kind: str, text: str, kept: int) -> str | None:
    """Why an expander line is not searched though it passed the filter: :data:`MAX_EXPANDER_LINES`
    are kept already, or it is a ``lex`` line the keyword search would refuse.

    >>> _over_limits("lex", "git rebase", 0) is None, _over_limits("vec", "x", MAX_EXPANDER_LINES)
    (True, 'over the limit of 10 expander lines kept')
    >>> _over_limits("lex", " ".join(f"w{i}" for i in range(300)), 0)
    'over the keyword search limit: search query has more than 256 distinct terms'
    """
    from qmdlab.errors import QmdlabError
    from qmdlab.search.lexical import check_query_length, parse_fts_query

    if kept >= MAX_EXPANDER_LINES:
        return f"over the limit of {MAX_EXPANDER_LINES} expander lines kept"
    try:
        check_query_length(text, f"{kind} line")
        if kind == "lex":  # every piece a term: the most terms any BM25 mode counts
            parse_fts_query(text, "or", prefix=False, stopwords=False, query_tf=False)
    except QmdlabError as err:
        return f"over the keyword search limit: {str(err).split(';')[0]}" if kind == "lex" else str(err).split(";")[0]
    return None


def parse_query_document(doc: str) -> tuple[str, str | None, list[tuple[str, str]]]:
    """Split a qmd query document into ``(text, intent, searches)``.

    Lines ``intent: …``, ``lex: …``, ``vec: …``, ``hyde: …`` are typed; any other
    non-empty lines form the plain query text.

    >>> parse_query_document("intent: fix history\\nlex: git rebase\\nvec: rewrite commits")
    ('', 'fix history', [('lex', 'git rebase'), ('vec', 'rewrite commits')])
    >>> parse_query_document("how to rebase")
    ('how to rebase', None, [])
    """
    plain: list[str] = []
    intent: str | None = None
    searches: list[tuple[str, str]] = []
    for raw in doc.splitlines():
        line = raw.strip()
        if not line:
            continue
        head, sep, rest = line.partition(":")
        key = head.strip().lower()
        if sep and key == "intent":
            intent = rest.strip() or None
        elif sep and key in TYPES and rest.strip():
            searches.append((key, rest.strip()))
        else:
            plain.append(line)
    return " ".join(plain), intent, searches


def check_query_document(doc: str) -> str:
    """A query as qmd's command line reads it (its grammar: ``expand_query | query_document``):
    the text to run, or a :class:`~qmdlab.errors.QmdlabError` naming the line that breaks it.

    A single ``expand: TEXT`` line is the plain query ``TEXT``; a document of several lines has
    one typed line (``lex:``, ``vec:``, ``hyde:``, at most one ``intent:``) per non-empty line,
    each with text, and at least one search besides the intent. Anything else is returned as given.

    >>> check_query_document("expand: how to rebase"), check_query_document("lex: a\\nvec: b")
    ('how to rebase', 'lex: a\\nvec: b')
    >>> check_query_document("lex: rebase\\nrewrite history")
    Traceback (most recent call last):
    ...
    qmdlab.errors.QmdlabError: query line 2 is missing a lex:/vec:/hyde:/intent: prefix; start every line of a query document with one (or give a single line of plain text)
    """
    from qmdlab.errors import QmdlabError

    lines = [(no, raw.strip()) for no, raw in enumerate(doc.split("\n"), 1) if raw.strip()]
    intent_seen = searches = 0
    for no, line in lines:
        head, sep, rest = line.partition(":")
        key = head.strip().lower() if sep else ""
        text = rest.strip()
        if key == "expand":
            if len(lines) > 1:
                raise QmdlabError(
                    f"query line {no} starts with expand:, which cannot be mixed with other lines; "
                    "give a single expand: line or typed lex:/vec:/hyde: lines"
                )
            if not text:
                raise QmdlabError(f"query line {no}: expand: needs text (expand: YOUR QUERY)")
            return text
        if key == "intent":
            if intent_seen:
                raise QmdlabError(f"query line {no}: only one intent: line is allowed per query document")
            if not text:
                raise QmdlabError(f"query line {no}: intent: needs text (intent: WHAT YOU MEAN)")
            intent_seen = no
        elif key in TYPES:
            if not text:
                raise QmdlabError(f"query line {no} ({key}:) needs text ({key}: YOUR SEARCH)")
            searches += 1
        elif len(lines) > 1:
            raise QmdlabError(
                f"query line {no} is missing a lex:/vec:/hyde:/intent: prefix; start every line of a "
                "query document with one (or give a single line of plain text)"
            )
    if intent_seen and not searches:
        raise QmdlabError(f"query line {intent_seen}: intent: cannot stand alone; add a lex:, vec: or hyde: line")
    return doc


def kept_lines(expansions: Sequence[Expansion]) -> list[tuple[str, str]]:
    """``(type, text)`` of the kept lines, in order."""
    return [(e.type, e.text) for e in expansions if e.kept]


__all__ = [
    "Expansion",
    "query_terms",
    "shares_term",
    "filter_expansions",
    "parse_query_document",
    "check_query_document",
    "kept_lines",
    "TYPES",
]

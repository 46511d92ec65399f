"""Metadata filters shared by BM25 and vector search.

A document passes when it carries *every* requested tag (case-insensitive) and its date
lies in ``[since, before)``. The date is the front matter's ``date`` or, without one, the
file's modification day (UTC).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qmdlab.errors import QmdlabError

if TYPE_CHECKING:
    from qmdlab.store import Index

#: Distinct tags one search may require (each is one clause of the SQL).
MAX_TAGS = 64


def parse_day(value: str | _dt.date | None, flag: str = "--since") -> str | None:
    """An ISO day from a date or a ``YYYY-MM-DD`` string.

    >>> parse_day("2024-02-03"), parse_day(_dt.date(2024, 1, 1)), parse_day(None)
    ('2024-02-03', '2024-01-01', None)
    """
    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        return value.date().isoformat()
    if isinstance(value, _dt.date):
        return value.isoformat()
    s = str(value).strip()
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", s):
        raise QmdlabError(f"{flag} {value!r}: expected a date YYYY-MM-DD (e.g. {flag} 2024-01-31)")
    try:
        _dt.date.fromisoformat(s)
    except ValueError:
        raise QmdlabError(f"{flag} {value!r}: not a calendar date (e.g. {flag} 2024-01-31)") from None
    return s


@dataclass(frozen=True)
class SearchFilters:
    """``tags``: all required; ``since``: inclusive; ``before``: exclusive."""

    tags: tuple[str, ...] = ()
    since: str | _dt.date | None = None
    before: str | _dt.date | None = None

    @property
    def empty(self) -> bool:
        return not self.tags and self.since is None and self.before is None

    def sql(self, alias: str = "d") -> tuple[str, list[str]]:
        """A ``" AND …"`` clause over the ``documents`` table and its parameters.

        >>> SearchFilters(tags=("Git",), since="2024-01-01").sql()
        (' AND EXISTS (SELECT 1 FROM json_each(d.tags) WHERE value = ?) AND d.date >= ?', ['git', '2024-01-01'])
        """
        parts: list[str] = []
        params: list[str] = []
        tags = list(dict.fromkeys(str(t).strip().lstrip("#").lower() for t in self.tags))
        if len(tags) > MAX_TAGS:
            raise QmdlabError(
                f"--tag: {len(tags)} distinct tags required, at most {MAX_TAGS} per search; require fewer"
            )
        for t in tags:
            parts.append(f"EXISTS (SELECT 1 FROM json_each({alias}.tags) WHERE value = ?)")
            params.append(t)
        since = parse_day(self.since, "--since")
        before = parse_day(self.before, "--before")
        if since is not None:
            parts.append(f"{alias}.date >= ?")
            params.append(since)
        if before is not None:
            parts.append(f"{alias}.date < ?")
            params.append(before)
        return "".join(" AND " + p for p in parts), params


def document_scope(
    idx: Index, collections: Iterable[str] | None, filters: SearchFilters | None, *, scoped: bool = False
) -> tuple[str, list[str]]:
    """The ``" AND …"`` clause over ``documents d`` that keeps the documents of ``collections``
    passing ``filters``, and its parameters: the collection clause (``scoped``: ``None`` means the
    collections an unscoped search covers) then the filters' (:meth:`SearchFilters.sql`)."""
    where, params = idx._coll_clause(collections, scoped=scoped)
    fsql, fparams = (filters or SearchFilters()).sql("d")
    return where + fsql, [*params, *fparams]

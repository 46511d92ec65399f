"""qmd bench fixtures: one JSON file of queries with the files each should find.

::

    {"version": 1, "description": "…", "collection": "notes",
     "queries": [{"id": "q1", "query": "…", "type": "exact", "description": "…",
                  "expected_files": ["howto/git.md"], "expected_in_top_k": 3}]}

The fixture carries no documents: they are the markdown files of a folder (``--corpus DIR``) or
of the qmdlab collection the fixture names (``"collection"``), indexed in place, with docids the
paths relative to that folder. Every expected file is relevant (grade 1). Expected paths are
matched the way qmd matches them (:func:`paths_match`: ``qmd://collection/`` stripped, case
folded, exact or as a whole-segment suffix), so a fixture written for qmd needs no edits; an
expected file that matches no file of the corpus stays a judged document nobody can retrieve
(:func:`unmatched_expected` lists them).

``type`` becomes the query's ``category`` (qmd groups its report by it) and the per-query ``k``
is kept in :attr:`BenchFixture.queries` for :mod:`qmdlab.eval.qmdbench`'s hit-within-k measures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from qmdlab.errors import DataFormatError

from ._common import SuiteData, qrels_frame, queries_frame


@dataclass(frozen=True)
class BenchQuery:
    """One fixture query: ``k`` is qmd's ``expected_in_top_k``."""

    id: str
    query: str
    type: str
    description: str
    expected_files: tuple[str, ...]
    k: int


@dataclass(frozen=True)
class BenchFixture:
    path: Path
    version: int
    description: str
    collection: str | None
    queries: tuple[BenchQuery, ...]


def normalize_path(path: str) -> str:
    """A path as qmd compares it: ``qmd://collection/`` dropped, lower case, no outer slashes.

    >>> normalize_path("qmd://notes/Docs/README.md"), normalize_path("/a/b/")
    ('docs/readme.md', 'a/b')
    """
    if path.startswith("qmd://"):
        rest = path[len("qmd://") :]
        path = rest.split("/", 1)[1] if "/" in rest else rest
    return path.lower().strip("/")


def paths_match(result: str, expected: str) -> bool:
    """Does a result path satisfy an expected path? Equal after :func:`normalize_path`, or the
    expected path is a whole-segment suffix of the result (``dir/name``, never part of a name).

    >>> paths_match("notes/howto/Git.md", "howto/git.md"), paths_match("notes/mygit.md", "git.md")
    (True, False)
    """
    r, e = normalize_path(result), normalize_path(expected)
    return r == e or r.endswith("/" + e)


def _text(obj: dict, key: str, path: Path, where: str, required: bool = True) -> str:
    value = obj.get(key)
    if value is None or (isinstance(value, str) and not value.strip() and required):
        if required:
            raise DataFormatError(path, None, f"{where}: missing {key!r}", f"give every query a {key!r}")
        return ""
    if isinstance(value, (dict, list, bool)):
        raise DataFormatError(path, None, f"{where}: {key!r} must be a string", f"write {key!r} as a string")
    return str(value)


def read_fixture(path: str | Path) -> BenchFixture:
    """Parse and check a fixture; every problem is a :class:`DataFormatError` naming the query."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as err:
        raise DataFormatError(
            path, None, f"cannot read ({err.strerror or err})", "pass a readable fixture file"
        ) from None
    except UnicodeDecodeError:
        raise DataFormatError(path, None, "not UTF-8 text", "re-encode the fixture as UTF-8") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise DataFormatError(
            path, err.lineno, f"invalid JSON ({err.msg} at column {err.colno})", "fix the fixture's JSON"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("queries"), list):
        raise DataFormatError(
            path, None, "not a qmd bench fixture: missing 'queries' array", 'write {"version": 1, "queries": [...]}'
        )
    version = data.get("version", 1)
    if version != 1:
        raise DataFormatError(path, None, f"fixture version {version!r} is not supported", "write version 1")
    collection = data.get("collection")
    if collection is not None and not isinstance(collection, str):
        raise DataFormatError(path, None, "'collection' must be a string", "name one collection")
    queries, seen = [], set()
    for i, q in enumerate(data["queries"]):
        where = f"queries[{i}]"
        if not isinstance(q, dict):
            raise DataFormatError(path, None, f"{where}: expected an object", "write each query as an object")
        qid = _text(q, "id", path, where)
        where = f"queries[{i}] ({qid})"
        if qid in seen:
            raise DataFormatError(path, None, f"{where}: duplicate id", "give every query its own id")
        seen.add(qid)
        files = q.get("expected_files")
        if not isinstance(files, list) or not files or not all(isinstance(f, str) and f.strip() for f in files):
            raise DataFormatError(
                path,
                None,
                f"{where}: 'expected_files' must be a non-empty list of paths",
                'write e.g. "expected_files": ["docs/readme.md"]',
            )
        k = q.get("expected_in_top_k", 10)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise DataFormatError(
                path,
                None,
                f"{where}: 'expected_in_top_k' must be a whole number >= 1",
                'write e.g. "expected_in_top_k": 3',
            )
        queries.append(
            BenchQuery(
                qid,
                _text(q, "query", path, where),
                _text(q, "type", path, where, False) or "",
                _text(q, "description", path, where, False),
                tuple(files),
                k,
            )
        )
    if not queries:
        raise DataFormatError(path, None, "no queries", "add at least one query")
    return BenchFixture(path, 1, str(data.get("description") or ""), collection, tuple(queries))


def match_expected(expected: str, docids: list[str]) -> list[str]:
    """The corpus files an expected path names: the exact (case-folded) match when there is one,
    else every file it is a whole-segment suffix of.

    >>> match_expected("Git.md", ["a/git.md", "b/git.md", "git.md"]), match_expected("git.md", ["a/git.md"])
    (['git.md'], ['a/git.md'])
    """
    norm = normalize_path(expected)
    exact = [d for d in docids if normalize_path(d) == norm]
    return exact or [d for d in docids if paths_match(d, expected)]


def corpus_files(corpus: Path, mask: str = "**/*.md", ignore: tuple[str, ...] = ()) -> list[str]:
    """The files of ``corpus`` an index of it holds (mask and ignore globs applied, unindexable files left out)."""
    from qmdlab.store.config import Collection
    from qmdlab.store.scan import list_files

    return [e.rel for e in list_files(Collection("corpus", Path(corpus), mask, tuple(ignore))) if e.skip is None]


def unmatched_expected(fixture: BenchFixture, docids: list[str]) -> list[tuple[str, str]]:
    """``(query id, expected path)`` for every expected file no corpus file matches."""
    return [(q.id, f) for q in fixture.queries for f in q.expected_files if not match_expected(f, docids)]


def load_qmd_bench(
    path: str | Path, corpus: str | Path | None = None, mask: str = "**/*.md", ignore: tuple[str, ...] = ()
) -> SuiteData:
    """Load a fixture against the markdown folder ``corpus`` (see the module notes)."""
    fixture = read_fixture(path)
    if corpus is None or not Path(corpus).is_dir():
        raise DataFormatError(
            path,
            None,
            f"corpus folder {corpus} not found" if corpus else "no corpus folder",
            "pass --corpus DIR, the folder its expected_files are relative to",
        )
    docids = corpus_files(Path(corpus), mask, ignore)
    rows = []
    for q in fixture.queries:
        for f in q.expected_files:
            rows += [(q.id, d, 1) for d in match_expected(f, docids) or [normalize_path(f)]]
    queries = queries_frame([{"qid": q.id, "query": q.query, "category": q.type or None} for q in fixture.queries])
    return SuiteData(queries=queries, qrels=qrels_frame(rows), corpus_dir=Path(corpus))

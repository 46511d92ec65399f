"""Shared pieces of the suite loaders: the :class:`SuiteData` result and line readers.

Every loader returns a :class:`SuiteData` whose ids are the collection's *own* ids
(SMART ``.I`` numbers, BEIR ``_id`` values, TREC docnos, or paths relative to the
corpus root), so run files written from it score against the original qrels with any
external tool.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import polars as pl

from qmdlab.errors import DataFormatError

QUERY_SCHEMA = {"qid": pl.Utf8, "query": pl.Utf8, "category": pl.Utf8, "intent": pl.Utf8}
QRELS_SCHEMA = {"qid": pl.Utf8, "docid": pl.Utf8, "grade": pl.Int64}
DOCS_SCHEMA = {"docid": pl.Utf8, "title": pl.Utf8, "text": pl.Utf8}


class OfficialSplit(NamedTuple):
    """A collection's published division of its judged queries: fit on ``train``, report ``test``.

    The two sides are sorted and disjoint, and no ``train`` query has the text of a ``test`` query
    (:func:`official_split` moves such a training query to ``dropped``: SciFact's training claims
    repeat two test claims word for word, with the same relevant abstract), so a figure on ``test``
    never saw one of its queries, by id or by text, during tuning or training.
    """

    train: tuple[str, ...]
    test: tuple[str, ...]
    dropped: tuple[str, ...] = ()


def same_text(text: str) -> str:
    """The key under which two query texts count as the same query (case and spacing ignored).

    >>> same_text("  Obesity decreases\tlife quality. ") == same_text("obesity decreases life quality.")
    True
    """
    return " ".join(text.casefold().split())


def official_split(
    train: Iterable[str], test: Iterable[str], source: Path, texts: Mapping[str, str] | None = None
) -> OfficialSplit:
    """The split of ``train`` and ``test`` qids; a qid on both sides is a :class:`DataFormatError`,
    and a training query whose text (``texts[qid]``) is a test query's text is dropped from ``train``.

    >>> official_split(["2", "1"], ["3"], Path("qrels"))
    OfficialSplit(train=('1', '2'), test=('3',), dropped=())
    >>> official_split(["1", "2"], ["3"], Path("qrels"), {"1": "A b", "2": "c", "3": "a  B"})
    OfficialSplit(train=('2',), test=('3',), dropped=('1',))
    >>> official_split(["1"], ["1", "3"], Path("qrels"))
    Traceback (most recent call last):
    ...
    qmdlab.errors.DataFormatError: qrels: queries judged in both the train and the test split: ['1'] (a query belongs to one side; remove it from one qrels file)
    """
    tr, te = sorted(set(map(str, train))), sorted(set(map(str, test)))
    both = sorted(set(tr) & set(te))
    if both:
        raise DataFormatError(
            source,
            None,
            f"queries judged in both the train and the test split: {both[:10]}",
            "a query belongs to one side; remove it from one qrels file",
        )
    texts = texts or {}
    test_texts = {same_text(texts[q]) for q in te if q in texts}
    dropped = tuple(q for q in tr if q in texts and same_text(texts[q]) in test_texts)
    return OfficialSplit(tuple(q for q in tr if q not in dropped), tuple(te), dropped)


@dataclass(frozen=True)
class SuiteData:
    """What a loader reads from disk.

    Attributes
    ----------
    queries : pl.DataFrame
        ``qid, query, category, intent`` (category/intent may be null).
    qrels : pl.DataFrame
        ``qid, docid, grade`` with the collection's own ids; one row per judged pair.
    docs : pl.DataFrame or None
        ``docid, title, text`` when the format carries its documents inline (SMART,
        BEIR, JSONL, TREC SGML); ``None`` when the documents are markdown files already.
    corpus_dir : Path or None
        Directory of markdown files indexed in place (the default corpus), whose
        docids are paths relative to it.
    split : OfficialSplit or None
        The collection's own train/test division of its judged queries (BEIR's
        ``qrels/train.tsv`` and ``qrels/test.tsv``), when it has one: tuning and training read
        ``train`` only and every reported figure is on ``test`` (:class:`OfficialSplit`).
    """

    queries: pl.DataFrame
    qrels: pl.DataFrame
    docs: pl.DataFrame | None = None
    corpus_dir: Path | None = None
    split: OfficialSplit | None = None

    def judged_queries(self) -> pl.DataFrame:
        """Queries that have at least one judgment (the ones evaluation uses)."""
        judged = self.qrels.select("qid").unique()
        return self.queries.join(judged, on="qid", how="semi")


def queries_frame(rows: list[dict]) -> pl.DataFrame:
    """Build a queries frame with the canonical schema.

    >>> queries_frame([{"qid": "1", "query": "cats"}]).row(0)
    ('1', 'cats', None, None)
    """
    return (
        pl.DataFrame([{k: r.get(k) for k in QUERY_SCHEMA} for r in rows], schema=QUERY_SCHEMA, orient="row")
        if rows
        else pl.DataFrame(schema=QUERY_SCHEMA)
    )


def qrels_frame(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    """Build a qrels frame; duplicate (qid, docid) pairs keep their highest grade.

    >>> qrels_frame([("1", "a", 1), ("1", "a", 2), ("1", "b", 0)]).sort("docid").rows()
    [('1', 'a', 2), ('1', 'b', 0)]
    """
    frame = pl.DataFrame(rows, schema=QRELS_SCHEMA, orient="row")
    return frame.group_by(["qid", "docid"], maintain_order=True).agg(pl.col("grade").max())


def docs_frame(rows: list[tuple[str, str, str]]) -> pl.DataFrame:
    """Build a documents frame ``docid, title, text``.

    >>> docs_frame([("7", "T", "body")]).rows()
    [('7', 'T', 'body')]
    """
    return pl.DataFrame(rows, schema=DOCS_SCHEMA, orient="row")


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(1-based line number, line without its end-of-line)``; tolerates CRLF."""
    try:
        with open(path, encoding="utf-8", errors="strict", newline="") as fh:
            for n, line in enumerate(fh, start=1):
                yield n, line.rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise DataFormatError(
            path, None, f"not UTF-8 text ({err.reason} at byte {err.start})", "re-encode the file as UTF-8"
        ) from None


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for each non-blank line of a JSON-lines file.

    Raises
    ------
    DataFormatError
        When a line is not a JSON object.
    """
    for n, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataFormatError(
                path, n, f"invalid JSON ({err.msg} at column {err.colno})", "write one JSON object per line"
            ) from None
        if not isinstance(obj, dict):
            raise DataFormatError(
                path, n, f"expected a JSON object, got {type(obj).__name__}", "write one JSON object per line"
            )
        yield n, obj


def field(obj: dict, names: tuple[str, ...], path: Path, line: int, *, required: bool = True):
    """The first of ``names`` present in ``obj`` (as a string), else an error naming the line."""
    for name in names:
        if name in obj and obj[name] is not None:
            value = obj[name]
            if isinstance(value, (dict, list)):
                raise DataFormatError(
                    path, line, f"field {name!r} must be a string or number", f"write {name!r} as a string"
                )
            return str(value)
    if required:
        raise DataFormatError(
            path, line, f"missing field {names[0]!r}", f"add {' or '.join(repr(n) for n in names)} to the object"
        )
    return None


def expect_fields(parts: list[str], names: str, path: Path, line: int, fix: str) -> None:
    """Refuse line ``line`` of a judgments file unless it has one field per name in ``names``.

    >>> expect_fields(["1", "d", "x"], "qid docno grade", Path("qrels"), 4, "write 'qid docno grade'")
    >>> expect_fields(["1", "d"], "qid docno grade", Path("qrels"), 4, "write 'qid docno grade'")
    Traceback (most recent call last):
    ...
    qmdlab.errors.DataFormatError: qrels:4: expected 3 fields 'qid docno grade', got 2 (write 'qid docno grade')
    """
    if len(parts) != len(names.split()):
        raise DataFormatError(path, line, f"expected {len(names.split())} fields '{names}', got {len(parts)}", fix)


def grade_of(text: str, what: str, path: Path, line: int, fix: str) -> int:
    """A judgment's grade ``text`` as an integer (``2.0`` is 2), or the error naming the line.

    >>> grade_of("2.0", "grade", Path("qrels"), 1, "use an integer grade")
    2
    >>> grade_of("nan", "score", Path("qrels"), 1, "use an integer score")
    Traceback (most recent call last):
    ...
    qmdlab.errors.DataFormatError: qrels:1: score 'nan' is not a number (use an integer score)
    """
    try:
        return int(float(text))
    except (ValueError, OverflowError):  # "nan" / "inf" / "1e999"
        raise DataFormatError(path, line, f"{what} {text!r} is not a number", fix) from None


def read_trec_qrels(path: Path) -> pl.DataFrame:
    """Read TREC qrels: ``qid iteration docno grade`` per line (whitespace separated).

    Blank lines and ``#`` comments are skipped; anything else that is not four fields with
    an integer grade is an error naming the line.
    """
    rows = []
    for n, line in numbered_lines(path):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        parts = text.split()
        expect_fields(parts, "qid 0 docno grade", path, n, "write TREC qrels lines: qid 0 docno grade")
        grade = grade_of(parts[3], "grade", path, n, "the 4th field is the integer relevance grade")
        rows.append((parts[0], parts[2], grade))
    if not rows:
        raise DataFormatError(path, None, "no judgments found", "add lines 'qid 0 docno grade'")
    return qrels_frame(rows)


def find_one(directory: Path, patterns: tuple[str, ...], what: str, fmt: str) -> Path:
    """The single file in ``directory`` matching the first pattern that matches anything."""
    for pattern in patterns:
        found = sorted(p for p in directory.glob(pattern) if p.is_file())
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise DataFormatError(
                directory,
                None,
                f"several {what} files match {pattern!r}: " + ", ".join(p.name for p in found),
                "keep exactly one",
            )
    raise DataFormatError(
        directory,
        None,
        f"no {what} file ({' or '.join(patterns)}) for format {fmt!r}",
        "check the directory or pass the right --format",
    )

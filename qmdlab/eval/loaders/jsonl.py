"""Plain JSONL suites: ``docs.jsonl`` + ``queries.jsonl`` with the judgments inline.

``docs.jsonl``: ``{"id": "d1", "title": "…", "text": "…"}`` per line (``docid``/``_id``
accepted for ``id``); instead of it a ``corpus/`` directory of markdown files may hold the
documents (docid = path relative to ``corpus/``).

``queries.jsonl``: ``{"qid": "q1", "query": "…", "qrels": {"d1": 2, "d7": 1}}`` per line,
with optional ``category`` and ``intent``; a ``qrels.txt`` in TREC format may replace the
inline ``qrels`` objects.
"""

from __future__ import annotations

from pathlib import Path

from qmdlab.errors import DataFormatError

from ._common import SuiteData, docs_frame, field, qrels_frame, queries_frame, read_jsonl, read_trec_qrels


def read_queries_jsonl(path: Path) -> tuple[list[dict], list[tuple[str, str, int]]]:
    """Read queries (and any inline ``qrels`` objects) from a JSONL file."""
    queries: list[dict] = []
    qrels: list[tuple[str, str, int]] = []
    seen: dict[str, int] = {}
    for n, obj in read_jsonl(path):
        qid = field(obj, ("qid", "id", "_id"), path, n)
        if qid in seen:
            raise DataFormatError(
                path, n, f"duplicate qid {qid!r} (first at line {seen[qid]})", "give every query its own id"
            )
        seen[qid] = n
        queries.append(
            {
                "qid": qid,
                "query": field(obj, ("query", "text"), path, n),
                "category": field(obj, ("category",), path, n, required=False),
                "intent": field(obj, ("intent",), path, n, required=False),
            }
        )
        judged = obj.get("qrels")
        if judged is None:
            continue
        if not isinstance(judged, dict):
            raise DataFormatError(path, n, "'qrels' must be an object {docid: grade}", 'write e.g. "qrels": {"d1": 1}')
        for docid, grade in judged.items():
            if (
                isinstance(grade, bool)
                or not isinstance(grade, (int, float))
                or grade != grade
                or grade in (float("inf"), float("-inf"))
            ):  # NaN / Infinity are valid JSON to Python
                raise DataFormatError(path, n, f"grade of {docid!r} is not a number", "use integer grades")
            qrels.append((qid, str(docid), int(grade)))
    return queries, qrels


def load_jsonl(directory: str | Path) -> SuiteData:
    """Load a plain JSONL suite directory (see the module notes)."""
    directory = Path(directory)
    qpath = directory / "queries.jsonl"
    if not qpath.is_file():
        raise DataFormatError(qpath, None, "file missing", "a JSONL suite has queries.jsonl and docs.jsonl")
    queries, inline = read_queries_jsonl(qpath)
    if (directory / "qrels.txt").is_file():
        qrels = read_trec_qrels(directory / "qrels.txt")
    elif inline:
        qrels = qrels_frame(inline)
    else:
        raise DataFormatError(qpath, None, "no judgments", 'add "qrels": {docid: grade} to the queries')
    if (directory / "corpus").is_dir():
        return SuiteData(queries=queries_frame(queries), qrels=qrels, corpus_dir=directory / "corpus")
    dpath = directory / "docs.jsonl"
    if not dpath.is_file():
        raise DataFormatError(dpath, None, "file missing", "add docs.jsonl or a corpus/ directory")
    docs = [
        (
            field(o, ("id", "docid", "_id"), dpath, n),
            field(o, ("title",), dpath, n, required=False) or "",
            field(o, ("text", "body"), dpath, n),
        )
        for n, o in read_jsonl(dpath)
    ]
    return SuiteData(queries=queries_frame(queries), qrels=qrels, docs=docs_frame(docs))

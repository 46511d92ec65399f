"""BEIR datasets: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

``corpus.jsonl`` lines are ``{"_id", "title", "text"}``, ``queries.jsonl`` lines
``{"_id", "text"}``; the qrels TSV has a header (``query-id corpus-id score``) and one
judgment per line. Only queries with judgments in the chosen split are kept.

A directory with both ``qrels/train.tsv`` and ``qrels/test.tsv`` (SciFact, FiQA, NFCorpus, …) is
read with its official split: the judged queries of both files, and :attr:`SuiteData.split`
saying which side each is on, so tuning and training fit ``train`` and report ``test``.
"""

from __future__ import annotations

from pathlib import Path

from qmdlab.errors import DataFormatError

from ._common import (
    SuiteData,
    docs_frame,
    expect_fields,
    field,
    grade_of,
    numbered_lines,
    official_split,
    qrels_frame,
    queries_frame,
    read_jsonl,
)


def read_beir_qrels(path: Path) -> list[tuple[str, str, int]]:
    """Read a BEIR qrels TSV (header line optional)."""
    rows = []
    for n, line in numbered_lines(path):
        if not line.strip():
            continue
        parts = line.split("\t") if "\t" in line else line.split()
        if n == 1 and parts and parts[0].strip().lower() in {"query-id", "query_id", "qid"}:
            continue
        expect_fields(parts, "query-id corpus-id score", path, n, "write one tab-separated judgment per line")
        grade = grade_of(parts[2], "score", path, n, "use an integer score")
        rows.append((parts[0].strip(), parts[1].strip(), grade))
    if not rows:
        raise DataFormatError(path, None, "no judgments found", "add 'query-id<TAB>corpus-id<TAB>score' lines")
    return rows


def load_beir(directory: str | Path, split: str | None = None) -> SuiteData:
    """Load a BEIR dataset directory; ``split`` names ``qrels/<split>.tsv``.

    With no ``split``, a directory holding ``qrels/train.tsv`` and ``qrels/test.tsv`` loads both
    with its official split (:attr:`SuiteData.split`); otherwise ``test`` is read, and when that
    is missing and the directory has exactly one qrels file, that one is used.
    """
    directory = Path(directory)
    qdir = directory / "qrels"
    if split is None and (qdir / "train.tsv").is_file() and (qdir / "test.tsv").is_file():
        test = load_beir(directory, "test")
        train_rows = read_beir_qrels(qdir / "train.tsv")
        train = qrels_frame(train_rows)
        queries = _queries(directory)
        texts = dict(zip(queries["qid"].to_list(), queries["query"].to_list(), strict=True))
        parts = official_split(train["qid"].unique(), test.qrels["qid"].unique(), qdir, texts)
        qrels = qrels_frame(list(test.qrels.iter_rows()) + train_rows)
        whole = SuiteData(queries=queries, qrels=qrels, docs=test.docs)
        return SuiteData(queries=whole.judged_queries(), qrels=qrels, docs=test.docs, split=parts)
    split = split or "test"
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (directory / name).is_file():
            raise DataFormatError(
                directory / name,
                None,
                "file missing",
                "a BEIR directory has corpus.jsonl, queries.jsonl and qrels/<split>.tsv",
            )
    qrels_path = directory / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        found = sorted((directory / "qrels").glob("*.tsv")) if (directory / "qrels").is_dir() else []
        if len(found) != 1:
            raise DataFormatError(
                qrels_path,
                None,
                "qrels split missing",
                f"choose one of: {', '.join(p.stem for p in found) or '(none)'}",
            )
        qrels_path = found[0]
    docs = []
    for n, obj in read_jsonl(directory / "corpus.jsonl"):
        docs.append(
            (
                field(obj, ("_id", "id"), directory / "corpus.jsonl", n),
                field(obj, ("title",), directory / "corpus.jsonl", n, required=False) or "",
                field(obj, ("text",), directory / "corpus.jsonl", n),
            )
        )
    qrels = qrels_frame(read_beir_qrels(qrels_path))
    data = SuiteData(queries=_queries(directory), qrels=qrels, docs=docs_frame(docs))
    return SuiteData(queries=data.judged_queries(), qrels=qrels, docs=data.docs)


def _queries(directory: Path):
    """``queries.jsonl`` as a queries frame."""
    return queries_frame(
        [
            {
                "qid": field(obj, ("_id", "id"), directory / "queries.jsonl", n),
                "query": field(obj, ("text", "query"), directory / "queries.jsonl", n),
            }
            for n, obj in read_jsonl(directory / "queries.jsonl")
        ]
    )

"""BEIR datasets: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

``corpus.jsonl`` lines are ``{"_id", "title", "text"}``, ``queries.jsonl`` lines
``{"_id", "text"}``; the qrels TSV has a header (``query-id corpus-id score``) and one
judgment per line. Only queries with judgments in the chosen split are kept.
"""

from __future__ import annotations

from pathlib import Path

from qmdlab.errors import DataFormatError

from ._common import SuiteData, docs_frame, field, numbered_lines, qrels_frame, queries_frame, read_jsonl


def read_beir_qrels(path: Path) -> list[tuple[str, str, int]]:
    """Read a BEIR qrels TSV (header line optional)."""
    rows = []
    for n, line in numbered_lines(path):
        if not line.strip():
            continue
        parts = line.split("\t") if "\t" in line else line.split()
        if n == 1 and parts and parts[0].strip().lower() in {"query-id", "query_id", "qid"}:
            continue
        if len(parts) != 3:
            raise DataFormatError(
                path,
                n,
                f"expected 3 fields 'query-id corpus-id score', got {len(parts)}",
                "write one tab-separated judgment per line",
            )
        try:
            grade = int(float(parts[2]))
        except (ValueError, OverflowError):  # "nan" / "inf" / "1e999"
            raise DataFormatError(path, n, f"score {parts[2]!r} is not a number", "use an integer score") from None
        rows.append((parts[0].strip(), parts[1].strip(), grade))
    if not rows:
        raise DataFormatError(path, None, "no judgments found", "add 'query-id<TAB>corpus-id<TAB>score' lines")
    return rows


def load_beir(directory: str | Path, split: str = "test") -> SuiteData:
    """Load a BEIR dataset directory; ``split`` names ``qrels/<split>.tsv``.

    When that split is missing and the directory has exactly one qrels file, that one is used.
    """
    directory = Path(directory)
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
    queries = [
        {
            "qid": field(obj, ("_id", "id"), directory / "queries.jsonl", n),
            "query": field(obj, ("text", "query"), directory / "queries.jsonl", n),
        }
        for n, obj in read_jsonl(directory / "queries.jsonl")
    ]
    qrels = qrels_frame(read_beir_qrels(qrels_path))
    data = SuiteData(queries=queries_frame(queries), qrels=qrels, docs=docs_frame(docs))
    return SuiteData(queries=data.judged_queries(), qrels=qrels, docs=data.docs)

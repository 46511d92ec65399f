"""The qmdlab layout (the default corpus in ``data/``): markdown files + queries + TREC qrels.

``corpus/**/*.md`` (indexed in place; docid = path relative to ``corpus/``),
``queries.jsonl`` (``qid, query, category[, intent]``) and ``qrels.txt``
(``qid 0 docno grade`` with docno the path relative to ``corpus/``).
"""

from __future__ import annotations

from pathlib import Path

from qmdlab.errors import DataFormatError

from ._common import SuiteData, queries_frame, read_trec_qrels
from .jsonl import read_queries_jsonl


def load_default(directory: str | Path) -> SuiteData:
    """Load a directory in the qmdlab layout (``data/`` of the repository is one)."""
    directory = Path(directory)
    corpus = directory / "corpus"
    if not corpus.is_dir():
        raise DataFormatError(corpus, None, "corpus directory missing", "put the markdown files under corpus/")
    qpath, rpath = directory / "queries.jsonl", directory / "qrels.txt"
    for p in (qpath, rpath):
        if not p.is_file():
            raise DataFormatError(p, None, "file missing", "the qmdlab layout has corpus/, queries.jsonl, qrels.txt")
    queries, _ = read_queries_jsonl(qpath)
    qrels = read_trec_qrels(rpath)
    missing = sorted(d for d in qrels["docid"].unique().to_list() if not (corpus / d).is_file())
    if missing:
        raise DataFormatError(
            rpath,
            None,
            f"{len(missing)} judged documents are not in corpus/: " + ", ".join(missing[:5]),
            "fix the docno (a path relative to corpus/)",
        )
    return SuiteData(queries=queries_frame(queries), qrels=qrels, corpus_dir=corpus)

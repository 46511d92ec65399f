"""Fixtures of the eval tests: synthetic traces built from ``lists`` frames (no models, no index)."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.pipeline.trace import SCHEMAS, Trace


def make_trace(
    entries: list[tuple[str, str, str, str, int, float]], rerank: dict | None = None, texts: dict | None = None
) -> Trace:
    """A trace from list entries ``(qid, source, query_type, docno, rank, score)``.

    Each distinct (qid, source, query_type) is one list; ``rerank`` maps (qid, docno) to a
    rerank score.
    """
    ids: dict[tuple, int] = {}
    rows = []
    for qid, source, qtype, docno, rank, score in entries:
        list_id = ids.setdefault((qid, source, qtype), len([k for k in ids if k[0] == qid]))
        weight = 2.0 if qtype == "original" else 1.0
        rows.append(
            {
                "qid": qid,
                "list_id": list_id,
                "source": source,
                "query_type": qtype,
                "subquery": "q",
                "docno": docno,
                "chunk_id": None,
                "rank": rank,
                "backend_score": score,
                "score": score,
                "weight": weight,
            }
        )
    lists = pl.DataFrame(rows, schema=SCHEMAS["lists"])
    rr = pl.DataFrame(
        [
            {"qid": q, "docno": d, "chunk_id": None, "chunk_hash": None, "rerank_score": s, "cached": False}
            for (q, d), s in (rerank or {}).items()
        ],
        schema=SCHEMAS["rerank"],
    )
    qids = sorted({e[0] for e in entries})
    queries = pl.DataFrame(
        {"qid": qids, "text": [(texts or {}).get(q, f"query {q}") for q in qids], "intent": [None] * len(qids)},
        schema=SCHEMAS["queries"],
    )
    return Trace(queries=queries, lists=lists, rerank=rr)


@pytest.fixture
def toy_suite():
    """30 queries, two documents each: the relevant one ``r`` and a distractor ``d``.

    20 queries ("A") have ``r`` first in the BM25 list and ``d`` first in the vector list; 10
    ("B") the reverse. At equal weights the docno tie-break puts ``d`` first everywhere, so
    the best configurations are exactly those with ``weight_original_fts >
    weight_original_vec``: nDCG@10 = (20·1 + 10/log2(3)) / 30.
    """
    entries, qrels = [], []
    for i in range(30):
        qid = f"q{i:02d}"
        r, d = f"c/{qid}/r.md", f"c/{qid}/d.md"
        fts_first, vec_first = (r, d) if i < 20 else (d, r)
        entries += [(qid, "fts", "original", fts_first, 1, 0.8), (qid, "vec", "original", vec_first, 1, 0.7)]
        qrels.append((qid, r, 1))
    qrels_df = pl.DataFrame(qrels, schema=["qid", "docno", "grade"], orient="row")
    return make_trace(entries), qrels_df


@pytest.fixture
def trace_factory():
    """:func:`make_trace` (test modules cannot import conftest under ``--import-mode=importlib``)."""
    return make_trace


PETS_DOCS = {
    "1": ("Cats", "cats purr and sleep"),
    "2": ("Dogs", "dogs bark at cats"),
    "3": ("Birds", "birds fly south"),
    "10": ("Fish", "fish swim in water"),
}
PETS_QUERIES = {"1": "cats", "2": "birds fly", "3": "swimming fish"}
PETS_QRELS = [("1", "1"), ("1", "2"), ("2", "3"), ("3", "10")]


def pets_suite(tmp_path, queries: dict | None = None, qrels: list | None = None):
    """A four-document SMART suite written under ``tmp_path/user-data`` (docid 10 checks that ids are
    not positions); ``queries``/``qrels`` add to the three judged queries."""
    d = tmp_path / "user-data"
    d.mkdir()
    qs = {**PETS_QUERIES, **(queries or {})}
    (d / "T.ALL").write_text("".join(f".I {i}\n.T\n{t}\n.W\n{w}\n" for i, (t, w) in PETS_DOCS.items()))
    (d / "T.QRY").write_text("".join(f".I {q}\n.W\n{text}\n" for q, text in qs.items()))
    (d / "T.REL").write_text("".join(f"{q} {doc} 0 0.0\n" for q, doc in PETS_QRELS + (qrels or [])))
    from qmdlab.eval.suites import get_suite

    return get_suite(d, "smart")

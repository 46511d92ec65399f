"""Training data for the cross-encoder reranker, cut from recorded traces and the collection.

Three sources, each a plain list of rows the sentence-transformers trainer reads:

- **labelled lists** (:func:`query_lists`): per training query, its judged-relevant
  documents (label = grade) and the pipeline's own fused candidates that are judged
  non-relevant or unjudged (label 0, the hard negatives), each represented by the chunk the
  pipeline would show the reranker (:func:`qmdlab.pipeline.select.select_chunks`, so training
  inputs equal serving inputs);
- **in-collection pairs** (:func:`collection_pairs`): heading or title → the section text
  without that heading (inverse-cloze), with a BM25-mined negative from another document.
  These use no query and no judgment, so they cannot leak a held-out label; they are what a
  collection without labels trains on;
- **distillation targets**: an LLM reranker's cached scores replace the 0 label of
  unjudged candidates (``teacher`` argument of :func:`query_lists`).

:func:`candidate_table` is the one table all three evaluation and training steps read:
``qid, query, docno, fused_rank, fused_score, candidate, chunk_id, text, grade``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from qmdlab.errors import QmdlabError

if TYPE_CHECKING:
    from qmdlab.eval.study import Study
    from qmdlab.eval.suites import Suite
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.store import Index
    from qmdlab.training.reranker import RerankerRunConfig

CANDIDATE_SCHEMA = {
    "qid": pl.Utf8,
    "query": pl.Utf8,
    "docno": pl.Utf8,
    "fused_rank": pl.Int64,
    "fused_score": pl.Float64,
    "candidate": pl.Boolean,
    "chunk_id": pl.Int64,
    "text": pl.Utf8,
    "grade": pl.Int64,
}


def candidate_table(trace, qrels: pl.DataFrame, queries: pl.DataFrame, index, config) -> pl.DataFrame:
    """The reranker's view of every judged query: candidates plus relevant non-candidates.

    Parameters
    ----------
    trace : qmdlab.pipeline.trace.Trace
        Recorded traces (their ``fused`` table gives the candidates and fused ranks).
    qrels : pl.DataFrame
        ``qid, docno, grade`` (qmdlab docnos).
    queries : pl.DataFrame
        ``qid, query`` (``intent`` used for chunk selection when present).
    index : qmdlab.store.Index
        Where the chunk texts are read.
    config : qmdlab.pipeline.config.PipelineConfig
        ``candidate_limit`` and chunk-selection options (the serving pipeline's).

    Returns
    -------
    pl.DataFrame
        :data:`CANDIDATE_SCHEMA`; ``candidate`` is True for the top ``candidate_limit`` fused
        documents (what the reranker scores at serving time), False for relevant documents the
        fusion did not bring (training positives only); ``grade`` is 0 for unjudged documents.
    """
    from qmdlab.pipeline.select import select_chunks

    grades = {(q, d): int(g) for q, d, g in qrels.select("qid", "docno", "grade").iter_rows()}
    fused = trace.fused.filter(pl.col("fused_rank") <= config.candidate_limit).sort(["qid", "fused_rank"])
    by_q = {q: part for (q,), part in fused.group_by("qid", maintain_order=True)}
    rows: dict[str, list] = {c: [] for c in CANDIDATE_SCHEMA}
    has_intent = "intent" in queries.columns
    for r in queries.iter_rows(named=True):
        qid, text = str(r["qid"]), r["query"]
        part = by_q.get(qid)
        cands = part["docno"].to_list() if part is not None else []
        ranks = dict(zip(cands, part["fused_rank"].to_list())) if part is not None else {}
        scores = dict(zip(cands, part["fused_score"].to_list())) if part is not None else {}
        rel = [d for (q, d), g in grades.items() if q == qid and g >= 1 and d not in ranks]
        docnos = cands + sorted(rel)
        if not docnos:
            continue
        chunks = index.chunks(docnos)
        sel = select_chunks(chunks, docnos, text, (r.get("intent") or None) if has_intent else None, config)
        for d, cid, t in sel.select("docno", "chunk_id", "text").iter_rows():
            rows["qid"].append(qid)
            rows["query"].append(text)
            rows["docno"].append(d)
            rows["fused_rank"].append(ranks.get(d))
            rows["fused_score"].append(scores.get(d))
            rows["candidate"].append(d in ranks)
            rows["chunk_id"].append(cid)
            rows["text"].append(t)
            rows["grade"].append(grades.get((qid, d), 0))
    return pl.DataFrame(rows, schema=CANDIDATE_SCHEMA)


def query_lists(
    table: pl.DataFrame,
    qids: Iterable[str],
    *,
    list_size: int = 16,
    max_positives: int = 8,
    lists_per_query: int = 1,
    seed: int = 0,
    teacher: Mapping[tuple[str, str], float] | None = None,
) -> list[dict]:
    """Listwise training rows ``{"qid", "query", "docs", "labels"}`` for ``qids``.

    Each list holds up to ``max_positives`` relevant documents (sampled, label = grade) and
    fills the rest of ``list_size`` with the highest-fused non-relevant candidates (label 0, or
    the teacher's score when ``teacher`` has one for the pair); documents are shuffled so the
    position in the list carries no signal. With ``lists_per_query`` > 1 each query
    contributes several lists with different positive samples and the next negatives.

    Queries with no relevant document are skipped (a list without a positive teaches a
    listwise loss nothing).

    Examples
    --------
    >>> t = pl.DataFrame({"qid": ["1"] * 3, "query": ["q"] * 3, "docno": ["a", "b", "c"],
    ...     "fused_rank": [1, 2, None], "fused_score": [0.5, 0.4, None], "candidate": [True, True, False],
    ...     "chunk_id": [1, 2, 3], "text": ["A", "B", "C"], "grade": [0, 2, 1]}, schema=CANDIDATE_SCHEMA)
    >>> [sorted(zip(r["docs"], r["labels"])) for r in query_lists(t, ["1"], list_size=3)]
    [[('A', 0.0), ('B', 2.0), ('C', 1.0)]]
    """
    rng = np.random.default_rng(seed)
    want = [str(q) for q in qids]
    sub = table.filter(pl.col("qid").is_in(want))
    by_q = {q: part for (q,), part in sub.group_by("qid", maintain_order=True)}
    out = []
    for qid in want:
        part = by_q.get(qid)
        if part is None:
            continue
        pos = part.filter(pl.col("grade") >= 1)
        neg = part.filter((pl.col("grade") < 1) & pl.col("candidate")).sort("fused_rank")
        if pos.height == 0:
            continue
        query = part["query"][0]
        pos_rows = list(zip(pos["docno"].to_list(), pos["text"].to_list(), pos["grade"].to_list()))
        neg_rows = list(zip(neg["docno"].to_list(), neg["text"].to_list()))
        for k in range(lists_per_query):
            take = rng.permutation(len(pos_rows))[:max_positives]
            docs = [(pos_rows[i][1], float(pos_rows[i][2])) for i in take]
            n_neg = max(0, list_size - len(docs))
            start = (k * n_neg) % max(1, len(neg_rows)) if neg_rows else 0
            chosen = (neg_rows[start:] + neg_rows[:start])[:n_neg]
            for d, t in chosen:
                label = 0.0 if teacher is None else float(teacher.get((qid, d), 0.0))
                docs.append((t, label))
            order = rng.permutation(len(docs))
            out.append(
                {"qid": qid, "query": query, "docs": [docs[i][0] for i in order], "labels": [docs[i][1] for i in order]}
            )
    return out


def pair_rows(lists: Sequence[dict]) -> list[dict]:
    """Listwise rows flattened to pointwise ``{"qid", "query", "passage", "label"}`` rows (labels
    scaled to [0, 1] by the largest grade), for the binary cross-entropy loss.

    >>> pair_rows([{"qid": "1", "query": "q", "docs": ["a", "b"], "labels": [2.0, 0.0]}])
    [{'qid': '1', 'query': 'q', 'passage': 'a', 'label': 1.0}, {'qid': '1', 'query': 'q', 'passage': 'b', 'label': 0.0}]
    """
    top = max((max(r["labels"]) for r in lists if r["labels"]), default=1.0) or 1.0
    return [
        {"qid": r["qid"], "query": r["query"], "passage": d, "label": min(1.0, float(lab) / top)}
        for r in lists
        for d, lab in zip(r["docs"], r["labels"])
    ]


_HEADING_LINE = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")


def strip_heading(text: str, heading: str) -> str:
    """``text`` without markdown heading lines equal to ``heading`` (the inverse-cloze cut).

    >>> strip_heading("# Cats\\n\\nCats purr.\\n## Other", "Cats")
    'Cats purr.\\n## Other'
    """
    keep = []
    for line in text.split("\n"):
        m = _HEADING_LINE.match(line)
        if m and m.group(1).strip().lower() == heading.strip().lower():
            continue
        keep.append(line)
    return "\n".join(keep).strip()


def heading_rows(
    chunks: pl.DataFrame,
    titles: Mapping[str, str],
    row: Callable[[str, str, str], dict | None],
    *,
    max_pairs: int,
    seed: int,
) -> list[dict]:
    """At most ``max_pairs`` rows, one per distinct anchor, from ``chunks`` (``docno``, ``heading_path``,
    ``text``) in a seeded order: a chunk's anchor is its innermost heading, else its document's title
    (``titles``), and ``row(docno, anchor, text without the anchor's heading)`` is its row, or None to skip it."""
    rows = chunks.select("docno", "heading_path", "text").rows()
    out: list[dict] = []
    seen: set[str] = set()
    for i in np.random.default_rng(seed).permutation(len(rows)):
        if len(out) >= max_pairs:
            break
        docno, path, text = rows[int(i)]
        anchor = (path or "").split(" > ")[-1].strip() or titles.get(docno, "").strip()
        if anchor.lower() in seen:
            continue
        made = row(docno, anchor, strip_heading(text, anchor))
        if made is not None:
            seen.add(anchor.lower())
            out.append(made)
    return out


def collection_pairs(
    index,
    collections: Sequence[str] | None = None,
    *,
    max_pairs: int = 2000,
    hard_negatives: int = 1,
    min_chars: int = 80,
    seed: int = 0,
) -> list[dict]:
    """Inverse-cloze pairs from the collection itself: ``{"anchor", "positive", "negative_1", …}``.

    The anchor is a chunk's innermost heading (or the document title for a chunk with none),
    the positive is the chunk text without that heading, and each negative is the first chunk
    of a BM25 hit for the anchor in *another* document (ranks 2–10: close enough to be hard).
    No query and no judgment is read, so these pairs carry no label of any suite.

    Parameters
    ----------
    index : qmdlab.store.Index
    collections : sequence of str, optional
    max_pairs : int
        At most this many pairs (a seeded sample of the chunks).
    hard_negatives : int
        Mined negatives per pair (pairs without enough are dropped).
    min_chars : int
        Skip chunks whose text without the heading is shorter.
    """
    from qmdlab.search import bm25_search

    docs = index.documents(list(collections) if collections else None)
    if docs.height == 0:
        raise QmdlabError("the collection has no documents to pair; index it first (`qmdlab update`)")
    titles = dict(zip(docs["docno"].to_list(), docs["title"].fill_null("").to_list()))
    chunks = index.chunks(list(titles))
    first_text: dict[str, str] = {}
    for d, seq, t in chunks.sort(["docno", "seq"]).select("docno", "seq", "text").iter_rows():
        first_text.setdefault(d, t)

    def pair(docno: str, anchor: str, positive: str) -> dict | None:
        if not anchor or len(positive) < min_chars:
            return None
        hits = bm25_search(index, anchor, limit=10, collections=list(collections) if collections else None)
        negs = [h.docno for h in hits[1:] if h.docno != docno][:hard_negatives]
        if len(negs) < hard_negatives:
            return None
        row = {"anchor": anchor, "positive": positive}
        for k, d in enumerate(negs, start=1):
            row[f"negative_{k}"] = strip_heading(first_text[d], titles.get(d, ""))
        return row

    return heading_rows(chunks, titles, pair, max_pairs=max_pairs, seed=seed)


__all__ = [
    "CANDIDATE_SCHEMA",
    "candidate_table",
    "query_lists",
    "pair_rows",
    "collection_pairs",
    "heading_rows",
    "strip_heading",
]


# -- the recorded suite ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RerankCandidates:
    """The suite as the reranker sees it: each judged query's rerank candidates (the chunks the pipeline
    would send the reranker, with their grades), recorded once with rerank off. Not the trace cache's
    :class:`qmdlab.eval.record.RecordingInfo`: this is built from one such recording."""

    suite: Suite
    table: pl.DataFrame  # training_data.CANDIDATE_SCHEMA
    study: Study  # of the recorded traces
    index: Index
    queries: pl.DataFrame  # qid, query
    config: PipelineConfig  # used for recording (rerank off)


def record_candidates(cfg: RerankerRunConfig, log: Callable[[str], None] = print) -> RerankCandidates:
    """Run (or load from the trace cache) the suite with expansion/rerank off; build its :class:`RerankCandidates`."""
    from qmdlab.eval.runner import run_suite
    from qmdlab.eval.study import Study
    from qmdlab.eval.suites import get_suite
    from qmdlab.models import load_models
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.store import Index

    suite = get_suite(cfg.suite, cfg.format)
    data = suite.data()
    judged = data.judged_queries()
    if judged.height == 0:
        raise QmdlabError(
            f"suite {suite.name!r} ({suite.path}) has no judged queries: add qrels (query id, "
            "document id, grade ≥ 1) or train without labels with --folds 0 --set supervised=false"
        )
    if not data.qrels.filter(pl.col("grade") >= 1).height:
        raise QmdlabError(
            f"suite {suite.name!r} ({suite.path}) has no positive judgments (every grade is 0): "
            "mark at least one relevant document per query with grade ≥ 1"
        )
    pcfg = PipelineConfig.from_yaml(cfg.pipeline_config) if cfg.pipeline_config else PipelineConfig()
    pcfg = pcfg.replace(rerank=False, expand=cfg.expand and pcfg.expand)
    models = load_models(cfg.preset, expand=None if pcfg.expand else "none", rerank="none", n_threads=cfg.n_threads)
    res = run_suite(
        suite,
        models,
        pcfg,
        out=Path(cfg.out) / "recorded",
        name="fused",
        progress=cfg.progress,
        check_ranx=False,
        log=log,
        all_queries=True,  # an official split's training queries are what the model learns from
    )
    pcfg = pcfg.replace(candidate_limit=cfg.candidates)  # the rerank depth; recorded traces are unchanged
    study = Study(res.trace, res.qrels, config=pcfg)
    index = Index.open(suite.workdir() / "index")
    queries = judged.select(pl.col("qid").cast(pl.Utf8), "query", *(["intent"] if "intent" in judged.columns else []))
    table = candidate_table(res.trace, res.qrels, queries, index, pcfg)
    if not table.filter(pl.col("grade") >= 1).height:
        raise QmdlabError(
            f"suite {suite.name!r}: no relevant document of any query is in the index "
            f"{index.dir}; check that the qrels' document ids match the collection"
        )
    return RerankCandidates(suite, table, study, index, queries.select("qid", "query"), pcfg)

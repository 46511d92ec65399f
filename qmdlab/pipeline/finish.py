"""Finish: dedupe (by docno, then by content digest), min-score, tag rank-lift, limit (docs/design.md, pipeline step 8).

:func:`finish` works on the ``final`` table of many queries at once (it is part of
:func:`qmdlab.retune`). Snippets with line numbers come from :mod:`qmdlab.pipeline.results`
(the same helper ``search`` uses) when :class:`~qmdlab.pipeline.lab.Lab` builds the
``results`` table.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import polars as pl

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.ranking import SMALL_ROWS, ranks_within_qid
from qmdlab.pipeline.trace import SCHEMAS, Columns, as_frame, height, sort_within_qid


def tag_lift(final: pl.DataFrame, doc_tags: pl.DataFrame | None, tags: Sequence[str], places: int) -> pl.DataFrame:
    """Move documents whose tags overlap ``tags`` up by at most ``places`` positions.

    A lifted document at rank *r* is placed just before the document at rank
    ``max(1, r - places)``; everything else keeps its relative order. ``final_rank``
    is renumbered; scores are unchanged.

    >>> f = pl.DataFrame({"qid": ["q"] * 4, "docno": list("abcd"), "final_rank": [1, 2, 3, 4]})
    >>> t = pl.DataFrame({"docno": ["d"], "tags": [["git"]]})
    >>> tag_lift(f, t, ["git"], 2)["docno"].to_list()
    ['a', 'd', 'b', 'c']
    """
    if not tags or places <= 0 or doc_tags is None or final.height == 0:
        return final
    want = [t.lower() for t in tags]
    lifted = doc_tags.select(
        "docno", _lift=pl.col("tags").list.eval(pl.element().str.to_lowercase().is_in(want)).list.any()
    ).unique("docno", keep="first")
    out = final.join(lifted, on="docno", how="left").with_columns(pl.col("_lift").fill_null(False))
    key = (
        pl.when(pl.col("_lift"))
        .then(pl.max_horizontal(pl.col("final_rank") - places, pl.lit(1)))
        .otherwise(pl.col("final_rank"))
    )
    out = sort_within_qid(out.with_columns(_key=key), ["_key", "_lift", "final_rank"], [False, True, False])
    out = out.with_columns(final_rank=(pl.int_range(pl.len()).over("qid") + 1).cast(pl.Int64))
    return out.drop("_lift", "_key")


_HASHES: list = [None, None]  # (weakref to a doc_tags frame, its {docno: hash}): one frame per index state


def doc_hashes(doc_tags: pl.DataFrame) -> dict[str, str | None] | None:
    """``{docno: content digest}`` of ``doc_tags`` (kept for the frame last asked about, so a lab
    that passes the same frame to every query builds it once); ``None`` when a docno repeats.

    >>> doc_hashes(pl.DataFrame({"docno": ["a", "b"], "hash": ["x", None]}))
    {'a': 'x', 'b': None}
    """
    ref = _HASHES[0]
    if ref is not None and ref() is doc_tags:
        return _HASHES[1]
    docnos = doc_tags.get_column("docno").to_list()
    hashes = dict(zip(docnos, doc_tags.get_column("hash").to_list()))
    out = hashes if len(hashes) == len(docnos) else None
    try:
        _HASHES[:] = [weakref.ref(doc_tags), out]
    except TypeError:  # not weak-referenceable: no cache
        pass
    return out


def _content_duplicates_small(final: pl.DataFrame, hashes: dict[str, str | None]) -> list[tuple[str, str, str]]:
    """:func:`content_duplicates`' rows in plain Python (:func:`content_duplicate_rows`)."""
    qids, docs, ranks = (final.get_column(c).to_list() for c in ("qid", "docno", "final_rank"))
    return content_duplicate_rows(qids, docs, ranks, hashes)


def content_duplicate_rows(
    qids: Sequence[str], docs: Sequence[str], ranks: Sequence[int], hashes: dict[str, str | None]
) -> list[tuple[str, str, str]]:
    """``(qid, docno, kept)`` of :func:`content_duplicates` from plain columns (no null rank): rows
    ranked within each query (queries in first-seen order, ties in ``final_rank`` in row order),
    first document of each digest kept."""
    order: dict[str, int] = {}
    for q in qids:
        order.setdefault(q, len(order))
    rows = sorted(zip(qids, docs, ranks), key=lambda r: (order[r[0]], r[2]))
    first: dict[tuple[str, str], str] = {}
    out = []
    for q, d, _ in rows:
        h = hashes.get(d)
        if h is not None:
            kept = first.setdefault((q, h), d)
            if kept != d:
                out.append((q, d, kept))
    return out


def content_duplicates(final: pl.DataFrame, doc_tags: pl.DataFrame | None) -> pl.DataFrame:
    """``qid, docno, kept``: every document whose content digest equals that of a better-ranked
    document of the same query (``kept``); needs a ``hash`` column in ``doc_tags``.

    >>> f = pl.DataFrame({"qid": ["q"] * 3, "docno": ["a", "b", "c"], "final_rank": [2, 1, 3]})
    >>> h = pl.DataFrame({"docno": ["a", "b", "c"], "tags": [[], [], []], "hash": ["x", "y", "x"]})
    >>> content_duplicates(f, h).rows()
    [('q', 'c', 'a')]
    """
    schema = pl.Schema({"qid": pl.String, "docno": pl.String, "kept": pl.String})
    if doc_tags is None or "hash" not in doc_tags.columns or final.height == 0:
        return pl.DataFrame(schema=schema)
    if final.height <= SMALL_ROWS and final["final_rank"].null_count() == 0:
        hashes = doc_hashes(doc_tags)
        if hashes is not None:
            return pl.DataFrame(_content_duplicates_small(final, hashes), schema=schema, orient="row")
    ranked = sort_within_qid(final.select("qid", "docno", "final_rank"), ["final_rank"])
    ranked = ranked.join(doc_tags.select("docno", "hash").unique("docno"), on="docno", how="left")
    ranked = ranked.with_columns(kept=pl.col("docno").first().over(["qid", "hash"]))
    return (
        ranked.filter(pl.col("hash").is_not_null() & (pl.col("kept") != pl.col("docno")))
        .select("qid", "docno", "kept")
        .cast(schema)
    )


def min_score_filter(final: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """Drop ``final_score < min_score``; with ``min_score_fallback`` > 0, a query left with nothing
    keeps its best ``fallback_max`` rows scoring at least ``min_score - min_score_fallback``
    (the fallback probe). ``final`` is sorted by rank within each query.

    >>> f = pl.DataFrame({"qid": ["q"] * 5 + ["r"], "docno": list("abcdea"),
    ...                   "final_score": [0.5, 0.45, 0.41, 0.4, 0.2, 0.9], "final_rank": [1, 2, 3, 4, 5, 1]})
    >>> min_score_filter(f, PipelineConfig(min_score=0.6)).rows()
    [('r', 'a', 0.9, 1)]
    >>> min_score_filter(f, PipelineConfig(min_score=0.6, min_score_fallback=0.2))["docno"].to_list()
    ['a', 'b', 'c', 'a']
    >>> min_score_filter(f, PipelineConfig(min_score=0.6, min_score_fallback=0.2, fallback_max=1))["docno"].to_list()
    ['a', 'a']
    """
    passed = final.filter(pl.col("final_score") >= config.min_score)
    if config.min_score_fallback <= 0 or config.fallback_max <= 0 or final.height == 0:
        return passed
    empty = final.select("qid").unique().join(passed.select("qid").unique(), on="qid", how="anti")
    if empty.height == 0:
        return passed
    floor = config.min_score - config.min_score_fallback
    probe = final.join(empty, on="qid", how="semi").filter(pl.col("final_score") >= floor)
    probe = probe.filter(pl.int_range(pl.len()).over("qid") < int(config.fallback_max))
    order = final.select("qid").unique(maintain_order=True).with_row_index("_q")
    out = pl.concat([passed, probe], how="vertical").join(order, on="qid", how="left")
    return out.sort(["_q", "final_rank"], maintain_order=True).drop("_q")


def finish(final: pl.DataFrame, config: PipelineConfig, doc_tags: pl.DataFrame | None = None) -> pl.DataFrame:
    """Dedupe by (qid, docno) and, with ``dedupe_content`` and a ``hash`` column in ``doc_tags``,
    by content digest (:func:`content_duplicates`); drop ``final_score < min_score``
    (:func:`min_score_filter`, with its fallback probe), apply the tag lift, keep ``limit``.

    >>> f = pl.DataFrame({"qid": ["q"] * 3, "docno": ["a", "b", "a"], "final_score": [0.9, 0.5, 0.4],
    ...                   "final_rank": [1, 2, 3]})
    >>> finish(f, PipelineConfig(min_score=0.45, limit=5))["docno"].to_list()
    ['a', 'b']
    >>> h = pl.DataFrame({"docno": ["a", "b"], "tags": [[], []], "hash": ["x", "x"]})
    >>> finish(f, PipelineConfig(limit=5), doc_tags=h)["docno"].to_list()
    ['a']
    """
    if 0 < final.height <= SMALL_ROWS:
        small = _finish_small(final, config, doc_tags)
        if small is not None:
            return small
    out = sort_within_qid(final, ["final_rank"]).unique(["qid", "docno"], keep="first", maintain_order=True)
    if config.dedupe_content:
        dups = content_duplicates(out, doc_tags)
        if dups.height:
            out = out.join(dups.select("qid", "docno"), on=["qid", "docno"], how="anti", maintain_order="left")
    out = min_score_filter(out, config)
    out = out.with_columns(final_rank=(pl.int_range(pl.len()).over("qid") + 1).cast(pl.Int64))
    out = tag_lift(out, doc_tags, config.tags, config.tag_lift)
    out = out.filter(pl.col("final_rank") <= config.limit)
    cols = [c for c in SCHEMAS["final"] if c in out.columns]
    return out.select(cols)


def _finish_small(final: pl.DataFrame, config: PipelineConfig, doc_tags: pl.DataFrame | None) -> pl.DataFrame | None:
    """:func:`finish` in plain Python for a few rows (one query of ``Lab.query``): the same steps,
    rows and order; the tag lift, when asked for, still runs :func:`tag_lift`. ``None`` (use
    polars) when a rank or score is null or ``doc_tags`` lists a document twice."""
    cols = [c for c in SCHEMAS["final"] if c in final.columns]
    got = _finish_rows(cols, [final.get_column(c).to_list() for c in cols], config, doc_tags)
    if got is None:
        return None
    schema = {c: (pl.Int64 if c == "final_rank" else final.schema[c]) for c in cols}
    out_df = pl.DataFrame(dict(zip(cols, got)), schema=schema)
    if config.tags and config.tag_lift > 0 and doc_tags is not None:
        out_df = tag_lift(out_df, doc_tags, config.tags, config.tag_lift)
    if out_df.height > config.limit:
        out_df = out_df.filter(pl.col("final_rank") <= config.limit)
    return out_df  # columns already in SCHEMAS["final"] order (tag_lift keeps them)


def finish_columns(final: Columns, config: PipelineConfig, doc_tags: pl.DataFrame | None = None) -> Columns | None:
    """:func:`finish` of ``final`` given as plain columns (one query of ``Lab.query``): the same
    rows, as :class:`~qmdlab.pipeline.trace.Columns`. ``None`` where :func:`finish` must run (a
    tag lift, more than :data:`SMALL_ROWS` rows, a null rank or score, a docno twice in ``doc_tags``)."""
    n = height(final)
    if n == 0:
        return final
    if n > SMALL_ROWS or (config.tags and config.tag_lift > 0 and doc_tags is not None):
        return None
    cols = list(SCHEMAS["final"])
    got = _finish_rows(cols, [final[c] for c in cols], config, doc_tags)
    if got is None:
        return None
    out = Columns(zip(cols, got))
    ranks = out["final_rank"]
    if any(r > config.limit for r in ranks):
        keep = [i for i, r in enumerate(ranks) if r <= config.limit]
        out = Columns({c: [v[i] for i in keep] for c, v in out.items()})
    return out


def _finish_rows(
    cols: list[str], data: list[list], config: PipelineConfig, doc_tags: pl.DataFrame | None
) -> list[list] | None:
    """Dedupe, content dedupe, min score (with the fallback probe) and ``final_rank`` renumbered,
    on the columns ``data`` (named ``cols``); the rows before the tag lift and the limit."""
    iq, idoc, iscore, irank = (cols.index(c) for c in ("qid", "docno", "final_score", "final_rank"))
    rows = list(zip(*data))
    if any(r[irank] is None or r[iscore] is None for r in rows):
        return None
    order: dict[str, int] = {}
    for r in rows:
        order.setdefault(r[iq], len(order))
    rows.sort(key=lambda r: (order[r[iq]], r[irank]))
    seen: set[tuple[str, str]] = set()
    unique = []
    for r in rows:
        if (r[iq], r[idoc]) not in seen:
            seen.add((r[iq], r[idoc]))
            unique.append(r)
    rows = unique
    if config.dedupe_content and doc_tags is not None and "hash" in doc_tags.columns:
        hashes = doc_hashes(doc_tags)
        if hashes is None:
            return None
        first: dict[tuple[str, str], str] = {}
        kept_rows = []
        for r in rows:
            h = hashes.get(r[idoc])
            if h is not None and first.setdefault((r[iq], h), r[idoc]) != r[idoc]:
                continue
            kept_rows.append(r)
        rows = kept_rows
    # min score, with the fallback probe for a query left with nothing
    passed = [r for r in rows if r[iscore] >= config.min_score]
    if config.min_score_fallback > 0 and config.fallback_max > 0:
        have = {r[iq] for r in passed}
        floor = config.min_score - config.min_score_fallback
        taken: dict[str, int] = {}
        out = []
        for r in rows:
            q = r[iq]
            if q in have:
                if r[iscore] >= config.min_score:
                    out.append(r)
            elif r[iscore] >= floor and taken.get(q, 0) < int(config.fallback_max):
                taken[q] = taken.get(q, 0) + 1
                out.append(r)
        passed = out
    ranks = ranks_within_qid(r[iq] for r in passed)
    columns = [list(v) for v in zip(*passed)] if passed else [[] for _ in cols]
    columns[irank] = ranks
    return columns


def run_finish(
    blended: Columns | pl.DataFrame, config: PipelineConfig, doc_tags: pl.DataFrame | None = None
) -> Columns | pl.DataFrame:
    """Finish as a query runs it: :func:`finish_columns` on plain columns where it applies, else
    :func:`finish` on a polars frame."""
    final: Columns | pl.DataFrame | None = (
        finish_columns(blended, config, doc_tags=doc_tags) if isinstance(blended, Columns) else None
    )
    if final is None:
        final = finish(as_frame("final", blended), config, doc_tags=doc_tags)
    return final


__all__ = [
    "run_finish",
    "finish",
    "finish_columns",
    "min_score_filter",
    "tag_lift",
    "content_duplicates",
    "content_duplicate_rows",
]

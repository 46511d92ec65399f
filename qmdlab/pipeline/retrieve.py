"""Routing and retrieval: sub-queries → the ``lists`` table (docs/design.md, pipeline step 3).

The original query goes to BM25 and to vector search (and to each extra keyword channel whose
weight is above 0: ``phrase``, ``like``, ``trigram``, ``heading``, :mod:`qmdlab.search.channels`); ``lex`` lines to BM25;
``vec`` and ``hyde`` lines to vector search (``hyde`` optionally embedded with the
document template). Each list keeps ``list_limit`` hits and records its source,
query type, sub-query, 1-based rank, backend score, normalised score and the
list's fusion weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.trace import SCHEMAS, Columns, empty

KEYWORD_CHANNELS = ("phrase", "like", "trigram", "heading")
"""Sources of the extra keyword lists of the original query (:mod:`qmdlab.search.channels`)."""


class Route(NamedTuple):
    """One retrieval list to run."""

    source: str  # "fts" | "vec"
    query_type: str  # "original" | "lex" | "vec" | "hyde"
    subquery: str


def route(text: str, lines: Sequence[tuple[str, str]], config: PipelineConfig) -> list[Route]:
    """The lists to run for a query and its kept expansion lines (duplicates once).

    >>> [tuple(r) for r in route("git undo", [("lex", "git revert"), ("hyde", "To undo…")], PipelineConfig())]
    [('fts', 'original', 'git undo'), ('vec', 'original', 'git undo'), ('fts', 'lex', 'git revert'), ('vec', 'hyde', 'To undo…')]
    >>> [r.source for r in route("q", [("vec", "v")], PipelineConfig(vector=False))]
    ['fts']
    >>> [r.source for r in route("q", [], PipelineConfig(weight_original_like=1.0, weight_original_phrase=0.5))]
    ['fts', 'vec', 'phrase', 'like']
    """
    routes: list[Route] = []
    if text.strip():
        routes.append(Route("fts", "original", text))
        if config.vector:
            routes.append(Route("vec", "original", text))
        for channel in KEYWORD_CHANNELS:  # extra keyword channels, only when weighted (off by default)
            if config.list_weight(channel, "original") > 0:
                routes.append(Route(channel, "original", text))
    for kind, sub in lines:
        if kind == "lex":
            routes.append(Route("fts", "lex", sub))
        elif kind in ("vec", "hyde") and config.vector and (kind == "vec" or config.hyde):
            routes.append(Route("vec", kind, sub))
    seen: set[tuple[str, str, str]] = set()
    unique = []
    for r in routes:
        key = (r.source, r.query_type if r.query_type == "original" else "x", " ".join(r.subquery.lower().split()))
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return unique


def hits_frame(qid: str, list_id: int, r: Route, hits: Sequence[Any], weight: float) -> pl.DataFrame:
    """One list's hits (``qmdlab.search.Hit``-like) as ``lists`` rows."""
    if not hits:
        return empty("lists")
    cols: dict[str, list] = {c: [] for c in SCHEMAS["lists"]}
    _append_hits(cols, qid, list_id, r, hits, weight)
    return pl.DataFrame(cols, schema=SCHEMAS["lists"])


def _append_hits(cols: dict[str, list], qid: str, list_id: int, r: Route, hits: Sequence[Any], weight: float) -> None:
    """Add one list's hits to the column lists of a ``lists`` frame (:func:`hits_frame`'s rows)."""
    n = len(hits)
    if not n:
        return
    cols["qid"] += [qid] * n
    cols["list_id"] += [list_id] * n
    cols["source"] += [r.source] * n
    cols["query_type"] += [r.query_type] * n
    cols["subquery"] += [r.subquery] * n
    cols["docno"] += [h.docno for h in hits]
    cols["chunk_id"] += [None if h.chunk_id is None else int(h.chunk_id) for h in hits]
    cols["rank"] += [int(h.rank) for h in hits]
    cols["backend_score"] += [float(h.backend_score) for h in hits]
    cols["score"] += [float(h.score) for h in hits]
    cols["weight"] += [float(weight)] * n


def list_kept(config: PipelineConfig, source: str, query_type: str) -> bool:
    """Whether ``config``'s switches keep a recorded list of this type (``vector``, ``hyde``,
    ``expand``: lists are dropped, never added).

    >>> list_kept(PipelineConfig(hyde=False), "vec", "hyde"), list_kept(PipelineConfig(), "fts", "lex")
    (False, True)
    """
    if not config.vector and source == "vec":
        return False
    if not config.hyde and query_type == "hyde":
        return False
    return config.expand or query_type == "original"


def list_weight(config: PipelineConfig, source: str, query_type: str) -> float:
    """:meth:`PipelineConfig.list_weight`, 0 for a list type with no weight option."""
    try:
        return config.list_weight(source, query_type)
    except ConfigError:
        return 0.0


def _kinds(lists: pl.DataFrame) -> list[tuple[str, str]]:
    return lists.select("source", "query_type").unique().sort(["source", "query_type"]).rows()


def reweight(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """Set ``weight`` from each row's (source, query_type) under ``config`` (:func:`list_weight`).

    >>> df = pl.DataFrame({"source": ["fts", "vec"], "query_type": ["original", "lex"], "weight": [0.0, 0.0]})
    >>> reweight(df, PipelineConfig(weight_lex=0.5))["weight"].to_list()
    [2.0, 0.5]
    """
    w: Any = None
    for source, query_type in _kinds(lists):
        cond = (pl.col("source") == source) & (pl.col("query_type") == query_type)
        w = (pl.when(cond) if w is None else w.when(cond)).then(pl.lit(list_weight(config, source, query_type)))
    w = pl.lit(0.0) if w is None else w.otherwise(pl.lit(0.0))
    return lists.with_columns(weight=w.cast(pl.Float64))


def ablate(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """Drop what ``config`` switches off from recorded lists (:func:`list_kept`: vector lists,
    HyDE lists, expansion lists) and ranks beyond ``list_limit``.

    >>> df = pl.DataFrame({"source": ["fts", "vec", "fts"], "query_type": ["original", "hyde", "lex"],
    ...                    "rank": [1, 1, 21]})
    >>> ablate(df, PipelineConfig(hyde=False)).height
    1
    """
    keep = pl.col("rank") <= config.list_limit
    for source, query_type in _kinds(lists):
        if not list_kept(config, source, query_type):
            keep &= (pl.col("source") != source) | (pl.col("query_type") != query_type)
    return lists.filter(keep)


def embed_route(embedder: Any, r: Route, config: PipelineConfig) -> tuple[Any, str | None]:
    """The query vector of one vector route, within ``config.stage_budget_s``; fail-open.

    Returns ``(vector, None)``, or ``(None, why)`` when the embedder raised, hung past the
    budget (the call is stopped, see :mod:`qmdlab.pipeline.budget`), is still finishing a
    stopped call, or answered with something that is not a finite ``(dim,)`` vector.

    >>> class Boom:
    ...     model_id, fingerprint, dim = "boom", "boom", 2
    ...     def embed_query(self, text): raise RuntimeError("ggml abort")
    >>> embed_route(Boom(), Route("vec", "original", "q"), PipelineConfig())[1]
    'query embedding failed (RuntimeError: ggml abort)'
    """
    import numpy as np

    from qmdlab.pipeline.budget import StageBusy, StageTimeout, call_with_budget

    budget = config.stage_budget_s
    try:
        if r.query_type == "hyde" and config.hyde_as_document:
            vec = call_with_budget(embedder.embed_documents, [("", r.subquery)], budget_s=budget, model=embedder)[0]
        else:
            vec = call_with_budget(
                embedder.embed_query,
                r.subquery,
                budget_s=budget,
                model=embedder,
                peek=getattr(embedder, "peek_query", None),
            )
        vec = np.asarray(vec, dtype=np.float32)
        dim = getattr(embedder, "dim", None)
        if vec.ndim != 1 or (isinstance(dim, int) and vec.shape[0] != dim) or not np.isfinite(vec).all():
            raise ValueError(f"embedder returned a vector of shape {vec.shape} (want ({dim},), finite)")
    except StageTimeout:
        return (
            None,
            f"query embedding over its {budget:g} s budget (stage_budget_s; the call was stopped): keyword lists only",
        )
    except StageBusy as err:
        return None, f"query embedding skipped ({err})"
    except Exception as err:  # any model failure after a successful load: keyword results only
        return None, f"query embedding failed ({type(err).__name__}: {err})"
    return vec, None


class RetrievedColumns(NamedTuple):
    """The ``lists`` rows of one query as :class:`~qmdlab.pipeline.trace.Columns`, plus notes ``(stage, message)``."""

    lists: Columns
    notes: list[tuple[str, str]]


def retrieve_columns(
    index: Any,
    embedder: Any,
    routes: Sequence[Route],
    config: PipelineConfig,
    *,
    qid: str,
    collections: Sequence[str] | None = None,
    filters: Any = None,
    fts_hits: dict[str, list] | None = None,
) -> RetrievedColumns:
    """Run every route against the index; the ``lists`` rows as plain columns.

    Parameters
    ----------
    index : qmdlab.store.Index
    embedder : Embedder or None
        ``None`` (or no stored vectors for it) skips the vector lists, with a note.
    routes : sequence of Route
    config : PipelineConfig
    qid : str
    collections, filters
        Passed to the searches.
    fts_hits : dict, optional
        Already-run BM25 hits by sub-query (the probe), reused instead of searching again.
    """
    from qmdlab.search import bm25_search, vector_search

    notes: list[tuple[str, str]] = []
    cols = Columns.empty("lists")  # every list's rows; the trace builds one frame if it is read
    vec_ran = False
    vec_ok = embedder is not None
    if not vec_ok and any(r.source == "vec" for r in routes):
        notes.append(("retrieve", "no embedder: vector lists skipped"))
    if vec_ok and any(r.source == "vec" for r in routes):
        try:
            vm = index.vector_matrix(embedder.fingerprint)
            n = vm.matrix.shape[0]
            dim = getattr(embedder, "dim", None)
            if n and isinstance(dim, int) and vm.matrix.shape[1] != dim:  # stale vectors of another dimension
                raise ValueError(
                    f"the index holds {vm.matrix.shape[1]}-d vectors under {embedder.fingerprint!r} "
                    f"but the embedder gives {dim}-d ones; re-embed with `qmdlab embed -f`"
                )
        except Exception as err:  # DimensionMismatchError, CapacityError and friends: degrade, say so
            n = 0
            notes.append(("retrieve", f"vectors unusable ({err}): vector lists skipped"))
        else:
            if n == 0:
                notes.append(
                    (
                        "retrieve",
                        f"no vectors for embedder {embedder.model_id} in the index "
                        "(run `qmdlab embed`): vector lists skipped",
                    )
                )
        vec_ok = n > 0
    for list_id, r in enumerate(routes):
        weight = config.list_weight(r.source, r.query_type)
        if r.source in KEYWORD_CHANNELS:
            from qmdlab.search.channels import channel_search

            hits = channel_search(
                index,
                r.source,
                r.subquery,
                limit=config.list_limit,
                collections=collections,
                filters=filters,
                weights=config.lexical()["weights"],
            )
        elif r.source == "fts":
            if fts_hits is not None and r.subquery in fts_hits:
                hits = fts_hits[r.subquery][: config.list_limit]
            else:
                hits = bm25_search(
                    index,
                    r.subquery,
                    limit=config.list_limit,
                    collections=collections,
                    filters=filters,
                    **config.lexical(),
                )
        else:
            if not vec_ok:
                continue
            vec, failure = embed_route(embedder, r, config)
            if failure is not None:  # degrade to keyword lists, say so, and stop calling the embedder
                ran = vec_ran
                notes.append(
                    (
                        "retrieve",
                        failure
                        + (
                            ": the remaining vector lists skipped"
                            if ran
                            else ": vector lists skipped, keyword results only"
                        ),
                    )
                )
                vec_ok = False
                continue
            hits = vector_search(
                index,
                vec,
                fingerprint=embedder.fingerprint,
                limit=config.list_limit,
                collections=collections,
                filters=filters,
                ann=config.ann(),
            )
        _append_hits(cols, qid, list_id, r, hits, weight)
        vec_ran = vec_ran or (r.source == "vec" and bool(hits))
    adapter_note = getattr(embedder, "query_note", None) if vec_ran else None
    if isinstance(adapter_note, str) and adapter_note:  # a query adapter (qmdlab.models.adapter) says so
        notes.append(("retrieve", adapter_note))
    return RetrievedColumns(cols, notes)


__all__ = [
    "Route",
    "route",
    "reweight",
    "ablate",
    "list_kept",
    "list_weight",
    "hits_frame",
    "retrieve_columns",
    "RetrievedColumns",
    "embed_route",
]

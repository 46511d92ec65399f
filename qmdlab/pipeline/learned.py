"""``fusion=learned``: a LightGBM lambdarank model scores every fused document from trace features.

The features of a (query, document) pair come from the recorded ``lists`` table plus a small
per-document table (:func:`doc_features`: title terms, heading terms, length) — no model call,
no BM25 or vector search — so re-fusing recorded traces stays as cheap as the formula methods:

=====================  ==================================================================
``rank_<list type>``   best 1-based rank in lists of that type (``original_fts``,
                       ``original_vec``, ``lex``, ``vec``, ``hyde``); missing if absent
``score_<list type>``  best backend score there (BM25 as ``-bm25()``, so higher is better;
                       cosine for vector lists); missing if absent
``n_lists``            number of lists the document is in
``rrf``                plain RRF ``Σ 1/(60 + rank)``
``bm25``, ``cosine``   the document's best BM25 (``-bm25()``) / best cosine over all lists
``bm25_rel``           ``bm25`` / the query's best ``bm25`` (likewise ``cosine_rel``)
``title_overlap``      share of the query's terms found in the title
``heading_overlap``    share of the query's terms found in the document's headings
``doc_len``            ``log1p`` of the document's size in bytes
``query_len``          number of distinct query terms
=====================  ==================================================================

Terms: lower-cased word pieces (:data:`qmdlab.terms.ALNUM_PATTERN`), stopwords dropped, cut to
their first 6 characters (a crude stemmer, so *retrieval*/*retrieve* meet). The query is the original query of the trace
(its ``original`` lists' sub-query; else the first list's).

The score is ``prior_scale · rrf`` plus the trees' output (``PipelineConfig.learned_prior``,
saved beside the model by ``qmdlab tune --learn``): the model learns corrections to plain RRF,
so a model with nothing to learn ranks like RRF.

The model file is LightGBM's text format, written by ``qmdlab tune --learn`` (:mod:`qmdlab.eval.learn`)
and named by ``PipelineConfig.learned_model``; it is loaded once per file version. Its feature
names must be :data:`FEATURES` (a model of another feature set is refused with the fix).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import numpy as np
import polars as pl

from qmdlab.errors import ConfigError
from qmdlab.pipeline.config import LIST_KEYS, PipelineConfig
from qmdlab.pipeline.ranking import rank_fused
from qmdlab.terms import ALNUM_PATTERN

RANK_FEATURES = tuple(f"rank_{k}" for k in LIST_KEYS)
SCORE_FEATURES = tuple(f"score_{k}" for k in LIST_KEYS)
FEATURES = (
    RANK_FEATURES
    + SCORE_FEATURES
    + (
        "n_lists",
        "rrf",
        "bm25",
        "cosine",
        "bm25_rel",
        "cosine_rel",
        "title_overlap",
        "heading_overlap",
        "doc_len",
        "query_len",
    )
)
TERM_CHARS = 6
PRIOR_SCALE = 60.0
"""Default prior scale: ``learned_score = scale · rrf + trees(features)``. At 60 a document ranked
first by two lists starts at ≈ 1.97, so the trees learn corrections to plain RRF instead of a
ranking from scratch (LightGBM ``init_score`` when training)."""

_STOP: list[str] | None = None


def _stopwords() -> list[str]:
    global _STOP
    if _STOP is None:
        from qmdlab.terms import QUESTION_STOPWORDS  # the project's one list of non-content words

        _STOP = sorted(QUESTION_STOPWORDS)
    return _STOP


def terms_expr(text: pl.Expr) -> pl.Expr:
    """Distinct normalised terms of a text column (see the module notes).

    >>> pl.DataFrame({"t": ["The Retrieval of retrieved texts"]}).select(terms_expr(pl.col("t")).list.sort())["t"][0].to_list()
    ['retrie', 'texts']
    """
    words = text.fill_null("").str.to_lowercase().str.extract_all(ALNUM_PATTERN)
    return words.list.eval(
        pl.element().filter(~pl.element().is_in(_stopwords())).str.slice(0, TERM_CHARS)
    ).list.unique()


def doc_features(index: Any, docnos: Iterable[str] | None = None) -> pl.DataFrame:
    """``docno, title_terms, heading_terms, doc_len`` of the index's active documents (or of
    ``docnos`` only) — the per-document input of :func:`features`."""
    docs = index.documents()
    want = None if docnos is None else list(dict.fromkeys(docnos))
    if want is not None:
        docs = docs.filter(pl.col("docno").is_in(want))
    chunks = index.chunks(docs["docno"].to_list() if want is not None else None)
    heads = chunks.group_by("docno").agg(pl.col("heading_path").fill_null("").str.join(" ").alias("_h"))
    out = docs.select("docno", "title", "size").join(heads, on="docno", how="left")
    return out.select(
        "docno",
        terms_expr(pl.col("title")).alias("title_terms"),
        terms_expr(pl.col("_h")).alias("heading_terms"),
        pl.col("size").cast(pl.Float64).log1p().alias("doc_len"),
    )


def _query_terms(lists: pl.DataFrame) -> pl.DataFrame:
    """``qid, query_terms`` from the original sub-query of each qid (else its first list's)."""
    q = (
        lists.select("qid", "list_id", "query_type", "subquery")
        .unique(["qid", "list_id"])
        .sort(["qid", pl.col("query_type") != "original", "list_id"])
        .unique("qid", keep="first")
    )
    return q.select("qid", terms_expr(pl.col("subquery")).alias("query_terms"))


def features(lists: pl.DataFrame, docs: pl.DataFrame | None) -> pl.DataFrame:
    """``qid, docno`` and :data:`FEATURES` for every document of ``lists`` (first-seen order of qids).

    Parameters
    ----------
    lists : polars.DataFrame
        A ``lists`` table (after reweight/ablate).
    docs : polars.DataFrame
        :func:`doc_features` of (at least) the documents in ``lists``.
    """
    if docs is None:
        raise ConfigError(
            "fusion 'learned' needs the document table (title, headings, length): "
            "pass docs=qmdlab.pipeline.learned.doc_features(index)"
        )
    key = (
        pl.when(pl.col("query_type") == "original")
        .then(pl.lit("original_") + pl.col("source"))
        .otherwise(pl.col("query_type"))
    )
    pos = pl.when(pl.col("source") == "fts").then(-pl.col("backend_score")).otherwise(pl.col("backend_score"))
    rows = lists.with_columns(_key=key, _pos=pos)
    aggs = []
    for k in LIST_KEYS:
        sel = pl.col("_key") == k
        aggs.append(pl.col("rank").filter(sel).min().cast(pl.Float64).alias(f"rank_{k}"))
        aggs.append(pl.col("_pos").filter(sel).max().alias(f"score_{k}"))
    aggs += [
        pl.col("list_id").n_unique().cast(pl.Float64).alias("n_lists"),
        (1.0 / (60.0 + pl.col("rank").cast(pl.Float64))).sum().alias("rrf"),
        pl.col("_pos").filter(pl.col("source") == "fts").max().alias("bm25"),
        pl.col("_pos").filter(pl.col("source") == "vec").max().alias("cosine"),
    ]
    g = rows.with_row_index("_row").group_by(["qid", "docno"]).agg(*aggs, pl.col("_row").min().alias("_first"))
    g = g.with_columns(
        (pl.col("bm25") / pl.col("bm25").max().over("qid")).alias("bm25_rel"),
        (pl.col("cosine") / pl.col("cosine").max().over("qid")).alias("cosine_rel"),
    )
    q = _query_terms(lists)
    g = g.join(q, on="qid", how="left").join(docs, on="docno", how="left")
    n_q = pl.col("query_terms").list.len().cast(pl.Float64)
    overlap = lambda col: (
        pl.when(n_q > 0)
        .then(  # noqa: E731
            pl.col("query_terms").list.set_intersection(pl.col(col)).list.len().cast(pl.Float64) / n_q
        )
        .otherwise(0.0)
    )
    g = g.with_columns(title_overlap=overlap("title_terms"), heading_overlap=overlap("heading_terms"), query_len=n_q)
    g = g.with_columns(_qo=pl.col("_first").min().over("qid")).sort(["_qo", "_first"])
    return g.select("qid", "docno", *[pl.col(f).cast(pl.Float64) for f in FEATURES])


def matrix(feats: pl.DataFrame) -> np.ndarray:
    """The :data:`FEATURES` columns as a float64 matrix (nulls → NaN, LightGBM's missing value)."""
    return feats.select(FEATURES).to_numpy().astype(np.float64)


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, size: int):
    try:
        import lightgbm as lgb
    except ImportError:
        raise ConfigError("fusion 'learned' needs LightGBM: pip install 'qmdlab[learn]'") from None
    try:
        booster = lgb.Booster(model_file=path)
    except Exception as err:  # lightgbm.basic.LightGBMError: a damaged or foreign file
        raise ConfigError(f"{path}: not a LightGBM model file ({err}); re-run `qmdlab tune SUITE --learn`") from None
    names = tuple(booster.feature_name())
    if names != FEATURES:
        raise ConfigError(
            f"{path}: model features {list(names)} are not qmdlab's learned-fusion features "
            f"{list(FEATURES)}; re-train it with `qmdlab tune SUITE --learn`"
        )
    return booster


def load_model(path: str | os.PathLike):
    """The LightGBM booster of ``path`` (cached per file version)."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise ConfigError(
            f"learned_model {p!r}: file not found (write it with `qmdlab tune SUITE --learn --out DIR`, "
            "or fix the path in the config)"
        ) from None
    return _load(p, st.st_mtime_ns, st.st_size)


def prior(feats: pl.DataFrame, scale: float = PRIOR_SCALE) -> np.ndarray:
    """The score the trees start from: ``scale · rrf``."""
    return float(scale) * feats["rrf"].fill_null(0.0).to_numpy().astype(np.float64)


def score_features(feats: pl.DataFrame, booster: Any, scale: float = PRIOR_SCALE) -> pl.DataFrame:
    """``feats`` plus ``learned_score`` (prior + the booster's prediction)."""
    if feats.height == 0:
        return feats.with_columns(learned_score=pl.lit(0.0))
    return feats.with_columns(
        learned_score=pl.Series(prior(feats, scale) + booster.predict(matrix(feats)), dtype=pl.Float64)
    )


def fuse_scored(lists: pl.DataFrame, scored: pl.DataFrame) -> pl.DataFrame:
    """The ``fused`` table from ``learned_score`` (``rrf_base = fused_score = learned_score``, no bonus)."""
    from qmdlab.pipeline.trace import empty

    if lists.height == 0:
        return empty("fused")
    g = (
        lists.with_row_index("_row")
        .group_by(["qid", "docno"])
        .agg(best_rank=pl.col("rank").min().cast(pl.Int64), _first=pl.col("_row").min())
    )
    g = g.join(scored.select("qid", "docno", "learned_score", "n_lists"), on=["qid", "docno"], how="left")
    g = g.with_columns(
        rrf_base=pl.col("learned_score"),
        bonus=pl.lit(0.0),
        fused_score=pl.col("learned_score"),
        n_lists=pl.col("n_lists").cast(pl.Int64),
        _qo=pl.col("_first").min().over("qid"),
    )
    return rank_fused(g)


def learned(
    lists: pl.DataFrame, config: PipelineConfig, docs: pl.DataFrame | None, booster: Any = None
) -> pl.DataFrame:
    """Fuse with the model of ``config.learned_model`` (or ``booster``)."""
    booster = booster if booster is not None else load_model(config.learned_model)
    return fuse_scored(lists, score_features(features(lists, docs), booster, config.learned_prior))


def contributions(
    lists: pl.DataFrame, config: PipelineConfig, docs: pl.DataFrame | None, booster: Any = None
) -> pl.DataFrame:
    """Per (qid, docno, feature): the feature's ``value`` and its ``contribution`` to the score
    (LightGBM ``pred_contrib``, SHAP values; the row ``feature = "(bias)"`` is the trees' expected
    output, ``"(rrf prior)"`` the prior :func:`prior`). A document's contributions sum to its
    ``learned_score``."""
    booster = booster if booster is not None else load_model(config.learned_model)
    feats = features(lists, docs)
    x = matrix(feats)
    contrib = booster.predict(x, pred_contrib=True) if len(x) else np.zeros((0, len(FEATURES) + 1))
    names = list(FEATURES) + ["(bias)"]
    base = prior(feats, config.learned_prior) if len(x) else np.zeros(0)
    rows = []
    qids, docnos = feats["qid"].to_list(), feats["docno"].to_list()
    for i in range(len(x)):
        for j, name in enumerate(names):
            value = float(x[i, j]) if j < len(FEATURES) else math.nan
            rows.append((qids[i], docnos[i], name, value, float(contrib[i, j])))
        rows.append((qids[i], docnos[i], "(rrf prior)", float(x[i, FEATURES.index("rrf")]), float(base[i])))
    return pl.DataFrame(
        rows,
        schema={"qid": pl.Utf8, "docno": pl.Utf8, "feature": pl.Utf8, "value": pl.Float64, "contribution": pl.Float64},
        orient="row",
    )


__all__ = [
    "FEATURES",
    "PRIOR_SCALE",
    "prior",
    "features",
    "doc_features",
    "matrix",
    "load_model",
    "score_features",
    "fuse_scored",
    "learned",
    "contributions",
    "terms_expr",
]

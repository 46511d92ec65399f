"""Fit a query-side embedding adapter against an index's stored document vectors.

``qmdlab train adapter --suite scifact --out DIR`` (labelled), ``qmdlab --index NAME train adapter
--synthetic --out DIR`` (label-free), or ``python -m qmdlab.training.adapter [--field value ...]``
(every field of :class:`AdapterRunConfig` is a flag or a YAML key). The result is a
:class:`~qmdlab.models.adapter.QueryAdapter` in ``DIR/adapter.npz`` + ``DIR/adapter.json``, used as
``--embed-model BASE+adapter:DIR``. Nothing is embedded again: the adapter maps query vectors only,
and the document vectors it was fitted against are the ones the index already holds.

Recipe:

1. **Vectors** — the base embedder's stored chunk vectors of the index (a suite's own index is
   built and embedded first; the running command's index must be embedded already), one row per
   chunk, grouped by document as vector search groups them (a document's score is its best
   chunk's).
2. **Pairs** — each a query and one relevant chunk:

   - *labelled* (``--suite S``): the suite's judged queries, each relevant document represented by
     its chunk nearest the query's base vector. The suite's official train/test split when it has
     one (SciFact); otherwise ``folds`` folds over the judged queries, each fitted on the others and
     scored on itself, and the saved adapter fitted on every judged query.
   - *synthetic* (``--synthetic``): the queries document expansion generated for the index's chunks
     and its round-trip filter kept (``qmdlab expand-docs``; :func:`qmdlab.store.doc_expansions.kept_queries`),
     each with the chunk it was generated from. No judgment is read; in a suite, the judged queries
     (or the held-out side of ``--split``) are the held-out queries.

3. **Leak check** — every pair set passes :func:`~qmdlab.training.leakage.check_no_heldout`
   (by id and by text) inside :func:`fit_pairs`, before anything is fitted: a held-out or test
   query cannot reach fitting.
4. **Fitting** — the map starts at the identity; loss is InfoNCE at ``temperature`` over the
   positive, the other pairs' positives in the batch (those relevant to the query masked out) and
   ``hard_negatives`` chunks mined from the base ranking (the top ``negative_depth`` chunks of
   documents not relevant to the query); Adam with decoupled weight decay *toward the identity*;
   torch on the CPU. A held-back slice of the training queries (``heldback``, whole queries — or
   whole source chunks for generated ones) picks the epoch: the best held-back nDCG@10, the
   identity included (an adapter that never beats it stays the identity), stopping after
   ``patience`` epochs without a gain.
5. **Report** — the held-back slice's nDCG@10 and MRR@10 before and after, and on held-out
   queries (the test side, the folds, or a suite's judged queries) the same figures with paired
   p-values, all vector-only (the document ranking vector search gives: best chunk per document).

A finished run returns its stored result (``DONE``); fitting takes seconds, so an interrupted run
starts again.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from qmdlab.errors import ConfigError, QmdlabError
from qmdlab.training import hardware, rundir
from qmdlab.training.leakage import check_no_heldout

METRICS = ("ndcg@10", "mrr@10")


@dataclass
class AdapterRunConfig:
    """Configuration of one query-adapter run (YAML keys / CLI flags = field names)."""

    out: str = field(default="runs/adapter", metadata={"help": "Run directory (adapter.npz, adapter.json)."})
    suite: str | None = field(
        default=None,
        metadata={"help": "Suite name (scifact, default, cisi …) or directory; none: the running command's index."},
    )
    format: str | None = field(default=None, metadata={"help": "Suite format when --suite is a directory."})
    index: str | None = field(default=None, metadata={"help": "Index without --suite (default: the current one)."})
    synthetic: bool = field(
        default=False,
        metadata={"help": "Fit on the generated queries the index stores for its chunks (qmdlab expand-docs)."},
    )
    generator: str | None = field(
        default=None, metadata={"help": "Generator fingerprint whose kept queries to use (default: the active one)."}
    )
    split: str | None = field(
        default=None,
        metadata={
            "help": "With --synthetic in a suite: a splits.json (or the doc2query run holding it) whose held-out "
            "side is kept out and reported; default every judged query."
        },
    )
    preset: str | None = field(default=None, metadata={"help": "Model preset whose embedder is the base."})
    embed_model: str | None = field(default=None, metadata={"help": "The base embedder's reference."})
    folds: int = field(default=5, metadata={"help": "Folds over the judged queries of a suite without a split."})
    rank: int = field(default=0, metadata={"help": "0: a full d x d map; r > 0: I + U V^T of rank r."})
    temperature: float = 0.05
    hard_negatives: int = field(default=7, metadata={"help": "Mined negative chunks per pair."})
    negative_depth: int = field(default=30, metadata={"help": "Base-ranked chunks the negatives are drawn from."})
    epochs: int = 40
    batch_size: int = 64
    learning_rate: float = 1e-3
    weight_decay: float = field(default=0.1, metadata={"help": "Decoupled decay toward the identity."})
    heldback: float = field(default=0.1, metadata={"help": "Share of the training queries held back."})
    patience: int = field(default=5, metadata={"help": "Epochs without a held-back gain before stopping."})
    max_pairs: int = 20000
    seed: int = 0
    n_threads: int | None = hardware.threads_field(default=1)
    progress: bool = True


# -- the stored vectors ---------------------------------------------------------------------------
class Corpus(NamedTuple):
    """The chunk matrix, one row per (chunk, document), rows of a document contiguous.

    ``doc_of[i]`` is row ``i``'s document (an index into ``docnos``); ``starts`` the first row of
    each document; ``row_of`` maps ``(docno, chunk_id)`` to the row."""

    matrix: np.ndarray
    docnos: list[str]
    doc_of: np.ndarray
    starts: np.ndarray
    row_of: dict[tuple[str, int], int]

    @classmethod
    def from_rows(cls, docnos: Sequence[str], chunk_ids: Sequence[int], matrix: np.ndarray) -> Corpus:
        """From a :class:`~qmdlab.store.vectors.VectorMatrix`'s columns (rows sorted by document).

        >>> c = Corpus.from_rows(["a", "a", "b"], [1, 2, 3], np.eye(3, dtype=np.float32))
        >>> c.docnos, c.doc_of.tolist(), c.starts.tolist(), c.row_of[("b", 3)]
        (['a', 'b'], [0, 0, 1], [0, 2], 2)
        """
        names = list(docnos)
        if not names:
            raise QmdlabError("the index holds no vectors of this embedder: nothing to fit against")
        change = np.flatnonzero([i == 0 or names[i] != names[i - 1] for i in range(len(names))])
        uniq = [names[i] for i in change]
        if len(set(uniq)) != len(uniq):
            raise ValueError("vector rows are not grouped by document")
        doc_of = np.repeat(np.arange(len(uniq)), np.diff(np.append(change, len(names))))
        row_of = {(d, int(c)): i for i, (d, c) in enumerate(zip(names, chunk_ids))}
        return cls(np.ascontiguousarray(matrix, dtype=np.float32), uniq, doc_of, change, row_of)

    def doc_scores(self, queries: np.ndarray) -> np.ndarray:
        """``(n, documents)``: each document's best chunk cosine with each (normalised) query row."""
        out = np.empty((len(queries), len(self.docnos)), dtype=np.float32)
        for a in range(0, len(queries), 256):
            s = np.asarray(queries[a : a + 256], dtype=np.float32) @ self.matrix.T
            out[a : a + 256] = np.maximum.reduceat(s, self.starts, axis=1)
        return out


class Query(NamedTuple):
    """A query with its relevant documents (``{docno: grade}``, grades ≥ 1)."""

    qid: str
    text: str
    relevant: dict[str, float]


def ranking(corpus: Corpus, vectors: np.ndarray, qids: Sequence[str], depth: int = 10):
    """The top ``depth`` documents per query (``qid, docno, rank``), ties to the earlier document."""
    import polars as pl

    scores = corpus.doc_scores(vectors)
    k = min(depth, scores.shape[1])
    rows: dict[str, list] = {"qid": [], "docno": [], "rank": []}
    for qid, s in zip(qids, scores):
        top = np.argpartition(-s, k - 1)[:k] if k < len(s) else np.arange(len(s))
        top = top[np.lexsort((top, -s[top]))]
        rows["qid"] += [qid] * len(top)
        rows["docno"] += [corpus.docnos[i] for i in top]
        rows["rank"] += list(range(1, len(top) + 1))
    return pl.DataFrame(rows, schema={"qid": pl.Utf8, "docno": pl.Utf8, "rank": pl.Int64})


def scorer(queries: Sequence[Query]):
    """The evaluation's scorer (:class:`qmdlab.eval.metrics.Scorer`) of ``queries``' judgments."""
    import polars as pl

    from qmdlab.eval.metrics import Scorer

    qrels = pl.DataFrame(
        [(q.qid, d, float(g)) for q in queries for d, g in q.relevant.items()],
        schema={"qid": pl.Utf8, "docno": pl.Utf8, "grade": pl.Float64},
        orient="row",
    )
    return Scorer(qrels, METRICS)


def per_query(corpus: Corpus, vectors: np.ndarray, queries: Sequence[Query], judged=None):
    """nDCG@10 and MRR@10 of each query (``qid`` + one column per metric) on the vector-only
    document ranking, by :func:`scorer` (``judged``: one made already for ``queries``)."""
    return (judged or scorer(queries)).score(ranking(corpus, vectors, [q.qid for q in queries]))


def means(table) -> dict[str, float]:
    from qmdlab.eval.metrics import mean_scores

    return {k: round(v, 4) for k, v in mean_scores(table).items()}


# -- pairs ----------------------------------------------------------------------------------------
class Pairs(NamedTuple):
    """What is fitted: one row per (query, positive chunk) pair.

    ``rows`` (``qid`` — ``None`` for a generated query —, ``text``, ``group``: what the held-back
    slice keeps together), ``vectors`` (the base query vectors, one per pair), ``positive`` (a row
    of the corpus), ``negatives`` (``(n, k)`` rows, -1 for none), ``query_of`` (the pair's query,
    an index into ``queries``) and ``queries`` (each with its relevant documents)."""

    rows: list[dict]
    vectors: np.ndarray
    positive: np.ndarray
    negatives: np.ndarray
    query_of: np.ndarray
    queries: list[Query]

    def take(self, keep: Sequence[int]) -> Pairs:
        """The pairs ``keep`` (and only their queries)."""
        idx = np.asarray(list(keep), dtype=np.int64)
        used = sorted({int(self.query_of[i]) for i in idx})
        new = {q: i for i, q in enumerate(used)}
        return Pairs(
            [self.rows[i] for i in idx],
            self.vectors[idx],
            self.positive[idx],
            self.negatives[idx],
            np.array([new[int(self.query_of[i])] for i in idx], dtype=np.int64),
            [self.queries[q] for q in used],
        )


def build_pairs(
    corpus: Corpus,
    queries: Sequence[Query],
    vectors: np.ndarray,
    positives: Sequence[Sequence[int]] | None = None,
    *,
    groups: Sequence[str] | None = None,
    synthetic: bool = False,
    hard_negatives: int = 7,
    depth: int = 30,
    seed: int = 0,
) -> Pairs:
    """One pair per (query, positive chunk), with mined hard negatives.

    ``positives[i]`` are query ``i``'s positive rows (a generated query's own chunk); without them,
    each relevant document's chunk nearest the query's base vector. The negatives are
    ``hard_negatives`` rows drawn (seeded) from the ``depth`` rows nearest the base vector whose
    document is not relevant to the query (fewer when fewer exist; -1 fills).
    """
    rng = np.random.default_rng(seed)
    index = {d: i for i, d in enumerate(corpus.docnos)}
    rows: list[dict] = []
    vecs, pos, negs, query_of = [], [], [], []
    qv = np.asarray(vectors, dtype=np.float32)
    for a in range(0, len(queries), 256):
        block = qv[a : a + 256] @ corpus.matrix.T  # base cosine of every chunk, 256 queries at a time
        for qi in range(a, min(a + 256, len(queries))):
            q, scores = queries[qi], block[qi - a]
            own = [index[d] for d in q.relevant if d in index]
            if positives is not None:
                mine = [int(r) for r in positives[qi]]
            else:
                mine = [int(corpus.starts[j] + np.argmax(scores[corpus.starts[j] : _end(corpus, j)])) for j in own]
            if not mine:
                continue
            masked = np.where(np.isin(corpus.doc_of, own), -np.inf, scores)
            depth_q = min(depth, int(np.isfinite(masked).sum()))
            pool = np.argpartition(-masked, depth_q - 1)[:depth_q] if depth_q else np.zeros(0, dtype=np.int64)
            k = min(hard_negatives, len(pool))
            row_negs = np.full(hard_negatives, -1, dtype=np.int64)
            row_negs[:k] = rng.choice(pool, size=k, replace=False) if k else []
            for r in mine:
                group = groups[qi] if groups else q.qid
                rows.append({"qid": None if synthetic else q.qid, "text": q.text, "group": group})
                vecs.append(qv[qi])
                pos.append(r)
                negs.append(row_negs)
                query_of.append(qi)
    d = corpus.matrix.shape[1]
    return Pairs(
        rows,
        np.asarray(vecs, dtype=np.float32).reshape(-1, d),
        np.asarray(pos, dtype=np.int64),
        np.asarray(negs, dtype=np.int64).reshape(-1, hard_negatives),
        np.asarray(query_of, dtype=np.int64),
        list(queries),
    )


def _end(corpus: Corpus, doc: int) -> int:
    return int(corpus.starts[doc + 1]) if doc + 1 < len(corpus.starts) else len(corpus.doc_of)


def held_back(groups: Sequence[str], fraction: float, seed: int = 0) -> set[str]:
    """The groups held back: ``round(fraction · groups)``, at least one when there are two or more
    (none with one group or ``fraction`` 0).

    >>> sorted(held_back(["a", "b", "c", "d", "a"], 0.5, seed=0))
    ['a', 'c']
    >>> held_back(["a", "a"], 0.5)
    set()
    """
    uniq = sorted(set(groups))
    if fraction <= 0 or len(uniq) < 2:
        return set()
    n = min(len(uniq) - 1, max(1, round(len(uniq) * fraction)))
    random.Random(seed).shuffle(uniq)
    return set(uniq[:n])


# -- fitting --------------------------------------------------------------------------------------
class HeldOut(NamedTuple):
    """The queries fitting must never see: ``qids`` and their ``texts`` (``{qid: text}``), of ``suite``."""

    qids: tuple[str, ...] = ()
    texts: Mapping[str, str] = {}
    suite: str = ""


class Fit(NamedTuple):
    """A fitted map: its arrays, the epoch chosen (0: the identity), the epochs run, the per-epoch
    history and the seconds taken."""

    arrays: dict[str, np.ndarray]
    best_epoch: int
    epochs: int
    history: list[dict]
    seconds: float


def fit_pairs(
    pairs: Pairs,
    corpus: Corpus,
    heldout: HeldOut,
    *,
    validate: Callable[[dict[str, np.ndarray]], float] | None = None,
    rank: int = 0,
    temperature: float = 0.05,
    epochs: int = 40,
    batch_size: int = 64,
    learning_rate: float = 1e-3,
    weight_decay: float = 0.1,
    patience: int = 5,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> Fit:
    """Fit the map on ``pairs`` (see the module notes); the held-out check runs first.

    ``validate(arrays)`` scores a candidate map (higher is better; the held-back slice's nDCG@10):
    the epoch it scores best is kept, the identity (epoch 0) included; without it every epoch runs
    and the last is kept.

    Raises
    ------
    LeakError
        A pair's query is a held-out query (by id, or by text: case and spacing ignored).
    """
    check_no_heldout(
        pairs.rows, heldout.qids, heldout.texts, where="query-adapter training pairs", text="text", suite=heldout.suite
    )
    if not len(pairs.rows):
        raise QmdlabError("no training pairs: no query has a relevant chunk among the stored vectors")
    import torch

    t0 = time.perf_counter()
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    d = corpus.matrix.shape[1]
    if pairs.vectors.shape[1] != d:
        raise QmdlabError(f"query vectors are {pairs.vectors.shape[1]}-d but the stored vectors {d}-d")
    docs = torch.from_numpy(corpus.matrix)
    q_all = torch.from_numpy(np.ascontiguousarray(pairs.vectors))
    pos_all = torch.from_numpy(pairs.positive)
    neg_all = torch.from_numpy(pairs.negatives)
    pos_doc = corpus.doc_of[pairs.positive]
    rel_keys = np.array(_rel_keys(pairs.queries, corpus), dtype=np.int64)
    eye = torch.eye(d)
    if rank:
        u = torch.nn.Parameter(torch.zeros(d, rank))
        v = torch.nn.Parameter(torch.randn(d, rank, generator=gen) / d**0.5)
        params = [u, v]
    else:
        w = torch.nn.Parameter(eye.clone())
        params = [w]

    def mapped(x: torch.Tensor) -> torch.Tensor:
        y = x + (x @ params[1]) @ params[0].T if rank else x @ params[0].T
        return torch.nn.functional.normalize(y, dim=-1)

    def arrays() -> dict[str, np.ndarray]:
        if rank:
            return {"U": params[0].detach().numpy().copy(), "V": params[1].detach().numpy().copy()}
        return {"W": params[0].detach().numpy().copy()}

    opt = torch.optim.Adam(params, lr=learning_rate)
    n = len(pairs.rows)
    history: list[dict] = []
    best = (validate(arrays()) if validate is not None else float("-inf"), 0, arrays())
    if validate is not None:
        history.append({"epoch": 0, "heldback_ndcg@10": round(best[0], 4)})
    since = 0
    epoch = 0
    for epoch in range(1, epochs + 1):
        order = torch.randperm(n, generator=gen)
        total = 0.0
        for a in range(0, n, batch_size):
            b = order[a : a + batch_size]
            qv = mapped(q_all[b])
            pv = docs[pos_all[b]]
            inbatch = qv @ pv.T  # (B, B): column j is pair j's positive
            # another pair's positive that is relevant to this query is no negative
            keys = pairs.query_of[b.numpy()][:, None] * len(corpus.docnos) + pos_doc[b.numpy()][None, :]
            masked = np.isin(keys, rel_keys)
            np.fill_diagonal(masked, False)
            inbatch = inbatch.masked_fill(torch.from_numpy(masked), float("-inf"))
            nb = neg_all[b]
            hard = (qv[:, None, :] * docs[nb.clamp(min=0)]).sum(-1).masked_fill(nb < 0, float("-inf"))
            logits = torch.cat([inbatch, hard], dim=1) / temperature
            loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(b)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():  # decoupled decay toward the identity
                if rank:
                    for p in params:
                        p.mul_(1 - learning_rate * weight_decay)
                else:
                    params[0].sub_(learning_rate * weight_decay * (params[0] - eye))
            total += float(loss.detach()) * len(b)
        row: dict[str, Any] = {"epoch": epoch, "loss": round(total / n, 5)}
        if validate is not None:
            score = validate(arrays())
            row["heldback_ndcg@10"] = round(score, 4)
            if score > best[0] + 1e-9:
                best, since = (score, epoch, arrays()), 0
            else:
                since += 1
        history.append(row)
        if log is not None:
            log("adapter epoch " + ", ".join(f"{k} {v}" for k, v in row.items() if k != "epoch") + f" ({epoch})")
        if validate is not None and since >= patience:
            break
    if validate is None:
        best = (float("nan"), epoch, arrays())
    return Fit(best[2], best[1], epoch, history, round(time.perf_counter() - t0, 2))


def _rel_keys(queries: Sequence[Query], corpus: Corpus) -> list[int]:
    index = {d: i for i, d in enumerate(corpus.docnos)}
    return sorted(qi * len(corpus.docnos) + index[d] for qi, q in enumerate(queries) for d in q.relevant if d in index)


def apply_arrays(arrays: Mapping[str, np.ndarray], vectors: np.ndarray) -> np.ndarray:
    """Query vectors through a candidate map (:meth:`qmdlab.models.adapter.QueryAdapter.apply`)."""
    from qmdlab.models.adapter import QueryAdapter

    return QueryAdapter(arrays).apply(vectors)


def fit_with_heldback(pairs: Pairs, corpus: Corpus, heldout: HeldOut, cfg: AdapterRunConfig, log) -> dict:
    """Hold back a slice of ``pairs``' groups, fit on the rest with early stopping on the slice,
    and score the slice before and after: ``{"fit", "heldback": {"queries", "before", "after"}}``.
    No pair, fitted or held back, may be a query of ``heldout`` (:class:`LeakError`)."""
    # the held-back slice picks the epoch: it is tuning data, checked as fitting's is (fit_pairs)
    check_no_heldout(
        pairs.rows, heldout.qids, heldout.texts, where="query-adapter training pairs", text="text", suite=heldout.suite
    )
    hardware.set_threads(cfg.n_threads)
    back = held_back([r["group"] for r in pairs.rows], cfg.heldback, cfg.seed)
    fit_idx = [i for i, r in enumerate(pairs.rows) if r["group"] not in back]
    val_idx = [i for i, r in enumerate(pairs.rows) if r["group"] in back]
    train = pairs.take(fit_idx)
    val = pairs.take(val_idx) if val_idx else None
    validate = None
    val_vectors = np.zeros((0, corpus.matrix.shape[1]), np.float32)
    if val is not None:
        val_vectors = _query_vectors(val)
        judged = scorer(val.queries)

        def validate(arrays: dict[str, np.ndarray]) -> float:
            return means(per_query(corpus, apply_arrays(arrays, val_vectors), val.queries, judged))["ndcg@10"]

    fit = fit_pairs(
        train,
        corpus,
        heldout,
        validate=validate,
        rank=cfg.rank,
        temperature=cfg.temperature,
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        patience=cfg.patience,
        seed=cfg.seed,
        log=log if cfg.progress else None,
    )
    out: dict[str, Any] = {"fit": fit, "pairs": len(train.rows), "queries": len(train.queries)}
    if val is not None:
        before = means(per_query(corpus, val_vectors, val.queries))
        after = means(per_query(corpus, apply_arrays(fit.arrays, val_vectors), val.queries))
        out["heldback"] = {"queries": len(val.queries), "before": before, "after": after}
    return out


def _query_vectors(pairs: Pairs) -> np.ndarray:
    """One base vector per query of ``pairs`` (the first pair's)."""
    first: dict[int, int] = {}
    for i, q in enumerate(pairs.query_of.tolist()):
        first.setdefault(q, i)
    return pairs.vectors[[first[q] for q in range(len(pairs.queries))]]


def compare(corpus: Corpus, queries: Sequence[Query], vectors: np.ndarray, arrays_by_query) -> dict:
    """Held-out figures: per-query nDCG@10 and MRR@10 of the base and the adapted query vectors
    (``arrays_by_query(i)`` is the map query ``i`` is scored with: its fold's), with the paired table
    of :func:`qmdlab.eval.significance.compare_to_baseline` for each metric."""
    from qmdlab.eval.significance import compare_to_baseline

    adapted = np.stack([apply_arrays(arrays_by_query(i), vectors[i : i + 1])[0] for i in range(len(queries))])
    base_t, tuned_t = per_query(corpus, vectors, queries), per_query(corpus, adapted, queries)
    tables = {
        m: compare_to_baseline(
            {"base": base_t.select("qid", m), "adapter": tuned_t.select("qid", m)}, "base", metric=m
        ).to_dicts()
        for m in METRICS
    }
    return {
        "queries": len(queries),
        "before": means(base_t),
        "after": means(tuned_t),
        "table": tables,
        "per_query": {
            "base": dict(zip(base_t["qid"].to_list(), base_t["ndcg@10"].to_list())),
            "adapter": dict(zip(tuned_t["qid"].to_list(), tuned_t["ndcg@10"].to_list())),
        },
    }


def _figures(name: str, part: Mapping[str, Any]) -> str:
    b, a = part["before"], part["after"]
    return (
        f"{name} ({part['queries']} queries): nDCG@10 {b['ndcg@10']:.4f} -> {a['ndcg@10']:.4f}, "
        f"MRR@10 {b['mrr@10']:.4f} -> {a['mrr@10']:.4f}"
    )


# -- inputs of a run ------------------------------------------------------------------------------
def base_embedder(cfg: AdapterRunConfig):
    """``(reference, embedder)`` of the base: ``embed_model``, else the preset's (the environment and
    model config as every command reads them)."""
    from qmdlab.models import load_models
    from qmdlab.models.adapter import ADAPTER_MARK
    from qmdlab.models.registry import resolve_refs

    ref = resolve_refs(cfg.preset, {"embed": cfg.embed_model})[1]["embed"]
    if ref is None:
        raise ConfigError("the embed role is off ('none'); name the base embedder with --embed-model or --preset")
    if isinstance(ref, str) and ADAPTER_MARK in ref:
        raise ConfigError(
            f"{ref!r} already has a query adapter; fit against the base embedder: "
            f"--embed-model {ref.partition(ADAPTER_MARK)[0]}"
        )
    emb = load_models(cfg.preset, embed=ref, expand="none", rerank="none").embedder
    return str(ref), emb


def embed_queries(embedder, texts: Sequence[str], progress: bool = False) -> np.ndarray:
    """The base query vectors of ``texts`` (each text once)."""
    from tqdm import tqdm

    uniq = list(dict.fromkeys(texts))
    vecs = {t: embedder.embed_query(t) for t in tqdm(uniq, desc="embed queries", unit="query", disable=not progress)}
    return np.asarray([vecs[t] for t in texts], dtype=np.float32)


def load_corpus(idx, embedder) -> Corpus:
    """The stored vectors of ``embedder`` in ``idx``; refused when chunks lack them."""
    missing = idx.chunks_needing_vectors(embedder.fingerprint).height
    if missing:
        raise QmdlabError(
            f"index {idx.dir}: {missing} chunks have no vectors of {embedder.model_id}; run "
            f"`qmdlab --index {idx.dir} embed` first (the adapter is fitted against the stored vectors)"
        )
    vm = idx.vector_matrix(embedder.fingerprint)
    return Corpus.from_rows(vm.docnos, vm.chunk_ids.tolist(), vm.matrix)


def labelled_queries(suite) -> tuple[list[Query], dict[str, str]]:
    """The suite's judged queries with relevant documents, and every judged query's text."""
    import polars as pl

    judged = suite.data().judged_queries()
    texts = dict(zip(judged["qid"].cast(pl.Utf8).to_list(), judged["query"].to_list()))
    qrels = suite.qrels_docnos().filter(pl.col("grade") > 0)
    rel: dict[str, dict[str, float]] = {}
    for qid, docno, grade in qrels.select(pl.col("qid").cast(pl.Utf8), "docno", "grade").iter_rows():
        rel.setdefault(qid, {})[docno] = float(grade)
    return [Query(q, texts[q], rel[q]) for q in sorted(rel) if q in texts and texts[q]], texts


def synthetic_queries(idx, corpus: Corpus, generator: str | None, collections, max_pairs: int, seed: int):
    """``(queries, positive rows, groups, counts)`` of the index's kept generated queries: each
    with its own chunk as the positive and every document holding that chunk as relevant."""
    from qmdlab.store import doc_expansions as dx

    kept = dx.kept_queries(idx, generator, collections=collections)
    holders = dx.source_docnos(idx, collections)
    chunks = idx.chunks(sorted({k.docno for k in kept}))
    chunk_id = {(d, int(s)): int(c) for c, d, s in zip(chunks["chunk_id"], chunks["docno"], chunks["seq"])}
    seen: set[tuple[str, str, int]] = set()
    queries: list[Query] = []
    positives: list[list[int]] = []
    groups: list[str] = []
    dup = missing = 0
    for k in kept:
        key = (" ".join(k.query.lower().split()), k.hash, k.seq)
        if key in seen:
            dup += 1
            continue
        seen.add(key)
        row = corpus.row_of.get((k.docno, chunk_id.get((k.docno, k.seq), -1)))
        if row is None:
            missing += 1
            continue
        queries.append(Query(f"gen{len(queries)}", k.query, {d: 1.0 for d in holders.get(k.hash, {k.docno})}))
        positives.append([row])
        groups.append(k.hash)
    if len(queries) > max_pairs:
        keep = sorted(random.Random(seed).sample(range(len(queries)), max_pairs))
        queries = [Query(f"gen{j}", queries[i].text, queries[i].relevant) for j, i in enumerate(keep)]
        positives, groups = [positives[i] for i in keep], [groups[i] for i in keep]
    counts = {"kept": len(kept), "duplicates": dup, "no_vector": missing, "queries": len(queries)}
    return queries, positives, groups, counts


def _split_heldout(split: str | None, suite) -> tuple[str, ...] | None:
    if not split:
        return None
    from qmdlab.training.embedder import load_split

    return tuple(load_split(split, suite.name).heldout)


# -- the run --------------------------------------------------------------------------------------
@rundir.resumable("out")
def run_adapter(cfg: AdapterRunConfig, log: Callable[[str], None] = print) -> dict:
    """Vectors → pairs → leak check → fit (held-back early stopping) → report (module notes)."""
    from qmdlab.models.adapter import QueryAdapter, save_adapter

    out = Path(cfg.out)
    t0 = time.perf_counter()
    if not cfg.synthetic and cfg.suite is None:
        raise ConfigError(
            "train adapter needs labelled queries (--suite NAME: its training queries and judgments) or "
            "--synthetic (the generated queries the index stores: `qmdlab expand-docs` first)"
        )
    hardware.set_threads(cfg.n_threads)
    ref, base = base_embedder(cfg)
    rundir.save_config(cfg, out)
    suite = None
    if cfg.suite is not None:
        from qmdlab.eval.record import prepare_index
        from qmdlab.eval.suites import get_suite

        suite = get_suite(cfg.suite, cfg.format)
        idx = prepare_index(suite, base, progress=cfg.progress, log=log)
    else:
        from qmdlab.store import Index

        idx = Index.open(cfg.index, create=False)
    corpus = load_corpus(idx, base)
    log(f"adapter: {len(corpus.doc_of)} stored chunk vectors of {len(corpus.docnos)} documents, {base.model_id}")
    result: dict[str, Any] = {
        "suite": suite.name if suite is not None else None,
        "index": str(idx.dir),
        "base": ref,
        "base_fingerprint": base.fingerprint,
        "mode": "synthetic" if cfg.synthetic else "labelled",
        "rank": cfg.rank,
    }
    if cfg.synthetic:
        saved, report = _run_synthetic(cfg, suite, idx, corpus, base, log)
    else:
        saved, report = _run_labelled(cfg, suite, corpus, base, log)
    result.update(report)
    fit: Fit = saved["fit"]
    result.update(best_epoch=fit.best_epoch, epochs=fit.epochs, fit_s=fit.seconds)
    if "heldback" in saved:
        result["heldback"] = saved["heldback"]
    adapter = QueryAdapter(
        fit.arrays,
        base_fingerprint=base.fingerprint,
        base_ref=ref,
        base_model=base.model_id,
        training={
            **{k: v for k, v in result.items() if k not in ("base", "base_fingerprint", "heldout")},
            **({"heldout": _brief(result["heldout"])} if "heldout" in result else {}),
            "config": {k: v for k, v in vars(cfg).items() if k not in ("out", "progress")},
        },
    )
    path = save_adapter(adapter, out / "adapter.npz")
    result["adapter"] = str(path)
    result["digest"] = adapter.digest
    result["use"] = f"--embed-model {ref}+adapter:{out}"
    for entry in fit.history:
        rundir.append_metrics(out, {"stage": "adapter", **entry})
    if "heldback" in result:
        log(_figures("held-back slice", result["heldback"]))
    if "heldout" in result:
        log(_figures("held-out queries", result["heldout"]))
    result["seconds"] = round(time.perf_counter() - t0, 1)
    (out / "report.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    summary = {**result, **({"heldout": _brief(result["heldout"])} if "heldout" in result else {})}
    rundir.finish(out, "adapter", summary, f"qmdlab query adapter for {base.model_id}", _card(cfg, result))
    log(f"adapter: {path} (use it with {result['use']})")
    return summary


def _run_labelled(cfg: AdapterRunConfig, suite, corpus: Corpus, base, log) -> tuple[dict, dict]:
    """Fit on the training side of the official split, or on each fold then on every judged query."""
    from qmdlab.eval.folds import Fold, kfold
    from qmdlab.training.splits import suite_split

    queries, texts = labelled_queries(suite)
    by_id = {q.qid: i for i, q in enumerate(queries)}
    vectors = embed_queries(base, [q.text for q in queries], cfg.progress)
    official = suite.split is not None
    if official:
        s = suite_split(suite, [*suite.split.train, *suite.split.test])
        folds = [Fold(tuple(q for q in s.train if q in by_id), tuple(q for q in s.heldout if q in by_id))]
    else:
        folds = kfold(list(by_id), cfg.folds, cfg.seed)
    maps: dict[str, dict[str, np.ndarray]] = {}
    saved: dict = {}
    heldback = []
    for i, fold in enumerate(folds, 1):
        pairs = _pairs_of(corpus, queries, vectors, fold.train, by_id, cfg)
        res = fit_with_heldback(pairs, corpus, HeldOut(fold.test, texts, suite.name), cfg, log)
        heldback.append(res.get("heldback"))
        maps.update({q: res["fit"].arrays for q in fold.test})
        log(
            f"adapter fold {i}/{len(folds)}: {res['pairs']} pairs of {res['queries']} queries, epoch {res['fit'].best_epoch}"
        )
        if official:
            saved = res
    test = [queries[by_id[q]] for f in folds for q in f.test]
    test_vecs = vectors[[by_id[q.qid] for q in test]]
    held = compare(corpus, test, test_vecs, lambda i: maps[test[i].qid])
    if not official:  # the adapter kept: fitted on every judged query (the folds gave the figures)
        every = _pairs_of(corpus, queries, vectors, list(by_id), by_id, cfg)
        saved = fit_with_heldback(every, corpus, HeldOut(suite=suite.name), cfg, log)
    report = {
        "split": "official" if official else f"{len(folds)} folds",
        "train_queries": len(folds[0].train) if official else len(queries),
        "pairs": saved["pairs"],
        "heldout": held,
    }
    return saved, report


def _pairs_of(corpus, queries, vectors, qids, by_id, cfg: AdapterRunConfig) -> Pairs:
    chosen = [by_id[q] for q in qids if q in by_id]
    return build_pairs(
        corpus,
        [queries[i] for i in chosen],
        vectors[chosen],
        hard_negatives=cfg.hard_negatives,
        depth=cfg.negative_depth,
        seed=cfg.seed,
    )


def _run_synthetic(cfg: AdapterRunConfig, suite, idx, corpus: Corpus, base, log) -> tuple[dict, dict]:
    """Fit on the kept generated queries; a suite's judged queries (or the split's held-out side) are
    held out and reported."""
    collections = [suite.collection] if suite is not None else None
    gen, positives, groups, counts = synthetic_queries(idx, corpus, cfg.generator, collections, cfg.max_pairs, cfg.seed)
    if not gen:
        raise QmdlabError(
            f"index {idx.dir}: no kept generated queries"
            f"{' of generator ' + cfg.generator if cfg.generator else ''}; run "
            f"`qmdlab --index {idx.dir} expand-docs --generator MODEL` first, or fit on labelled queries with --suite"
        )
    log(
        f"adapter pairs: {counts['queries']} generated queries ({counts['kept']} kept, {counts['duplicates']} "
        f"duplicates, {counts['no_vector']} without a stored vector)"
    )
    heldout = HeldOut()
    labelled: list[Query] = []
    if suite is not None:
        labelled, texts = labelled_queries(suite)
        keep_out = _split_heldout(cfg.split, suite) or tuple(texts)
        heldout = HeldOut(keep_out, texts, suite.name)
        labelled = [q for q in labelled if q.qid in set(keep_out)]
    vectors = embed_queries(base, [q.text for q in gen], cfg.progress)
    pairs = build_pairs(
        corpus,
        gen,
        vectors,
        positives,
        groups=groups,
        synthetic=True,
        hard_negatives=cfg.hard_negatives,
        depth=cfg.negative_depth,
        seed=cfg.seed,
    )
    saved = fit_with_heldback(pairs, corpus, heldout, cfg, log)
    report: dict[str, Any] = {"generated": counts, "pairs": saved["pairs"]}
    if labelled:
        lv = embed_queries(base, [q.text for q in labelled], cfg.progress)
        report["heldout"] = compare(corpus, labelled, lv, lambda i: saved["fit"].arrays)
    return saved, report


def _brief(part: Mapping[str, Any]) -> dict:
    """A held-out report without its per-query scores."""
    return {k: v for k, v in part.items() if k != "per_query"}


def _card(cfg: AdapterRunConfig, r: dict) -> str:
    shape = "a full d x d map" if not cfg.rank else f"I + U V^T of rank {cfg.rank}"
    lines = [
        f"Base embedder: `{r['base']}` (`{r['base_fingerprint']}`). Map: {shape}, digest `{r['digest']}`.",
        f"Pairs: {r['pairs']} ({r['mode']}); InfoNCE at temperature {cfg.temperature}, {cfg.hard_negatives} "
        f"mined hard negatives, lr {cfg.learning_rate}, decay toward the identity {cfg.weight_decay}; "
        f"epoch {r['best_epoch']} kept of {r['epochs']} run (0 = the identity).",
        "",
        "Vector-only nDCG@10 / MRR@10, base -> adapter:",
        "",
    ]
    for name, key in (("held-back slice of the training queries", "heldback"), ("held-out queries", "heldout")):
        if key in r:
            p = r[key]
            lines.append(
                f"- {name} ({p['queries']}): {p['before']['ndcg@10']:.4f} -> {p['after']['ndcg@10']:.4f} / "
                f"{p['before']['mrr@10']:.4f} -> {p['after']['mrr@10']:.4f}"
            )
    lines += ["", f"Use it: `qmdlab query {r['use']} …` (or `embed: {r['base']}+adapter:{cfg.out}` in models.yaml)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    """``python -m qmdlab.training.adapter [--config FILE] [--field value ...]``."""
    from qmdlab.training.config import parse_args

    res = run_adapter(parse_args(AdapterRunConfig, argv))
    print(json.dumps({k: res.get(k) for k in ("adapter", "heldback", "heldout", "use")}, indent=1, default=str))
    return res


if __name__ == "__main__":
    main(sys.argv[1:])

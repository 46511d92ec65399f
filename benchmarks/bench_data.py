"""Synthetic data for ``benchmarks/bench.py``: a Zipfian markdown corpus, queries, vector indexes
and retune traces. Deterministic for a given seed; nothing here is timed.

The corpus imitates notes: a ``# title`` line, 1–6 paragraphs, word counts log-normal around
~150 words (≈1 KB), word frequencies Zipf(1.07) over a 20k vocabulary of made-up words whose
60 most frequent entries are English stopwords (so the OR-mode stopword handling is exercised).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

_CONS = "bcdfghjklmnprstvz"
_VOWS = "aeiou"


def make_vocab(size: int, seed: int = 7) -> list[str]:
    """``size`` distinct words: English stopwords first, then made-up 2–4 syllable words."""
    from qmdlab.terms import BM25_STOPWORDS as STOPWORDS

    rng = np.random.default_rng(seed)
    stop = sorted(w for w in STOPWORDS if len(w) > 1)[:60]
    words: list[str] = list(stop)
    seen = set(words)
    while len(words) < size:
        n = int(rng.integers(2, 5))
        w = "".join(_CONS[int(rng.integers(len(_CONS)))] + _VOWS[int(rng.integers(len(_VOWS)))] for _ in range(n))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


class Corpus:
    """A reproducible synthetic markdown corpus."""

    def __init__(self, seed: int = 7, vocab_size: int = 20000, mean_words: float = 150.0):
        self.seed = seed
        self.words = make_vocab(vocab_size, seed)
        ranks = np.arange(1, vocab_size + 1, dtype=np.float64)
        p = 1.0 / ranks**1.07
        self.p = p / p.sum()
        self.mean_words = mean_words

    def documents(self, n: int) -> list[tuple[str, str]]:
        """``n`` (title, markdown text) pairs."""
        rng = np.random.default_rng(self.seed + n)
        lengths = np.clip(rng.lognormal(np.log(self.mean_words), 0.6, n), 20, 3000).astype(np.int64)
        ids = rng.choice(len(self.words), size=int(lengths.sum()) + 4 * n, p=self.p)
        title_ids = rng.integers(60, 3000, size=(n, 3))
        words = self.words
        out = []
        pos = 0
        for i in range(n):
            title = " ".join(words[j] for j in title_ids[i]).capitalize()
            body_ids = ids[pos : pos + lengths[i]]
            pos += lengths[i]
            paras = []
            for start in range(0, len(body_ids), 60):
                seg = [words[j] for j in body_ids[start : start + 60]]
                sent = []
                for k in range(0, len(seg), 12):
                    s = " ".join(seg[k : k + 12])
                    sent.append(s[:1].upper() + s[1:] + ".")
                paras.append(" ".join(sent))
            out.append((title, f"# {title}\n\n" + "\n\n".join(paras) + "\n"))
        return out

    def write(self, root: Path, n: int, per_dir: int = 1000) -> int:
        """Write ``n`` documents as ``root/dNNN/docNNNNNN.md``; returns the bytes written."""
        root = Path(root)
        total = 0
        for i, (_, text) in enumerate(self.documents(n)):
            d = root / f"d{i // per_dir:03d}"
            if i % per_dir == 0:
                d.mkdir(parents=True, exist_ok=True)
            data = text.encode("utf-8")
            (d / f"doc{i:06d}.md").write_bytes(data)
            total += len(data)
        return total

    def queries(self, n: int, seed: int = 11) -> list[str]:
        """``n`` 2–4 word queries of mid-frequency words, a third with a stopword."""
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(n):
            k = int(rng.integers(2, 5))
            ws = [self.words[int(j)] for j in rng.integers(60, 4000, size=k)]
            if rng.random() < 0.33:
                ws.insert(int(rng.integers(0, k)), self.words[int(rng.integers(0, 60))])
            out.append(" ".join(ws))
        return out


def list_md(root: Path) -> list[str]:
    """Every ``*.md`` under ``root`` (os.walk), the file list a hash-everything scan starts from."""
    out = []
    for dirpath, _, files in os.walk(root):
        out.extend(os.path.join(dirpath, f) for f in files if f.endswith(".md"))
    return out


def build_vector_index(directory: Path, n_chunks: int, dim: int, fingerprint: str, seed: int = 3):
    """An index holding ``n_chunks`` random unit vectors of ``dim`` dims, 1–7 chunks per document.

    Documents/chunks are inserted with plain SQL (the vector stage only reads them); the vectors
    go through :meth:`Index.store_vectors` and are loaded by :meth:`Index.vector_matrix`, the
    real paths. Returns ``(index, VectorMatrix, load_seconds)``.
    """
    import time

    from qmdlab.store import Index

    rng = np.random.default_rng(seed)
    idx = Index(directory)
    per_doc = []
    total = 0
    while total < n_chunks:
        k = min(int(rng.integers(1, 8)), n_chunks - total)
        per_doc.append(k)
        total += k
    with idx.transaction() as c:
        c.executemany("INSERT INTO content(hash, body) VALUES (?, 'x')", [(f"h{d:07d}",) for d in range(len(per_doc))])
        c.executemany(
            "INSERT INTO documents(collection, path, title, hash, mtime, size, active) "
            "VALUES ('vec', ?, 't', ?, 0, 1, 1)",
            [(f"doc{d:07d}.md", f"h{d:07d}") for d in range(len(per_doc))],
        )
        c.executemany(
            "INSERT INTO chunks(hash, seq, char_start, char_end, line_start, line_end, heading_path) "
            "VALUES (?, ?, 0, 1, 1, 1, '')",
            [(f"h{d:07d}", s) for d, k in enumerate(per_doc) for s in range(k)],
        )
    ids = [r[0] for r in idx.conn.execute("SELECT id FROM chunks ORDER BY id")]
    step = 50000
    for i in range(0, len(ids), step):
        m = rng.standard_normal((min(step, len(ids) - i), dim), dtype=np.float32)
        idx.store_vectors(ids[i : i + step], m, fingerprint)
        del m
    t0 = time.perf_counter()
    vm = idx.vector_matrix(fingerprint)
    return idx, vm, time.perf_counter() - t0, len(per_doc)


def synthetic_trace(
    n_queries: int, seed: int = 5, n_docs: int = 5000, list_len: int = 20, n_lists: int = 4, pool_size: int = 60
):
    """A cached multi-query :class:`~qmdlab.pipeline.trace.Trace` and its qrels.

    Per query: ``n_lists`` lists (four: fts/original, vec/original, fts/lex, vec/hyde; eight: two
    more lex, two vec, one more hyde), ``list_len`` hits each, drawn from a query-specific pool of
    ``pool_size`` documents (so lists overlap as real ones do); rerank
    scores for the 40 fused candidates of the default config; 5 judged documents (grades 1–2) of
    which 4 come from the pool. Returns ``(trace, qrels)``.
    """
    import polars as pl

    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.pipeline.fuse import candidates, fuse
    from qmdlab.pipeline.trace import SCHEMAS, Trace

    rng = np.random.default_rng(seed)
    kinds = [
        ("fts", "original", 2.0),
        ("vec", "original", 2.0),
        ("fts", "lex", 1.0),
        ("vec", "hyde", 1.0),
        ("fts", "lex", 1.0),
        ("vec", "vec", 1.0),
        ("vec", "vec", 1.0),
        ("vec", "hyde", 1.0),
    ][:n_lists]
    if len(kinds) != n_lists:
        raise ValueError(f"synthetic_trace: n_lists must be 1..8, got {n_lists}")
    cols: dict[str, list] = {c: [] for c in SCHEMAS["lists"]}
    qrows: dict[str, list] = {"qid": [], "docno": [], "grade": []}
    qids = [f"q{i:04d}" for i in range(n_queries)]
    for qid in qids:
        pool = rng.choice(n_docs, size=pool_size, replace=False)
        for lid, (src, qt, w) in enumerate(kinds):
            docs = rng.choice(pool, size=list_len, replace=False)
            scores = np.sort(rng.random(list_len))[::-1]
            for r, (d, s) in enumerate(zip(docs, scores), 1):
                cols["qid"].append(qid)
                cols["list_id"].append(lid)
                cols["source"].append(src)
                cols["query_type"].append(qt)
                cols["subquery"].append(f"{qt} {qid}")
                cols["docno"].append(f"bench/doc{int(d):06d}.md")
                cols["chunk_id"].append(int(d))
                cols["rank"].append(r)
                cols["backend_score"].append(float(s))
                cols["score"].append(float(s))
                cols["weight"].append(w)
        judged = list(rng.choice(pool, size=4, replace=False)) + [int(rng.integers(n_docs))]
        for d in dict.fromkeys(int(x) for x in judged):
            qrows["qid"].append(qid)
            qrows["docno"].append(f"bench/doc{d:06d}.md")
            qrows["grade"].append(int(rng.integers(1, 3)))
    lists = pl.DataFrame(cols, schema=SCHEMAS["lists"])
    cands = candidates(fuse(lists, PipelineConfig()), PipelineConfig().candidate_limit)
    rerank = cands.select("qid", "docno").with_columns(
        chunk_id=pl.lit(None, dtype=pl.Int64),
        chunk_hash=pl.lit("h"),
        rerank_score=pl.Series(rng.random(cands.height)),
        cached=pl.lit(True),
    )
    queries = pl.DataFrame(
        {"qid": qids, "text": [f"query {q}" for q in qids], "intent": [None] * n_queries}, schema=SCHEMAS["queries"]
    )
    trace = Trace(queries=queries, lists=lists, rerank=rerank)
    return trace, pl.DataFrame(qrows)

"""EmbeddingGemma-300M at two precisions (GGUF f16 and Q8_0, the file qmd uses): speed and agreement.

    .venv/bin/python experiments/embeddinggemma/precision.py default \
        --models pkg:embeddinggemma-300m pkg:embeddinggemma-300m-q8_0 pkg:all-minilm-l6-v2 \
        --threads 2 --both-packings --out docs/results/embeddinggemma

For the suite's chunks (as `qmdlab embed` cuts them, through the suite's index) and its judged
queries, each model embeds every chunk and every query with the product's embedder (qmd's prompt
templates, batch 32) after one warm-up call, one text per ``llama_decode`` (the default) and, with
``--both-packings``, also with a batch's texts packed into one decode. Reported per run: chunks/s
and queries/s with the given llama.cpp threads, and, against the first run, the cosine of each
chunk's and each query's two vectors (min / mean) and how often each query's vector-only top 10
chunks are the same set.
Run it on a quiet machine: the speeds are the point. Writes ``<out>/precision-<suite>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _chunks(suite):
    """(titles, texts) of every chunk of the suite's active documents, in chunk-id order."""
    from qmdlab.eval.record import prepare_index

    idx = prepare_index(suite, None, progress=False, log=lambda _m: None)
    rows = idx.chunks_needing_vectors("no-such-embedder")  # a fingerprint with no vectors: every chunk
    return rows["title"].to_list(), rows["text"].to_list()


def measure(ref: str, docs: list[tuple[str, str]], queries: list[str], threads: int, pack: bool) -> dict:
    import numpy as np

    from qmdlab.models import load_models

    models = load_models("offline", embed=ref, expand="none", rerank="none", n_threads=threads, idle_timeout=None)
    emb = models.embedder
    emb.pack = pack
    try:
        t0 = time.perf_counter()
        emb.prepare()
        load_s = time.perf_counter() - t0
        emb.embed_documents(docs[:2])  # warm-up: graph allocation, first-call costs
        t0 = time.perf_counter()
        d = emb.embed_documents(docs)
        doc_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        q = np.stack([emb.embed_query(text) for text in queries])
        query_s = time.perf_counter() - t0
    finally:
        models.close()
    return {
        "ref": ref,
        "pack": pack,
        "fingerprint": emb.fingerprint,
        "dim": int(d.shape[1]),
        "load_s": round(load_s, 2),
        "chunks": len(docs),
        "chunk_s": round(doc_s, 2),
        "chunks_per_s": round(len(docs) / doc_s, 3),
        "queries": len(queries),
        "query_s": round(query_s, 2),
        "queries_per_s": round(len(queries) / query_s, 2),
        "_d": d,
        "_q": q,
    }


def agreement(ref: dict, other: dict) -> dict:
    """Cosines between two models' vectors of the same texts and top-10 set agreement per query."""
    import numpy as np

    cd = np.sum(ref["_d"] * other["_d"], axis=1)
    cq = np.sum(ref["_q"] * other["_q"], axis=1)
    top = lambda r: np.argsort(-(r["_q"] @ r["_d"].T), axis=1)[:, :10]  # noqa: E731
    a, b = top(ref), top(other)
    same = [len(set(x) & set(y)) / 10 for x, y in zip(a.tolist(), b.tolist())]
    return {
        "chunk_cosine_min": float(cd.min()),
        "chunk_cosine_mean": float(cd.mean()),
        "query_cosine_min": float(cq.min()),
        "query_cosine_mean": float(cq.mean()),
        "top10_overlap_mean": float(np.mean(same)),
        "top1_same": float(np.mean(a[:, 0] == b[:, 0])),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite")
    ap.add_argument("--models", nargs="+", required=True, help="embedder references; the first is the reference")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--both-packings", action="store_true", help="also measure each model with packed batches")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    from qmdlab.eval.suites import get_suite

    suite = get_suite(args.suite)
    titles, texts = _chunks(suite)
    queries = suite.data().judged_queries()["query"].to_list()
    docs = list(zip(titles, texts))
    load_before = os.getloadavg()[0]
    packings = (False, True) if args.both_packings else (False,)
    results = [measure(ref, docs, queries, args.threads, pack) for ref in args.models for pack in packings]
    base = results[0]
    out = {
        "suite": args.suite,
        "threads": args.threads,
        "cpu_count": os.cpu_count(),
        "load_average_1min_before": load_before,
        "runs": [],
    }
    for r in results:
        row = {k: v for k, v in r.items() if not k.startswith("_")}
        if r is not base and r["dim"] == base["dim"]:
            row["against_" + base["ref"]] = agreement(base, r)
        row["chunks_per_s_ratio"] = round(r["chunks_per_s"] / base["chunks_per_s"], 3)
        out["runs"].append(row)
        print(
            f"{r['ref']}{' packed' if r['pack'] else ''}: {r['chunks']} chunks in {r['chunk_s']} s ({r['chunks_per_s']}/s, "
            f"{row['chunks_per_s_ratio']}x the first), {r['queries']} queries in {r['query_s']} s; "
            + json.dumps(row.get("against_" + base["ref"], {}))
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"precision-{args.suite}.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

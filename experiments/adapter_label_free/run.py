"""Two more label-free sources for the query adapter on SciFact, scored on the 300 test claims.

``.venv/bin/python experiments/adapter_label_free/run.py claims``   — generated claims (below)
``.venv/bin/python experiments/adapter_label_free/run.py log --positive fused|agree``

- ``claims``: the packaged Qwen2.5-Coder-0.5B, untrained, writes one short *claim* (not a search query)
  for each of a seeded sample of SciFact's chunks, greedy; no claim and no judgment is read. The
  claims are kept in ``--claims FILE`` (JSON lines; ``--generate N`` writes claims for the first N
  chunks of the sample not yet in it), round-trip filtered (BM25 finds their chunk in its top 20), and
  each is paired with its own chunk.
- ``log``: SciFact's 807 *training* claims as a query log without judgments: each claim's positive is
  the top document of a label-free ranking of it — ``fused`` (qmd's RRF of its BM25 and vector lists),
  or ``agree`` (only claims whose BM25 and vector lists put the same document first). The judgments
  are read once, after fitting, to print the pseudo-labels' precision.

Fitting is ``qmdlab train adapter``'s (:func:`qmdlab.training.adapter.fit_with_heldback`: a held-back
slice of the pairs picks the epoch, the identity included). ``--diagnose`` also prints the test claims'
nDCG@10 after a fixed 1, 2, 3, 5 and 10 epochs without that choice: a diagnosis of what the slice
could not see, never a figure to report as a result (it reads the test claims to choose nothing, but a
reader could).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CLAIMS = Path("docs/results/adapter/scifact-generated-claims.jsonl")
GENERATOR = "pkg:qwen2.5-coder-0.5b-instruct-q4_k_m"
INSTRUCTION = (
    "Write one short claim (a single sentence, under 20 words) that this abstract gives evidence for, in your "
    "own words. Answer with the claim only."
)


def generate(idx, path: Path, n: int, threads: int) -> None:
    """Append claims for the first ``n`` chunks of the seeded sample that ``path`` lacks."""
    from qmdlab.models import packaged
    from qmdlab.models._llama import import_llama_cpp

    docs = idx.documents()
    ch = idx.chunks(docs["docno"].to_list())
    rows = list(zip(ch["docno"].to_list(), ch["chunk_id"].to_list(), ch["text"].to_list()))
    random.Random(0).shuffle(rows)
    done = {json.loads(line)["chunk_id"] for line in path.open()} if path.exists() else set()
    todo = [r for r in rows[:n] if r[1] not in done]
    if not todo:
        return
    llama_cpp = import_llama_cpp()
    llm = llama_cpp.Llama(str(packaged.ensure(GENERATOR[4:])), n_ctx=1024, n_threads=threads, verbose=False, seed=0)
    t0 = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for k, (docno, cid, text) in enumerate(todo, 1):
            body = " ".join(text.split())[:700]
            msg = [
                {"role": "system", "content": "You write short scientific claims."},
                {"role": "user", "content": f"Abstract:\n{body}\n\n{INSTRUCTION}"},
            ]
            out = llm.create_chat_completion(msg, max_tokens=40, temperature=0.0)
            claim = out["choices"][0]["message"]["content"].strip().split("\n")[0].strip().strip('"')
            f.write(json.dumps({"docno": docno, "chunk_id": cid, "claim": claim}) + "\n")
            f.flush()
            if k % 25 == 0:
                print(f"generated {k}/{len(todo)}, {(time.perf_counter() - t0) / k:.2f} s a chunk", flush=True)


def claim_pairs(idx, corpus, path: Path, top_k: int = 20):
    from qmdlab.search.lexical import bm25_search
    from qmdlab.training import adapter as A

    gen, positives, groups = [], [], []
    n = 0
    for line in path.open(encoding="utf-8"):
        r = json.loads(line)
        n += 1
        c = r["claim"]
        if not c or len(c.split()) > 30:
            continue
        if r["docno"] not in {h.docno for h in bm25_search(idx, c, limit=top_k)}:
            continue
        row = corpus.row_of.get((r["docno"], r["chunk_id"]))
        if row is None:
            continue
        gen.append(A.Query(f"gen{len(gen)}", c, {r["docno"]: 1.0}))
        positives.append([row])
        groups.append(r["docno"])
    print(f"claims: {n} generated, {len(gen)} kept by the round trip (BM25 top {top_k})")
    return gen, positives, groups


def log_pairs(idx, corpus, base, suite, positive: str):
    from qmdlab.search.lexical import bm25_search
    from qmdlab.training import adapter as A

    judged = suite.data().judged_queries()
    texts = dict(zip(judged["qid"].cast(str).to_list(), judged["query"].to_list()))
    train = [q for q in suite.split.train if q in texts]
    vectors = A.embed_queries(base, [texts[q] for q in train])
    scores = corpus.doc_scores(vectors)
    gen, positives, groups = [], [], []
    for i, q in enumerate(train):
        vec = [corpus.docnos[j] for j in np.argsort(-scores[i])[:60]]
        lex = list(dict.fromkeys(h.docno for h in bm25_search(idx, texts[q], limit=60)))
        rrf: dict[str, float] = {}
        for ranked in (vec, lex):
            for r, d in enumerate(ranked):
                rrf[d] = rrf.get(d, 0.0) + 1 / (60 + r + 1)
        top = max(rrf, key=lambda d: (rrf[d], d))
        if positive == "agree" and not (lex and lex[0] == vec[0]):
            continue
        j = corpus.docnos.index(top)
        s, e = int(corpus.starts[j]), A._end(corpus, j)
        gen.append(A.Query(f"log-{q}", texts[q], {top: 1.0}))
        positives.append([s + int(np.argmax(vectors[i] @ corpus.matrix[s:e].T))])
        groups.append(q)
    print(f"query log: {len(gen)} of {len(train)} training claims pseudo-labelled ({positive})")
    return gen, positives, groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", choices=["claims", "log"])
    ap.add_argument("--claims", type=Path, default=CLAIMS, help="The generated claims (JSON lines).")
    ap.add_argument("--generate", type=int, default=0, help="Write claims for the first N sampled chunks first.")
    ap.add_argument("--positive", choices=["fused", "agree"], default="fused", help="log: the pseudo-label.")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--diagnose", action="store_true", help="Also fixed epoch counts (see the module notes).")
    args = ap.parse_args()
    from qmdlab.eval.record import prepare_index
    from qmdlab.eval.suites import get_suite
    from qmdlab.training import adapter as A

    suite = get_suite("scifact")
    idx = prepare_index(suite, None, progress=False, log=lambda _m: None)
    if args.source == "claims" and args.generate:
        generate(idx, args.claims, args.generate, args.threads)
    cfg = A.AdapterRunConfig(suite="scifact", synthetic=True, preset="offline", progress=False, n_threads=args.threads)
    _, base = A.base_embedder(cfg)
    corpus = A.load_corpus(idx, base)
    if args.source == "claims":
        gen, positives, groups = claim_pairs(idx, corpus, args.claims)
    else:
        gen, positives, groups = log_pairs(idx, corpus, base, suite, args.positive)
    labelled, texts = A.labelled_queries(suite)
    test = set(suite.split.test)
    heldout = A.HeldOut(tuple(sorted(test)), texts, suite.name)  # the leak check: no test claim is a pair
    labelled = [q for q in labelled if q.qid in test]
    vectors = A.embed_queries(base, [q.text for q in gen])
    pairs = A.build_pairs(corpus, gen, vectors, positives, groups=groups, synthetic=True, seed=cfg.seed)
    saved = A.fit_with_heldback(pairs, corpus, heldout, cfg, print)
    fit = saved["fit"]
    print(
        f"pairs {saved['pairs']}; held-back slice nDCG@10 by epoch "
        f"{[h.get('heldback_ndcg@10') for h in fit.history]}: epoch {fit.best_epoch} kept"
    )
    if args.source == "log":
        rel: dict[str, set[str]] = {}
        for qid, docno, grade in suite.qrels_docnos().select("qid", "docno", "grade").iter_rows():
            if grade > 0:
                rel.setdefault(str(qid), set()).add(docno)
        right = [any(d in rel.get(q.qid.removeprefix("log-"), set()) for d in q.relevant) for q in gen]
        print(f"pseudo-label precision (judgments read after fitting): {np.mean(right):.3f}")
    test_vectors = A.embed_queries(base, [q.text for q in labelled])

    def row(arrays, label: str) -> None:
        t = A.compare(corpus, labelled, test_vectors, lambda i: arrays)["table"]["ndcg@10"][1]
        print(
            f"{label:28s} test nDCG@10 {t['mean']:.4f}  Δ {t['delta']:+.4f}  p(t) {t['p_ttest']:.4f}  "
            f"W/T/L {t['wins']}/{t['ties']}/{t['losses']}"
        )

    row(fit.arrays, f"adapter (epoch {fit.best_epoch} kept)")
    if args.diagnose:
        for epochs in (1, 2, 3, 5, 10):
            forced = A.fit_pairs(pairs, corpus, heldout, validate=None, epochs=epochs, seed=cfg.seed)
            row(forced.arrays, f"diagnosis: {epochs} epochs")


if __name__ == "__main__":
    main()

"""How much can *any* expansion help this pipeline? ΔnDCG@10 of simple, model-free expansions on the
TRAIN split of each labelled suite (never the held-out side), scored exactly as the GRPO reward scores a
completion (qmdlab.training.reward.engine_scorer: the engine's filter, strong-signal skip and fusion).

``python experiments/expansion_headroom/run.py --suites scifact cisi --preset offline [--splits FILE]``

Variants: ``lex-keywords`` (the query's content words, stopwords out), ``lex-rare3`` (its 3 rarest words by
document frequency), ``vec-first-sentence`` (the first sentence, for multi-sentence queries),
``oracle-title`` (lex + vec = the title/first line of a relevant document) and ``oracle-vocabulary`` (the
target the vocabulary SFT examples teach: lex lines of the query's rarest term and the relevant document's
words the query lacks, :func:`qmdlab.training.vocabulary.vocabulary_lines`). Corpus-steered variants read the
query's own BM25 top ``--feedback-k`` documents first (pseudo-relevance feedback): ``feedback`` (the same lines
drawn from all of them, no labels), ``oracle-feedback`` (drawn from the relevant ones among them only, none when
none is there: what a perfect reader of the feedback documents could write). The oracles read labels: upper
bounds, never usable at inference. ``--pipeline bm25`` scores BM25 alone (``vector: false``). Prints mean Δ,
its standard deviation and wins/ties/losses per suite.
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

from qmdlab.terms import terms


def variants(query: str, df) -> dict[str, str]:
    words = [w for w in terms(query)]
    uniq = list(dict.fromkeys(words))
    out = {"lex-keywords": f"lex: {' '.join(uniq[:12])}"}
    rare = sorted(uniq, key=lambda w: df.get(w, 0))[:3]
    out["lex-rare3"] = f"lex: {' '.join(rare)}"
    first = re.split(r"(?<=[.?!])\s+", query.strip())[0]
    if first != query.strip():
        out["vec-first-sentence"] = f"vec: {first}"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--splits",
        help="A recipe run's splits.json; default: the split every trainer draws (SciFact's official one, else "
        "qmdlab.training.splits.suite_split's held-out half, seed 0), as experiments/expander_pairs scores.",
    )
    ap.add_argument("--suites", nargs="+", default=["default", "cisi"])
    ap.add_argument("--pipeline", choices=["hybrid", "bm25"], default="hybrid", help="bm25: vector search off.")
    ap.add_argument("--preset", default=None, help="The embedder preset (default: GRPO's, offline-mini).")
    ap.add_argument("--min-df", type=int, default=10, help="oracle-vocabulary: the recipe's vocabulary_min_df.")
    ap.add_argument("--feedback-k", type=int, default=3, help="feedback variants: how many BM25 documents are read.")
    args = ap.parse_args()
    from qmdlab.eval.suites import get_suite
    from qmdlab.search.lexical import bm25_search
    from qmdlab.training.grpo import GRPORunConfig, split_rows, suite_retrieval
    from qmdlab.training.vocabulary import document_frequency, vocabulary_lines

    if args.splits is None:
        import tempfile

        from qmdlab.training.splits import save_splits, suite_split

        drawn = []
        for name in args.suites:
            s = get_suite(name)
            drawn.append(suite_split(s, s.data().judged_queries()["qid"].cast(str).to_list()))
        args.splits = str(save_splits(drawn, Path(tempfile.mkdtemp()) / "splits.json"))
    extra = {"models_preset": args.preset} if args.preset else {}
    cfg = GRPORunConfig(
        labelled_suites=args.suites,
        splits_file=args.splits,
        unlabelled_prompts=False,
        pipeline={"vector": False} if args.pipeline == "bm25" else {},
        **extra,
    )
    rows = split_rows(cfg)
    routed = suite_retrieval(cfg)
    for suite in args.suites:
        reward = routed.by_suite[suite]
        lab_index = None
        srows = [r for r in rows if r["suite"] == suite]
        # document frequency of words over the suite's chunks (for lex-rare3)
        from qmdlab.eval.record import prepare_index

        idx = prepare_index(get_suite(suite), None, progress=False, log=lambda _m: None)
        docs = idx.documents()
        chunks = idx.chunks(docs["docno"].to_list())
        df = document_frequency(chunks["text"].to_list())
        titles = dict(zip(docs["docno"].to_list(), docs["title"].to_list())) if "title" in docs.columns else {}
        texts: dict[str, list[str]] = {}
        for docno, text in zip(chunks["docno"].to_list(), chunks["text"].to_list()):
            texts.setdefault(docno, []).append(text)
        deltas: dict[str, list[float]] = {}
        for r in srows:
            comps = variants(r["query"], df)
            rel = [d for d, g in sorted(r["qrels"].items(), key=lambda x: -x[1]) if g > 0]
            if rel and titles.get(rel[0]):
                t = titles[rel[0]]
                comps["oracle-title"] = f"lex: {t}\nvec: {t}"
            best = min(rel, key=lambda d: (-r["qrels"][d], d)) if rel else None  # the SFT target's document
            if best in texts:
                lines = vocabulary_lines(r["query"], "\n".join(texts[best]), df, chunks.height, min_df=args.min_df)
                if lines:
                    comps["oracle-vocabulary"] = "\n".join(f"{k}: {x}" for k, x in lines)
            fb = list(dict.fromkeys(h.docno for h in bm25_search(idx, r["query"], limit=4 * args.feedback_k)))
            fb = fb[: args.feedback_k]
            for name, docs_read in (("feedback", fb), ("oracle-feedback", [d for d in fb if r["qrels"].get(d, 0) > 0])):
                text = "\n".join("\n".join(texts.get(d, [])) for d in docs_read)
                lines = (
                    vocabulary_lines(r["query"], text, df, chunks.height, min_df=args.min_df) if text.strip() else ()
                )
                if lines:
                    comps[name] = "\n".join(f"{k}: {x}" for k, x in lines)
                else:
                    deltas.setdefault(name, []).append(0.0)  # nothing to add: the unexpanded ranking
            for name, comp in comps.items():
                d = reward(r["query"], r["qid"], comp)
                if d is not None:
                    deltas.setdefault(name, []).append(d)
        print(f"## {suite} ({len(srows)} train queries, {args.pipeline})")
        for name, ds in deltas.items():
            w = sum(d > 0 for d in ds)
            l_ = sum(d < 0 for d in ds)
            print(
                f"{name:20s} n={len(ds):3d} mean Δ {statistics.fmean(ds):+.4f} sd {statistics.pstdev(ds):.3f}  "
                f"W/T/L {w}/{len(ds) - w - l_}/{l_}"
            )
        del lab_index


if __name__ == "__main__":
    main()

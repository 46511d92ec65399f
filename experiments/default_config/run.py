"""The pipeline's default fusion and list weights for the default embedder, chosen on training data only.

    .venv/bin/python experiments/default_config/run.py default scifact [cisi cacm med] \\
        --out docs/results/default-config

Each suite's judged queries are recorded once with the default preset's embedder (EmbeddingGemma-300M,
expansion and rerank off; the offline preset runs neither, so the strong-signal probe, which only
decides whether to expand, has nothing to decide there). The candidates are every fusion method
under BM25 weights of 2 (today: BM25 and vectors at 2 each), 1, 0.5 and 0 against the vectors' 2.

A candidate's **training score** is the mean, over the suites, of its nDCG@10 on each suite's
training side: a suite with an official split (SciFact) its training claims, any other suite all
its judged queries — except the suite being scored, whose held-out part is left out. Held-out parts:
SciFact's test claims, and 5 folds (seed 0) of every other suite's queries. For each held-out part
the candidate with the best training score is scored on it (so no held-out query chooses the
configuration that scores it); the rows are compared per query with today's default on the same
queries (paired t-test, Fisher randomisation, wins/ties/losses). The **chosen default** is the
candidate with the best training score over every suite's full training side.

Writes ``<out>/<suites>.json`` (candidates' training scores, per-part choices, per-query nDCG@10 of
today's default and of the held-out choice, the comparisons) and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BM25_WEIGHTS = (2.0, 1.0, 0.5, 0.0)
FOLDS = 5


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def candidates(base):
    """Every fusion method under each BM25 weight (the vectors' weight stays at the default's)."""
    from qmdlab.pipeline.config import FUSION_METHODS

    return {
        f"{m} bm25 {w:g}": base.replace(fusion=m, weight_original_fts=w)
        for m in FUSION_METHODS
        if m != "learned"
        for w in BM25_WEIGHTS
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suites", nargs="+")
    ap.add_argument("--preset", default="offline", help="The preset whose embedder is recorded (default: offline).")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    from qmdlab.eval.folds import kfold
    from qmdlab.eval.record import record, suite_config
    from qmdlab.eval.significance import paired_comparison
    from qmdlab.eval.study import Study
    from qmdlab.eval.suites import get_suite
    from qmdlab.models import load_models
    from qmdlab.models.base import ModelSet

    embedder = load_models(args.preset, expand="none", rerank="none").embedder
    studies, train_side, parts = {}, {}, {}
    for name in args.suites:
        suite = get_suite(name)
        cfg = suite_config(suite).replace(expand=False, rerank=False)
        rec = record(suite, ModelSet(embedder, None, None), cfg, name=f"default-config-{args.preset}", log=_log)
        study = Study.from_recording(rec, metrics=["ndcg@10"])
        studies[name] = study
        qids = tuple(study.trace.queries["qid"].to_list())
        split = suite.split
        if split is not None:
            train_side[name] = tuple(q for q in split.train if q in set(qids))
            parts[name] = [("test", train_side[name], tuple(split.test))]
        else:
            train_side[name] = qids
            parts[name] = [(f"fold {i + 1}", f.train, f.test) for i, f in enumerate(kfold(list(qids), FOLDS, seed=0))]
    today = next(iter(studies.values())).config
    grid = candidates(today)
    # every candidate's nDCG@10 on every query, once: the choices below are means over query subsets
    per_query = {}
    for name, study in studies.items():
        for label, cfg in grid.items():
            table = study.evaluate(cfg).per_query
            per_query[name, label] = dict(zip(table["qid"].to_list(), table["ndcg@10"].to_list()))

    def mean(name: str, label: str, qids) -> float:
        scores = per_query[name, label]
        return sum(scores.get(q, 0.0) for q in qids) / max(len(qids), 1)

    def train_score(label: str, leave: tuple[str, tuple[str, ...]] | None) -> float:
        total = 0.0
        for name in studies:
            qids = train_side[name]
            if leave is not None and leave[0] == name:
                qids = leave[1]
            total += mean(name, label, qids)
        return total / len(studies)

    today_label = next(label for label, cfg in grid.items() if cfg == today)
    result: dict = {"preset": args.preset, "embedder": embedder.model_id, "today": today_label, "suites": {}}
    result["training_scores"] = {label: train_score(label, None) for label in grid}
    chosen = max(grid, key=lambda label: (result["training_scores"][label], label == today_label))
    result["chosen"] = chosen
    result["chosen_changes"] = str(grid[chosen].diff(today))
    for name in studies:
        heldout: dict[str, float] = {}
        choices = []
        for part, train, test in parts[name]:
            pick = max(grid, key=lambda label: (train_score(label, (name, train)), label == today_label))
            choices.append({"part": part, "choice": pick, "queries": len(test)})
            heldout.update({q: per_query[name, pick][q] for q in test})
        base = {q: per_query[name, today_label][q] for q in heldout}
        final = {q: per_query[name, chosen][q] for q in heldout}
        result["suites"][name] = {
            "queries": len(heldout),
            "today": sum(base.values()) / len(base),
            "heldout_choice": sum(heldout.values()) / len(heldout),
            "chosen_default": sum(final.values()) / len(final),
            "choices": choices,
            "heldout_choice_vs_today": paired_comparison(base, heldout),
            "per_query": {"today": base, "heldout_choice": heldout, "chosen_default": final},
            "candidates_on_all_queries": {label: mean(name, label, list(heldout)) for label in grid},
        }
    print(f"default embedder: {embedder.model_id}; today's default: {today_label}")
    print(f"chosen on every suite's training side: {chosen} ({result['chosen_changes'] or 'no change'})")
    print(
        f"{'suite':<9} {'n':>4} {'today':>8} {'held-out choice':>16} {'Δ':>8} {'p(t)':>7} {'p(F)':>7}  W/T/L  choices"
    )
    for name, r in result["suites"].items():
        c = r["heldout_choice_vs_today"]
        picks = sorted({ch["choice"] for ch in r["choices"]})
        print(
            f"{name:<9} {r['queries']:>4} {r['today']:>8.4f} {r['heldout_choice']:>16.4f} {c['delta']:>+8.4f} "
            f"{c['p_ttest']:>7.3g} {c['p_fisher']:>7.3g}  {c['wins']}/{c['ties']}/{c['losses']}  {', '.join(picks)}"
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"{'-'.join(args.suites)}.json"
        path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How fast is re-fusing recorded traces (every fusion method, and ``fusion=learned``) and
re-running the BM25 lists under other lexical knobs (:func:`qmdlab.pipeline.rerun_bm25.rerun_bm25`)?

Usage::

    .venv/bin/python experiments/refuse_timing/run.py SUITE LEARNED_DIR [--repeats 7]

``SUITE`` must be recorded already (``qmdlab eval SUITE --no-expand --no-rerank``) and
``LEARNED_DIR`` written by ``qmdlab tune SUITE --no-expand --no-rerank --learn --out LEARNED_DIR``.
Prints the median milliseconds of :meth:`qmdlab.eval.study.Study.final` (the slider path: fuse,
candidates, blend, finish) for the whole suite per method, and of one rerun_bm25 of all BM25 lists
(per query). The machine is shared: report ``uptime`` with the numbers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm up (imports, model load)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite")
    ap.add_argument("learned_dir")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)

    from qmdlab.eval.learn import suite_docs
    from qmdlab.eval.record import load_recorded, recorded
    from qmdlab.eval.study import Study
    from qmdlab.eval.suites import get_suite
    from qmdlab.pipeline.config import FUSION_METHODS, PipelineConfig
    from qmdlab.pipeline.rerun_bm25 import rerun_bm25
    from qmdlab.store import Index

    suite = get_suite(args.suite)
    learned = PipelineConfig.from_yaml(Path(args.learned_dir) / "config.yaml")
    want = learned.replace(fusion="qmd_rrf", learned_model="", limit=100)
    rec = next(
        (
            r
            for r in recorded(suite)
            if r.config.replace(limit=100) == want.replace(learned_prior=r.config.learned_prior)
        ),
        None,
    )
    if rec is None:
        raise SystemExit(f"no recording of {suite.name} with the learned config's base; run qmdlab eval first")
    got = load_recorded(suite, rec.key)
    study = Study(got.trace, got.qrels, config=got.config, docs=suite_docs(suite))
    n = len(study.qids)
    print(f"{suite.name}: {n} queries, recording {rec.key}")
    print("| method | ms per re-fusion of all queries | ms per query |")
    print("|---|---|---|")
    for m in (*FUSION_METHODS, "learned"):
        cfg = learned if m == "learned" else got.config.replace(fusion=m)
        ms = _median_ms(lambda cfg=cfg: study.final(cfg), args.repeats)
        print(f"| {m} | {ms:.1f} | {ms / n:.2f} |")
    idx = Index.open(suite.workdir() / "index")
    lex = got.config.replace(bm25_weight_title=2.0)
    ms = _median_ms(lambda: rerun_bm25(study.trace.lists, idx, lex), args.repeats)
    print(f"| rerun_bm25 (all BM25 lists re-run, title weight 2) | {ms:.1f} | {ms / n:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

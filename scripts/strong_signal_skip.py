"""Measure the strong-signal skip on the default suite (issue 19).

Only the queries whose BM25 probe is strong differ between skip on and skip off, so those are run both
ways (default model preset's expander, no rerank); every other query is identical in both
configurations, so the effect on the suite mean is the sum of their differences over all queries.

Usage: ``PYTHONPATH=. python scripts/strong_signal_skip.py QIDS_FILE`` where QIDS_FILE lists the strong
queries one per line (the ``probe`` notes that start with "strong signal" in a recorded trace, e.g. of
``qmdlab eval default --no-expand --no-rerank --out DIR``: ``DIR/traces/notes.parquet``).
"""
import sys, time, json
import polars as pl
from qmdlab.eval.suites import get_suite
from qmdlab.eval.record import open_lab, judged_queries, suite_config
from qmdlab.eval.metrics import per_query
from qmdlab.models import load_models
from qmdlab.pipeline.config import PipelineConfig

suite = get_suite("default")
models = load_models(None, rerank="none")
cfg = suite_config(suite).replace(rerank=False, limit=100)
lab = open_lab(suite, models, cfg, progress=False, log=lambda m: None)
queries = judged_queries(suite)
qrels = suite.qrels_docnos()
strong = [l.strip() for l in open(sys.argv[1])]
rows = []
for r in queries.filter(pl.col("qid").is_in(strong)).iter_rows(named=True):
    t0 = time.perf_counter()
    on = lab.query(r["query"], intent=r.get("intent") or None, qid=r["qid"])
    off = lab.query(r["query"], intent=r.get("intent") or None, qid=r["qid"], strong_signal=False)
    qr = qrels.filter(pl.col("qid") == r["qid"])
    s_on = per_query(on.final.rename({"final_rank": "rank"}), qr, ["ndcg@10"])["ndcg@10"].to_list()
    s_off = per_query(off.final.rename({"final_rank": "rank"}), qr, ["ndcg@10"])["ndcg@10"].to_list()
    kept = off.expansions.filter(pl.col("kept")).height
    rows.append({"qid": r["qid"], "on": s_on[0] if s_on else 0.0, "off": s_off[0] if s_off else 0.0,
                 "expansions_kept": kept, "s": round(time.perf_counter() - t0, 1)})
    print(json.dumps(rows[-1]), flush=True)
df = pl.DataFrame(rows)
n = queries.height
print(f"strong queries: {df.height} of {n}; mean over them: on {df['on'].mean():.4f} off {df['off'].mean():.4f}; "
      f"effect on the {n}-query mean nDCG@10 (on - off): {(df['on'].sum() - df['off'].sum()) / n:+.4f}; "
      f"W/T/L {int((df['on'] > df['off']).sum())}/{int((df['on'] == df['off']).sum())}/{int((df['on'] < df['off']).sum())}")

"""scripts/compare_runs.py: equal eval outputs pass, a changed score, rank or metric fails."""

import importlib.util
import json
from pathlib import Path

import polars as pl

SPEC = importlib.util.spec_from_file_location("compare_runs", Path(__file__).parents[2] / "scripts" / "compare_runs.py")
compare_runs = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(compare_runs)


def _out(d: Path, score: float = 0.5, ndcg: float = 0.25, rank_b: int = 2) -> Path:
    d.mkdir()
    (d / "qmdlab.trec").write_text(f"1 Q0 a 1 0.900000000 qmdlab\n1 Q0 b {rank_b} {score:.9f} qmdlab\n")
    (d / "metrics.json").write_text(json.dumps({"metrics": {"ndcg@10": ndcg}, "timings": {"total_s": 3.0}}))
    pl.DataFrame({"qid": ["1"], "metric": ["ndcg@10"], "value": [ndcg]}).write_parquet(d / "per_query.parquet")
    return d


def test_same_outputs_pass_and_timings_are_ignored(tmp_path):
    a = _out(tmp_path / "a")
    b = _out(tmp_path / "b")
    (b / "metrics.json").write_text(json.dumps({"metrics": {"ndcg@10": 0.25}, "timings": {"total_s": 9.0}}))
    assert compare_runs.main([str(a), str(b)]) == 0


def test_a_score_rank_or_metric_change_fails(tmp_path):
    a = _out(tmp_path / "a")
    assert compare_runs.main([str(a), str(_out(tmp_path / "score", score=0.500001))]) == 1
    assert compare_runs.main([str(a), str(_out(tmp_path / "rank", rank_b=3))]) == 1
    assert compare_runs.main([str(a), str(_out(tmp_path / "metric", ndcg=0.25 + 1e-8))]) == 1
    # within the tolerance asked for
    assert compare_runs.main([str(a), str(_out(tmp_path / "tol", ndcg=0.25 + 1e-8)), "--tol", "1e-6"]) == 0

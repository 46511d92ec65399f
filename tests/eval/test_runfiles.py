"""TREC run files: one whitespace-free run tag, so trec_eval and ranx read every line."""

from __future__ import annotations

import polars as pl

from qmdlab.eval.runfiles import write_trec_run


def test_a_run_name_with_spaces_is_written_as_one_token(tmp_path):
    final = pl.DataFrame(
        {"qid": ["1", "1"], "docno": ["c/a.md", "c/b.md"], "final_rank": [1, 2], "final_score": [1.0, 1.0]}
    )
    write_trec_run(final, tmp_path / "r.trec", "fine-tuned MiniLM + learned fusion", lambda d: d[2:-3])
    lines = (tmp_path / "r.trec").read_text().splitlines()
    assert [ln.split() for ln in lines] == [
        ["1", "Q0", "a", "1", "1.000000000", "fine-tuned_MiniLM_+_learned_fusion"],
        ["1", "Q0", "b", "2", "0.999999999", "fine-tuned_MiniLM_+_learned_fusion"],
    ]

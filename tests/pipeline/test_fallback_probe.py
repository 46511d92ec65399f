"""The min-score threshold and fallback probe: when no result reaches ``min_score``, at
most ``fallback_max`` results within ``min_score_fallback`` below it are kept, and the trace says so."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.models.base import ModelSet
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.finish import finish
from qmdlab.pipeline.lab import Lab
from qmdlab.store import Index


def _final(scores):
    n = len(scores)
    return pl.DataFrame(
        {
            "qid": ["q"] * n,
            "docno": [f"d{i}" for i in range(n)],
            "final_score": scores,
            "final_rank": list(range(1, n + 1)),
        }
    )


def test_filter_closed_form():
    f = _final([0.55, 0.5, 0.45, 0.42, 0.41, 0.3])
    assert finish(f, PipelineConfig(min_score=0.6)).height == 0  # off: nothing
    probe = finish(f, PipelineConfig(min_score=0.6, min_score_fallback=0.2))
    assert probe["docno"].to_list() == ["d0", "d1", "d2"]  # at most 3 of the 5 above 0.4
    narrow = finish(f, PipelineConfig(min_score=0.6, min_score_fallback=0.12, fallback_max=5))
    assert narrow["docno"].to_list() == ["d0", "d1"]  # only 0.55 and 0.5 reach 0.48
    # a query that has a result above the threshold is not probed: the rows below stay out
    assert finish(f, PipelineConfig(min_score=0.5, min_score_fallback=0.2))["docno"].to_list() == ["d0", "d1"]
    out = finish(f, PipelineConfig(min_score=0.6, min_score_fallback=0.2))
    assert out["final_rank"].to_list() == [1, 2, 3]


def test_options_validate_and_stay_out_of_the_cache_key():
    assert "min_score_fallback" not in PipelineConfig().to_dict() and "fallback_max" not in PipelineConfig().to_dict()
    assert PipelineConfig(min_score_fallback=0.2).to_dict()["min_score_fallback"] == 0.2
    from qmdlab.errors import ConfigError

    with pytest.raises(ConfigError, match="min_score_fallback"):
        PipelineConfig(min_score_fallback=-0.1)


def test_lab_notes_the_fallback(tmp_path):
    root = tmp_path / "kb"
    root.mkdir()
    (root / "a.md").write_text("# Alpha\n\nbeta gamma\n", encoding="utf-8")
    (root / "b.md").write_text("# Beta\n\nbeta beta delta\n", encoding="utf-8")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("kb", root)
    idx.update()
    try:
        lab = Lab(idx, ModelSet(None, None, None), PipelineConfig(expand=False, rerank=False, vector=False))
        top, second = lab.query("beta").final.sort("final_rank")["final_score"].to_list()
        strict = lab.query("beta", min_score=top + 0.1)
        assert strict.final.height == 0
        probed = lab.query("beta", min_score=top + 0.1, min_score_fallback=top + 0.1 - second + 1e-9)
        assert probed.final["final_score"].to_list() == [top, second]
        one = lab.query("beta", min_score=top + 0.1, min_score_fallback=top + 0.1 - second + 1e-9, fallback_max=1)
        assert one.final["final_score"].to_list() == [top]
        notes = " ".join(probed.notes.filter(pl.col("stage") == "finish")["message"].to_list())
        assert f"no result reached min_score {top + 0.1:g}: the fallback probe" in notes and "kept 2" in notes
    finally:
        idx.close()


def test_query_cli_flag(tmp_path):
    import json

    from click.testing import CliRunner

    from qmdlab.cli import cli

    root = tmp_path / "kb"
    root.mkdir()
    (root / "a.md").write_text("# Alpha\n\nbeta gamma\n", encoding="utf-8")
    runner = CliRunner()
    idx = str(tmp_path / "idx")
    assert runner.invoke(cli, ["--index", idx, "collection", "add", str(root), "--name", "kb"]).exit_code == 0
    base = ["--index", idx, "query", "beta", "--preset", "fake", "--no-rerank", "--no-expand", "--min-score", "1.5"]
    none = runner.invoke(cli, [*base, "--format", "json"])
    assert none.exit_code == 0 and json.loads(none.stdout) == []
    res = runner.invoke(cli, [*base, "--min-score-fallback", "1.5", "--trace-json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert [r["file"] for r in data["results"]] == ["kb/a.md"]
    assert any("fallback probe" in n["message"] for n in data["notes"])

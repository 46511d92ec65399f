"""One explain JSON: the MCP ``query`` tool's ``stages`` are ``qmdlab query --json``'s ``explain``.

Both front ends call :func:`qmdlab.pipeline.explain.result_explain`; this test runs one query
through the MCP engine (real index, keyword-fake embedder, rule expander, table reranker) and
compares every result's ``stages`` with ``to_json`` of the very trace the engine ran.
"""
from __future__ import annotations

import pytest

from qmdlab.mcp_server.engine import Engine
from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander, TableReranker, term_overlap
from qmdlab.pipeline.explain import to_json

from tests.pipeline.conftest import build_index

RULES = {"git rebase": [("lex", "rebase squash"), ("vec", "rebase branch")]}


def test_mcp_stages_are_the_cli_explain_block(tmp_path, qmdlab_home):
    idx, emb = build_index(tmp_path)
    engine = Engine(idx, models=ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=term_overlap)))
    seen = {}
    run = engine._run

    def keep(*args, **kwargs):
        seen["trace"] = run(*args, **kwargs)
        return seen["trace"]

    engine._run = keep
    _, data = engine.query("git rebase", limit=3, explain=True)
    cli = to_json(seen["trace"])
    assert [r["docno"] for r in data["results"]] == [r["file"] for r in cli["results"]]
    assert len(data["results"]) >= 2
    for mcp_row, cli_row in zip(data["results"], cli["results"]):
        assert mcp_row["stages"] == cli_row["explain"]
        st = mcp_row["stages"]
        assert st["final_score"] == mcp_row["score"] and st["lists"]
        assert sum(x["contribution"] for x in st["lists"]) + st["bonus"] == pytest.approx(st["fused_score"], abs=1e-12)
        assert st["n_lists"] == len(st["lists"]) and st["rerank_chunk_id"] is not None
    assert data["expansions"] == cli["expansions"] and data["timings"] == cli["timings"]
    _, plain = engine.query("git rebase", limit=3)
    assert "stages" not in plain["results"][0] and "expansions" not in plain

"""One explain JSON: the MCP ``query`` tool's ``stages`` are ``qmdlab query --json``'s ``explain``.

Both front ends call :func:`qmdlab.pipeline.explain.result_explain`; this test runs one query
through the MCP backend (real index, keyword-fake embedder, rule expander, table reranker) and
compares every result's ``stages`` with ``to_json`` of the very trace the backend ran.
"""

from __future__ import annotations

import pytest

from qmdlab.mcp_server.backend import McpBackend
from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander, TableReranker, term_overlap
from qmdlab.pipeline.explain import to_json
from tests.pipeline.conftest import build_index

RULES = {"git rebase": [("lex", "rebase squash"), ("vec", "rebase branch")]}


def test_mcp_stages_are_the_cli_explain_block(tmp_path, qmdlab_home):
    idx, emb = build_index(tmp_path)
    backend = McpBackend(idx, models=ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=term_overlap)))
    seen = {}
    run = backend._run

    def keep(*args, **kwargs):
        seen["trace"] = run(*args, **kwargs)
        return seen["trace"]

    backend._run = keep
    _, data = backend.query("git rebase", limit=3, explain=True)
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
    _, plain = backend.query("git rebase", limit=3)
    assert "stages" not in plain["results"][0] and "expansions" not in plain


def test_mcp_explain_uses_the_config_the_query_ran_with(tmp_path, qmdlab_home, monkeypatch):
    """The backend hands ``result_explain`` the config of the query (its own plus the request's options),
    as `qmdlab query --json` hands it the flags' config: the stages are ``to_json(trace, cfg)``'s explain."""
    from qmdlab.pipeline import explain as explain_mod
    from qmdlab.pipeline.config import PipelineConfig

    idx, emb = build_index(tmp_path)
    base = PipelineConfig(weight_original_phrase=1.5, weight_original_like=0.5, fusion="rrf")
    backend = McpBackend(
        idx, config=base, models=ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=term_overlap))
    )
    seen, given = {}, []
    run, real = backend._run, explain_mod.result_explain

    def keep(*args, **kwargs):
        seen["trace"] = run(*args, **kwargs)
        return seen["trace"]

    def spy(trace, config=None):
        given.append(config)
        return real(trace, config)

    backend._run = keep
    monkeypatch.setattr(explain_mod, "result_explain", spy)
    _, data = backend.query("git rebase", limit=3, candidateLimit=20, preferTags=["search"], explain=True)
    cfg = base.replace(limit=3, min_score=0.0, candidate_limit=20, rerank=True, tags=("search",), tag_lift=3)
    assert given[0] == cfg and seen["trace"].config == cfg.to_dict()
    cli = to_json(seen["trace"], cfg)
    assert [r["docno"] for r in data["results"]] == [r["file"] for r in cli["results"]]
    assert {x["source"] for r in data["results"] for x in r["stages"]["lists"]} >= {"fts", "like"}
    for mcp_row, cli_row in zip(data["results"], cli["results"]):
        assert mcp_row["stages"] == cli_row["explain"]

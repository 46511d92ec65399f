"""The MCP ``query`` tool's tag options mirror ``qmdlab query``: ``tags`` is ``--tag`` (a filter,
every tag required), ``preferTags``/``tagLift`` are ``--prefer-tag``/``--tag-lift`` (the rank-lift,
3 places unless given). Same index, same fake models, same results and scores."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.mcp_server.backend import McpBackend

TEXT = "cook pasta bread zebra"


@pytest.fixture
def backend(mcp_env, monkeypatch):
    for key, value in mcp_env.env.items():
        monkeypatch.setenv(key, value)
    eng = McpBackend(str(mcp_env.index_dir), preset="fake")
    yield eng
    eng.index.close()


def _cli(mcp_env, *flags):
    res = CliRunner().invoke(
        cli,
        [
            "--index",
            str(mcp_env.index_dir),
            "query",
            TEXT,
            "-c",
            "notes",
            "-n",
            "10",
            "--no-rerank",
            "--preset",
            "fake",
            "--json",
            *flags,
        ],
    )
    assert res.exit_code == 0, res.output
    return [(r["file"], r["score"]) for r in json.loads(res.stdout)]  # qmd's rows, as MCP's


def _mcp(backend, **kwargs):
    _, data = backend.query(TEXT, collections=["notes"], limit=10, rerank=False, **kwargs)
    return [(r["file"], r["score"]) for r in data["results"]], data


def test_query_tags_and_prefer_tags_are_the_cli_flags(backend, mcp_env):
    plain, data = _mcp(backend)
    assert plain == _cli(mcp_env)
    docs = [d.removeprefix("qmd://") for d, _ in plain]
    assert "notes/guide.md" in docs and docs[0] != "notes/guide.md" and len(docs) >= 3
    assert data["tags"] == [] and data["preferTags"] == [] and data["tagLift"] == 0

    only, data = _mcp(backend, tags=["alpha"])  # guide.md is the only note tagged alpha
    assert [d for d, _ in only] == ["qmd://notes/guide.md"] and only == _cli(mcp_env, "--tag", "alpha")
    assert data["tags"] == ["alpha"]

    lifted, data = _mcp(backend, preferTags=["alpha"])
    assert lifted == _cli(mcp_env, "--prefer-tag", "alpha") and data["tagLift"] == 3
    assert sorted(lifted) == sorted(plain)  # a lift re-orders, never filters

    far, data = _mcp(backend, preferTags=["alpha"], tagLift=10)
    assert far == _cli(mcp_env, "--prefer-tag", "alpha", "--tag-lift", "10")
    assert far[0][0] == "qmd://notes/guide.md" and data["preferTags"] == ["alpha"] and data["tagLift"] == 10

    none, _ = _mcp(backend, tags=["alpha", "nosuchtag"])  # every tag is required
    assert none == [] == _cli(mcp_env, "--tag", "alpha", "--tag", "nosuchtag")


def test_query_request_takes_the_tag_options():
    from pydantic import ValidationError

    from qmdlab.mcp_server.server import QueryRequest

    req = QueryRequest.model_validate({"query": "x", "tags": ["a"], "preferTags": ["b"], "tagLift": 2})
    kw = req.backend_kwargs()
    assert (kw["tags"], kw["preferTags"], kw["tagLift"]) == (["a"], ["b"], 2)
    with pytest.raises(ValidationError):
        QueryRequest.model_validate({"query": "x", "tagLift": -1})

"""Per-preset stage defaults: the offline preset runs BM25 + vectors + fusion, qmd (and fake) the whole
pipeline; flags and the config turn a stage on or off; the first stderr line and a ``stages`` note say
which stages ran and why — the same rule in the CLI, the MCP backend and the Python API."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.stages import STAGE_DEFAULTS, plan_stages

FAKES = {
    "QMDLAB_EMBED_MODEL": "fake:keyword",
    "QMDLAB_EXPAND_MODEL": "fake:rules",
    "QMDLAB_RERANK_MODEL": "fake:overlap",
}


@pytest.fixture
def small(small_index_no_vectors):
    """The five-document index embedded with the fake preset's embedder (the one the CLI loads)."""
    from qmdlab.models import load_models

    idx, _ = small_index_no_vectors
    emb = load_models("fake", expand="none", rerank="none").embedder
    todo = idx.chunks_needing_vectors(emb.fingerprint)
    idx.store_vectors(
        todo["chunk_id"].to_list(),
        emb.embed_documents(list(zip(todo["title"].to_list(), todo["text"].to_list()))),
        emb.fingerprint,
    )
    return idx


@pytest.fixture
def index_dir(small):
    return str(small.dir)


@pytest.fixture
def offline_on_fakes(monkeypatch):
    """The offline preset's stage defaults with the fake models standing in for its weights."""
    for k, v in FAKES.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("QMDLAB_PRESET", raising=False)


def test_the_rule_flag_then_config_then_preset():
    assert STAGE_DEFAULTS["offline"] == {"expand": False, "rerank": False}
    assert STAGE_DEFAULTS["qmd"] == {"expand": True, "rerank": True}
    cfg, plan = plan_stages(PipelineConfig(), "offline")
    assert (cfg.expand, cfg.rerank) == (False, False) and plan.source == {"expand": "preset", "rerank": "preset"}
    cfg, _ = plan_stages(PipelineConfig(), "qmd")
    assert (cfg.expand, cfg.rerank) == (True, True)
    # a config that names the option wins over the preset, a flag over both
    named = PipelineConfig.from_dict({"expand": True, "rerank": False})
    cfg, plan = plan_stages(named, "offline")
    assert (cfg.expand, cfg.rerank) == (True, False) and plan.source == {"expand": "config", "rerank": "config"}
    cfg, plan = plan_stages(named, "qmd", expand=False, rerank=True)
    assert (cfg.expand, cfg.rerank) == (False, True) and plan.source == {"expand": "flag", "rerank": "flag"}
    # a config that only changed other options leaves the preset's choice
    cfg, _ = plan_stages(PipelineConfig.from_dict({"rrf_k": 30}).replace(limit=5), "offline")
    assert (cfg.expand, cfg.rerank, cfg.rrf_k, cfg.limit) == (False, False, 30, 5)


def test_offline_query_runs_retrieval_only_and_says_why(index_dir, offline_on_fakes):
    res = CliRunner().invoke(cli, ["--index", index_dir, "query", "git rebase", "--preset", "offline", "--trace-json"])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == (
        "stages: bm25+vector+fusion; expansion off (offline preset default; --expand turns it on), "
        "rerank off (offline preset default; --rerank turns it on)"
    )
    data = json.loads(res.stdout)
    assert data["notes"][0] == {"stage": "stages", "message": res.stderr.splitlines()[0]}
    assert data["expansions"] == [] and all(r["explain"]["rerank_score"] is None for r in data["results"])


def test_offline_query_with_expand_and_rerank_flags(index_dir, offline_on_fakes):
    res = CliRunner().invoke(
        cli,
        [
            "--index",
            index_dir,
            "query",
            "how do i rebase git",
            "--preset",
            "offline",
            "--expand",
            "--rerank",
            "--no-strong-signal",
            "--trace-json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == (
        "stages: expansion+bm25+vector+fusion+rerank+blend; expansion on (--expand), rerank on (--rerank)"
    )
    data = json.loads(res.stdout)
    assert any(n["stage"] == "expand" and n["message"].endswith("lines kept") for n in data["notes"])  # expander asked
    assert any(r["explain"]["rerank_score"] is not None for r in data["results"])


def test_config_file_turns_a_stage_on_and_no_flag_turns_it_off(index_dir, offline_on_fakes, tmp_path):
    cfg = tmp_path / "p.yaml"
    cfg.write_text("rerank: true\n")
    res = CliRunner().invoke(
        cli,
        ["--index", index_dir, "query", "git rebase", "--preset", "offline", "--config", str(cfg), "--format", "files"],
    )
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == (
        "stages: bm25+vector+fusion+rerank+blend; expansion off (offline preset default; --expand turns it on), "
        "rerank on (config; --no-rerank turns it off)"
    )
    res = CliRunner().invoke(
        cli,
        [
            "--index",
            index_dir,
            "query",
            "git rebase",
            "--preset",
            "offline",
            "--config",
            str(cfg),
            "--no-rerank",
            "--format",
            "files",
        ],
    )
    assert "rerank off (--no-rerank)" in res.stderr.splitlines()[0]


def test_qmd_style_preset_runs_every_stage(index_dir, monkeypatch):
    monkeypatch.delenv("QMDLAB_PRESET", raising=False)
    res = CliRunner().invoke(
        cli,
        [
            "--index",
            index_dir,
            "query",
            "how do i rebase git",
            "--preset",
            "fake",
            "--no-strong-signal",
            "--format",
            "files",
        ],
    )
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0].startswith(
        "stages: expansion+bm25+vector+fusion+rerank+blend; expansion on (fake preset default; --no-expand turns it "
        "off), rerank on (fake preset default; --no-rerank turns it off)"
    )


def test_a_stage_on_but_not_run_says_why(index_dir, offline_on_fakes, monkeypatch):
    monkeypatch.setenv("QMDLAB_RERANK_MODEL", "none")  # rerank asked for, but the role has no model
    res = CliRunner().invoke(
        cli, ["--index", index_dir, "query", "git rebase", "--preset", "offline", "--rerank", "--format", "files"]
    )
    assert res.exit_code == 0, res.output
    line = res.stderr.splitlines()[0]
    assert (
        line.startswith("stages: bm25+vector+fusion; ") and "rerank on (--rerank) but not run for this query: " in line
    )


def test_python_api_and_mcp_follow_the_same_rule(small, offline_on_fakes):
    import qmdlab
    from qmdlab.mcp_server.backend import McpBackend

    idx = small
    trace = qmdlab.query("git rebase", index=idx, preset="offline")
    assert trace.notes_for("stages")[0].startswith("stages: bm25+vector+fusion; expansion off (offline preset")
    assert trace.rerank.height == 0
    trace = qmdlab.query("git rebase", index=idx, preset="offline", rerank=True)
    assert trace.rerank.height > 0 and "rerank on (--rerank)" in trace.notes_for("stages")[0]
    backend = McpBackend(idx, preset="offline")
    _, data = backend.query("git rebase", limit=3)
    assert data["notes"][0]["stage"] == "stages" and "rerank off (offline preset default" in data["notes"][0]["message"]
    _, data = backend.query("git rebase", limit=3, rerank=True)
    assert "rerank on (--rerank)" in data["notes"][0]["message"]


# -- the model-role overrides: one option, on every verb that loads the role ---------------------
VERBS_ROLES = {
    "query": ("embed", "expand", "rerank"),
    "vsearch": ("embed",),
    "embed": ("embed",),
    "eval": ("embed", "expand", "rerank"),
    "tune": ("embed", "expand", "rerank"),
    "mcp": ("embed", "expand", "rerank"),
    "models": ("embed", "expand", "rerank"),
    "pull": ("embed", "expand", "rerank"),
}


@pytest.mark.parametrize("verb", sorted(VERBS_ROLES))
def test_every_verb_that_loads_a_role_takes_its_override(verb):
    ctx = cli.make_context("qmdlab", [verb])
    command = cli.get_command(ctx, verb)
    options = {o for p in command.params for o in p.opts}
    assert {f"--{r}-model" for r in VERBS_ROLES[verb]} <= options


def test_query_role_overrides_are_applied(index_dir, monkeypatch):
    monkeypatch.delenv("QMDLAB_PRESET", raising=False)
    argv = ["--index", index_dir, "query", "how do i rebase git", "--preset", "fake", "--no-strong-signal"]
    res = CliRunner().invoke(cli, [*argv, "--trace-json"])
    assert res.exit_code == 0, res.output
    assert any(r["explain"]["rerank_score"] is not None for r in json.loads(res.stdout)["results"])
    # the fake preset reranks; with its rerank role overridden to none the stage has no model
    res = CliRunner().invoke(cli, [*argv, "--rerank-model", "none", "--expand-model", "fake:rules", "--trace-json"])
    assert res.exit_code == 0, res.output
    line = res.stderr.splitlines()[0]
    assert "rerank on (fake preset default; --no-rerank turns it off) but not run for this query" in line
    assert all(r["explain"]["rerank_score"] is None for r in json.loads(res.stdout)["results"])
    res = CliRunner().invoke(cli, [*argv, "--embed-model", "none", "--format", "files"])
    assert res.exit_code == 0, res.output
    assert "vectors not run for this query" in res.stderr.splitlines()[0]
    res = CliRunner().invoke(cli, [*argv, "--expand-model", "fake:overlap"])
    assert res.exit_code != 0 and "'fake:overlap' is not a fake expand model" in res.output


def test_mcp_serves_with_the_role_overrides(index_dir, monkeypatch, require):
    require.module("mcp", "the MCP server needs the 'mcp' extra")
    from qmdlab.mcp_server import stdio as server

    served = []
    monkeypatch.setattr(server, "serve_stdio", served.append)
    res = CliRunner().invoke(cli, ["--index", index_dir, "mcp", "--preset", "fake", "--rerank-model", "none"])
    assert res.exit_code == 0, res.output
    (backend,) = served
    assert backend.models.reranker is None and backend.models.expander is not None
    _, data = backend.query("how do i rebase git", limit=3)
    assert "rerank on (fake preset default" in data["notes"][0]["message"]

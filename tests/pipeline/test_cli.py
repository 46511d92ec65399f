"""``qmdlab query`` over the five-document index, with the fake model preset."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli


@pytest.fixture
def index_dir(small_index):
    idx, _ = small_index
    return str(idx.dir)


def run(*args):
    res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return res


def test_plain_query_and_explain(index_dir):
    res = run("--index", index_dir, "query", "git rebase", "--preset", "fake", "--explain", "-n", "3")
    assert res.exit_code == 0, res.output
    out = res.output
    assert out.index("notes/git-rebase.md") < out.index("notes/git-merge.md")
    assert "#1 notes/git-rebase.md" in out and "list 0 fts/original" in out
    assert "notes:" in out and "[probe]" in out


def test_json_has_explanations_and_notes(index_dir):
    res = run(
        "--index",
        index_dir,
        "query",
        "git rebase",
        "--preset",
        "fake",
        "--trace-json",
        "--no-rerank",
        "--fusion",
        "rrf",
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)  # stderr starts with the stages line
    top = data["results"][0]
    assert top["file"] == "notes/git-rebase.md" and top["rank"] == 1 and top["line"] >= 1
    contrib = sum(x["contribution"] for x in top["explain"]["lists"])
    assert contrib == pytest.approx(top["explain"]["fused_score"] - top["explain"]["bonus"], abs=1e-12)
    assert {"stage": "rerank", "message": "rerank disabled: fusion order kept"} in data["notes"]


def test_query_document_and_config_file(index_dir, tmp_path):
    cfg = tmp_path / "p.yaml"
    cfg.write_text("limit: 1\nblend: none\n")
    res = run(
        "--index",
        index_dir,
        "query",
        "lex: pasta\nvec: cook",
        "--preset",
        "fake",
        "--config",
        str(cfg),
        "--format",
        "files",
    )
    assert res.exit_code == 0, res.output
    assert res.stdout.strip().splitlines() == [res.stdout.strip()] and "notes/pasta.md" in res.stdout
    assert res.stderr.startswith("stages: ")  # which stages ran and why, on stderr only


def test_bad_config_is_one_line_error(index_dir, tmp_path):
    cfg = tmp_path / "p.yaml"
    cfg.write_text("colour: red\n")
    res = CliRunner().invoke(cli, ["--index", index_dir, "query", "x", "--preset", "fake", "--config", str(cfg)])
    assert res.exit_code == 1
    assert "unknown pipeline option 'colour'" in res.output

"""The index verbs through click's CliRunner against ``qmdlab.cli.cli``."""

from __future__ import annotations

import json

import pytest

from .conftest import snapshot


@pytest.fixture
def run(cli_run):
    return cli_run


def test_collection_lifecycle(run, notes):
    before = snapshot(notes)
    out = run("collection", "add", str(notes), "--name", "kb").output
    assert "added collection kb" in out and "4 new" in out
    assert run("collection", "list").output.startswith("kb\t4 docs\t")
    assert "kb/git.md\t#" in run("ls", "--all").output
    assert run("ls", "kb").output.count("\n") == 4
    run("collection", "rename", "kb", "notes2")
    assert "notes2/git.md" in run("ls", "--all").output
    assert "0 new" in run("update").output
    run("collection", "remove", "notes2")
    assert run("ls").output.startswith("No collections found.")
    assert snapshot(notes) == before


def test_search_formats_filters_and_no_results(run, notes):
    run("collection", "add", str(notes), "--name", "kb", "--mask", "**/*.md")
    res = json.loads(run("search", "rebase squash", "--format", "json").output)
    assert res[0]["file"] == "qmd://kb/git.md" and res[0]["docid"].startswith("#")
    assert {"docid", "score", "file", "line", "title", "snippet"} <= set(res[0])  # qmd's keys, then qmdlab's
    assert res[0]["docno"] == "kb/git.md"
    assert run("search", "nothingmatcheszzz").output.strip() == "No results."
    assert run("search", 'NEAR( "*:^ AND').exit_code == 0
    assert run("search", "rebase", "--tag", "food").output.strip() == "No results."
    assert "kb/git.md" in run("search", "rebase", "--tag", "git", "--since", "2024-01-01").output
    assert run("search", "rebase", "--before", "2024-01-01").output.strip() == "No results."
    assert run("search", "rebase", "--min-score", "0.9999").output.strip() == "No results."
    assert "kb/git.md" in run("search", "git rebase", "--mode", "and", "--format", "files").output
    bad = run("search", "x", "--since", "yesterday", ok=False)
    assert bad.exit_code == 1 and "error: --since 'yesterday'" in bad.output
    bad = run("search", "x", "-c", "nope", ok=False)
    assert bad.exit_code == 1 and "unknown collection 'nope'" in bad.output


def test_search_msm_mode_and_min_match(run, notes):
    """`search --mode msm --min-match N`: or-ranking, documents matching fewer than N of the terms dropped
    (a share below 1), the pipeline's bm25_mode/bm25_min_match through bm25_search's public API."""
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.search import bm25_search
    from qmdlab.store import Index

    run("collection", "add", str(notes), "--name", "kb")

    def files(*flags):
        out = run("search", "rebase pasta salt", "--format", "json", *flags).output
        return [] if out.strip() == "No results." else [r["docno"] for r in json.loads(out)]

    assert set(files()) == {"kb/git.md", "kb/cooking/pasta.md"}  # or: any term
    assert files("--mode", "msm", "--min-match", "2") == ["kb/cooking/pasta.md"]  # pasta + salt; git.md: rebase only
    assert set(files("--mode", "msm", "--min-match", "0.5")) == {"kb/git.md", "kb/cooking/pasta.md"}  # 1 of 3
    assert files("--mode", "msm", "--min-match", "3") == []
    assert set(files("--mode", "msm")) == set(
        files("--mode", "msm", "--min-match", str(PipelineConfig().bm25_min_match))
    )
    with Index.open(run.index_dir) as idx:
        direct = [h.docno for h in bm25_search(idx, "rebase pasta salt", mode="msm", min_match=2)]
    assert direct == files("--mode", "msm", "--min-match", "2")
    help_text = run("search", "--help").output
    assert "msm" in help_text and "--min-match" in help_text
    bad = run("search", "x", "--mode", "msm", "--min-match", "-1", ok=False)
    assert bad.exit_code == 1 and "--min-match" in bad.output


def test_get_ranges_and_suggestions(run, notes):
    run("collection", "add", str(notes), "--name", "kb")
    assert run("get", "kb/git.md:7:2", "--no-header").output == "# Rebasing\n\n"
    assert run("get", "git.md:7:1", "--line-numbers", "--no-header").output == "    7: # Rebasing\n"
    docid = json.loads(run("search", "rebase", "--format", "json").output)[0]["docid"]
    assert run("get", f"{docid}:9", "--no-header").output == "Use git rebase -i to squash commits.\n"
    miss = run("get", "kb/gti.md", ok=False)
    assert miss.exit_code == 1 and "did you mean kb/git.md" in miss.output
    assert "Traceback" not in miss.output


def test_multi_get_and_contexts(run, notes):
    run("collection", "add", str(notes), "--name", "kb")
    out = run("multi-get", "kb/cooking/*").output
    assert "File: cooking/pasta.md  #" in out and "File: cooking/soup.md  #" in out and "git" not in out
    out = run("multi-get", "kb/git.md,pasta.md", "--max-bytes", "60").output
    assert "[SKIPPED: File too large" in out and "Boil water" in out
    data = json.loads(run("multi-get", "kb/*.md", "--format", "json").output)
    assert {d["file"] for d in data} == {"git.md", "jp.md"}
    run("context", "add", "kb/cooking", "Recipes")
    assert run("context", "list").output == "kb/cooking\tRecipes\n"
    res = json.loads(run("search", "pasta", "--format", "json").output)
    assert res[0]["context"] == "Recipes"
    run("context", "rm", "kb/cooking")
    assert run("context", "list").output.strip() == "No contexts."


def test_status(run, notes):
    run("collection", "add", str(notes), "--name", "kb")
    st = json.loads(run("status", "--json").output)
    assert st["documents"] == 4 and st["chunks"] == 4 and st["vectors"] == {}
    assert "documents: 4 active" in run("status").output

"""CLI front ends of :mod:`qmdlab.search.navigate`: ``refs``, ``jump``, ``chunks`` and the heading
breadcrumbs on ``search`` results (issue 19 item 6)."""
from __future__ import annotations

import json

import pytest


GUIDE = ("# Guide\n\nThe guide.\n\n## Install\n\nRun it. See ops/run.md and [restart](ops/run.md#restart).\n\n"
         "### Linux\n\napt install zebra\n\n## Use\n\nUse zebra daily.\n")
RUN = "# Run\n\nStart it.\n\n## Restart\n\nsystemctl restart zebra\n"


@pytest.fixture
def run(tmp_path, cli_run):
    src = tmp_path / "notes"
    (src / "ops").mkdir(parents=True)
    (src / "guide.md").write_text(GUIDE, encoding="utf-8")
    (src / "ops" / "run.md").write_text(RUN, encoding="utf-8")
    (src / "long.md").write_text("# Long\n\n" + "\n".join(f"row {i} " + "y" * 70 for i in range(200)) + "\n",
                                 encoding="utf-8")
    cli_run("collection", "add", str(src), "--name", "kb")
    return cli_run


def test_refs_lists_numbered_references(run):
    out = run("refs", "kb/guide.md#guide/install").output.splitlines()
    assert out == ["  1. line 7: ops/run.md -> kb/ops/run.md",
                   "  2. line 7: ops/run.md#restart [restart] -> kb/ops/run.md#run/restart"]
    assert run("refs", "kb/guide.md#guide/use").output == "No cross-references.\n"
    data = json.loads(run("refs", "qmd://kb/guide.md", "--json").output)
    assert [d["docno"] for d in data] == ["kb/ops/run.md", "kb/ops/run.md"]


def test_jump_prints_the_target_section(run):
    out = run("jump", "kb/guide.md#guide/install", "restart").output
    assert out == ("kb/guide.md#guide/install -> kb/ops/run.md#run/restart (#"
                   + out.split("(#")[1].split(")")[0] + ") § Run > Restart lines 5-7\n\n## Restart\n\nsystemctl restart zebra\n")
    numbered = run("jump", "kb/guide.md#guide/install", "2", "--line-numbers").output.splitlines()
    assert numbered[2:] == ["5: ## Restart", "6: ", "7: systemctl restart zebra"]
    res = run("jump", "kb/guide.md#guide/install", "7", ok=False)
    assert res.exit_code == 1 and "reference 7 does not exist" in res.output


def test_chunks_previews_and_parent_backfill(run):
    out = run("chunks", "kb/long.md", "--chars", "40").output.splitlines()
    heads = [ln for ln in out if ln.startswith("chunk ")]
    assert len(heads) >= 3 and all("§ Long" in h for h in heads)
    previews = [ln for ln in out if ln.startswith("  ")]
    assert all(len(p) <= 42 and p.endswith("…") for p in previews)
    data = json.loads(run("chunks", "kb/long.md", "--json").output)
    second = data[1]
    out = run("chunks", "kb/long.md", "--id", str(second["chunk_id"]), "--parent", "section",
              "--max-chars", "1000").output.splitlines()
    assert out[0].startswith(f"kb/long.md chunk {second['chunk_id']} (lines {second['line_start']}-")
    marked = [ln for ln in out[2:] if ln.split(" ")[0].endswith("*")]
    assert marked and int(marked[0].split("*")[0]) == second["line_start"]
    res = run("chunks", "kb/long.md", "--parent", "section", ok=False)
    assert res.exit_code == 1 and "--parent needs exactly one --id" in res.output


def test_search_results_carry_breadcrumbs(run):
    out = run("search", "apt zebra", "-n", "1").output.splitlines()
    assert out[0].startswith("kb/guide.md:") and out[2] == "  § Guide > Install > Linux"
    md = run("search", "apt zebra", "-n", "1", "--md").output
    assert "· § Guide > Install > Linux" in md
    # json/csv/xml keep qmd's fields; --full shows whole documents, so no breadcrumb
    data = json.loads(run("search", "apt zebra", "-n", "1", "--json").output)
    assert set(data[0]) == {"docid", "score", "file", "line", "title", "context", "snippet"}
    assert run("search", "apt zebra", "--csv").output.splitlines()[0] == "docid,score,file,line,title,context,snippet"
    assert "§" not in run("search", "apt zebra", "-n", "1", "--full").output

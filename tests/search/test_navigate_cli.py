"""CLI front ends of :mod:`qmdlab.search.navigate`: ``refs``, ``jump``, ``chunks``, the heading
breadcrumbs and ``--context`` on ``search``/``query`` results and ``--full
--max-chars`` (item 7)."""

from __future__ import annotations

import json

import pytest

GUIDE = (
    "# Guide\n\nThe guide.\n\n## Install\n\nRun it. See ops/run.md and [restart](ops/run.md#restart).\n\n"
    "### Linux\n\napt install zebra\n\n## Use\n\nUse zebra daily.\n"
)
RUN = "# Run\n\nStart it.\n\n## Restart\n\nsystemctl restart zebra\n"


@pytest.fixture
def run(tmp_path, cli_run):
    src = tmp_path / "notes"
    (src / "ops").mkdir(parents=True)
    (src / "guide.md").write_text(GUIDE, encoding="utf-8")
    (src / "ops" / "run.md").write_text(RUN, encoding="utf-8")
    (src / "long.md").write_text(
        "# Long\n\n" + "\n".join(f"row {i} " + "y" * 70 for i in range(200)) + "\n", encoding="utf-8"
    )
    cli_run("collection", "add", str(src), "--name", "kb")
    return cli_run


def test_refs_lists_numbered_references(run):
    out = run("refs", "kb/guide.md#guide/install").output.splitlines()
    assert out == [
        "  1. line 7: ops/run.md -> kb/ops/run.md",
        "  2. line 7: ops/run.md#restart [restart] -> kb/ops/run.md#run/restart",
    ]
    assert run("refs", "kb/guide.md#guide/use").output == "No cross-references.\n"
    data = json.loads(run("refs", "qmd://kb/guide.md", "--json").output)
    assert [d["docno"] for d in data] == ["kb/ops/run.md", "kb/ops/run.md"]


def test_jump_prints_the_target_section(run):
    out = run("jump", "kb/guide.md#guide/install", "restart").output
    assert out == (
        "kb/guide.md#guide/install -> kb/ops/run.md#run/restart (#"
        + out.split("(#")[1].split(")")[0]
        + ") § Run > Restart lines 5-7\n\n## Restart\n\nsystemctl restart zebra\n"
    )
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
    out = run(
        "chunks", "kb/long.md", "--id", str(second["chunk_id"]), "--parent", "section", "--max-chars", "1000"
    ).output.splitlines()
    assert out[0].startswith(f"kb/long.md chunk {second['chunk_id']} (lines {second['line_start']}-")
    marked = [ln for ln in out[2:] if ln.split(" ")[0].endswith("*")]
    assert marked and int(marked[0].split("*")[0]) == second["line_start"]
    res = run("chunks", "kb/long.md", "--parent", "section", ok=False)
    assert res.exit_code == 1 and "--parent needs exactly one --id" in res.output


def test_search_results_carry_breadcrumbs(run):
    out = run("search", "apt zebra", "-n", "1").output.splitlines()
    assert out[0].startswith("kb/guide.md:") and out[2] == "  § Guide > Install > Linux"
    md = run("search", "apt zebra", "-n", "1", "--md").output
    assert "**section:** Guide > Install > Linux" in md
    # json carries qmd's keys and the breadcrumb; csv/xml keep qmd's fields; --full shows whole
    # documents, so no breadcrumb
    data = json.loads(run("search", "apt zebra", "-n", "1", "--json").output)
    assert set(data[0]) == {"docid", "score", "file", "line", "title", "snippet", "docno", "breadcrumb"}
    assert data[0]["breadcrumb"] == "Guide > Install > Linux"
    assert run("search", "apt zebra", "--csv").output.splitlines()[0] == "docid,score,file,title,context,line,snippet"
    assert "§" not in run("search", "apt zebra", "-n", "1", "--full").output


def _hit_block(out: str) -> list[str]:
    return out.split("\n\n")[0].splitlines()


def test_search_context_shows_parent_summary_and_siblings(run):
    """``--context``: the MCP hits' parent section and siblings, on the CLI."""
    lines = _hit_block(run("search", "daily", "-n", "1", "--context").output)
    assert lines[0].startswith("kb/guide.md:") and lines[1:5] == [
        "  Guide",
        "  § Guide > Use",
        "  parent: Guide — The guide.",
        "  siblings: Install",
    ]
    assert "parent:" not in run("search", "daily", "-n", "1").output  # opt-in
    md = run("search", "daily", "-n", "1", "--md", "--context").output
    assert "**parent:** Guide — The guide.\n**siblings:** Install\n" in md
    (hit,) = json.loads(run("search", "daily", "-n", "1", "--json", "--context").output)
    assert hit["parent"] == {"address": "guide", "title": "Guide", "summary": "The guide."}
    assert hit["siblings"] == [{"address": "guide/install", "title": "Install"}]
    # the same context as navigate.hit_context of the snippet's line (no logic of the CLI's own)
    from qmdlab.search.hit_context import hit_context
    from qmdlab.store import Index

    idx = Index.open(run.index_dir)
    try:
        want = hit_context(idx, hit["docno"], hit["line"]).as_dict()
    finally:
        idx.close()
    assert (hit["parent"], hit["siblings"]) == (want["parent"], want["siblings"])
    # --full keeps the hit's context; a format without room for it is refused
    full = _hit_block(run("search", "daily", "-n", "1", "--full", "--context").output)
    assert "  parent: Guide — The guide." in full and not any(ln.startswith("  §") for ln in full)
    res = run("search", "daily", "--csv", "--context", ok=False)
    assert res.exit_code == 1 and "--context shows in the cli, md and json formats, not csv" in res.output


def test_query_context_with_the_fake_preset(run):
    run("embed", "--preset", "fake", "--no-progress")
    args = ("query", "daily", "-n", "1", "--preset", "fake", "--no-rerank", "--context")
    lines = _hit_block(run(*args).stdout)
    assert lines[0].startswith("kb/guide.md:") and "  parent: Guide — The guide." in lines
    assert "  siblings: Install" in lines
    (hit,) = json.loads(run(*args, "--format", "json").stdout)
    assert hit["parent"]["address"] == "guide" and hit["siblings"] == [{"address": "guide/install", "title": "Install"}]
    res = run(*args, "--trace-json", ok=False)
    assert res.exit_code == 1 and "--trace-json prints the whole trace" in res.output


def test_full_max_chars_caps_whole_documents(run, tmp_path):
    """``--full --max-chars N``: each document cut by ``cap_text``, saying how much
    was left out and the ``qmdlab get`` that reads on; no cap without it."""
    from qmdlab.search.navigate import cap_text

    body = (tmp_path / "notes" / "long.md").read_text(encoding="utf-8").rstrip("\n")
    (hit,) = json.loads(run("search", "row", "-n", "1", "--json", "--full").output)
    assert hit["file"] == "qmd://kb/long.md" and hit["body"] == body  # --full: the body, uncapped
    (hit,) = json.loads(run("search", "row", "-n", "1", "--json", "--full", "--max-chars", "300").output)
    assert hit["body"] == cap_text(body, 300, read_on=("kb/long.md", 1)).text
    assert hit["body"].endswith("more characters; read on with `qmdlab get kb/long.md:6`]")
    assert json.loads(run("search", "row", "-n", "1", "--json", "--full", "--max-chars", "0").output)[0]["body"] == body
    # numbered lines (cli always, json with --line-numbers) leave the closing note unnumbered
    cli = run("search", "row", "-n", "1", "--full", "--max-chars", "300").output.rstrip("\n").splitlines()
    assert cli[-2].startswith("      5: row 2 ") and cli[-1].startswith("         … [")
    (hit,) = json.loads(
        run("search", "row", "-n", "1", "--json", "--full", "--max-chars", "300", "--line-numbers").output
    )
    assert hit["body"].split("\n")[-2].startswith("5: row 2 ") and hit["body"].split("\n")[-1].startswith("… [")
    res = run("search", "row", "--max-chars", "300", ok=False)
    assert res.exit_code == 1 and "add --full" in res.output
    res = run("search", "row", "--full", "--max-chars", "-1", ok=False)
    assert res.exit_code == 1

"""qmd parity of the index verbs: ``qmd://`` URIs, ``cleanup``, search result flags, multi-get formats."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import xml.etree.ElementTree as ET

import pytest

from qmdlab.errors import StoreError
from qmdlab.store import Index
from qmdlab.store.cleanup import cleanup
from qmdlab.store.refs import parse_ref, split_refs, strip_scheme


@pytest.fixture
def run(cli_run):
    return cli_run


# -- 1. qmd:// URIs ------------------------------------------------------------------------------


def test_refs_parse_uris():
    assert strip_scheme("qmd://kb/cooking/pasta.md") == "kb/cooking/pasta.md"
    assert strip_scheme("qmd://kb/my%20notes/a.md") == "kb/my notes/a.md"
    assert parse_ref("qmd://kb/git.md:7:2") == ("kb/git.md", None, 7, 2)
    assert parse_ref("qmd://kb/git.md#rebasing") == ("kb/git.md", "rebasing", None, None)
    assert split_refs("qmd://kb/a.md, kb/b.md") == ["kb/a.md", "kb/b.md"]
    assert strip_scheme("kb/qmd://x") == "kb/qmd://x"  # only a leading scheme is one


def test_uris_in_get_multi_get_and_context(run, notes):
    run("collection", "add", str(notes), "--name", "kb")
    assert run("get", "qmd://kb/git.md:7:2", "--no-header").output == "# Rebasing\n\n"
    assert run("get", "qmd://kb/git.md").output == run("get", "kb/git.md").output
    out = run("multi-get", "qmd://kb/cooking/*").output
    assert "File: cooking/pasta.md  #" in out and "File: cooking/soup.md  #" in out and "git" not in out
    out = run("multi-get", "qmd://kb/git.md,qmd://kb/cooking/pasta.md").output
    assert "File: qmd://kb/git.md  #" in out and "File: qmd://kb/cooking/pasta.md  #" in out
    run("context", "add", "qmd://kb/cooking", "Recipes")
    assert run("context", "list").output == "kb/cooking\tRecipes\n"  # stored as the plain target
    assert json.loads(run("search", "pasta", "--json").output)[0]["context"] == "Recipes"
    run("context", "rm", "qmd://kb/cooking/")
    assert run("context", "list").output.strip() == "No contexts."
    miss = run("get", "qmd://kb/gti.md", ok=False)
    assert miss.exit_code == 1 and "did you mean kb/git.md" in miss.output


def test_index_get_uri_and_root_context(tmp_path, notes):
    with Index.open(tmp_path / "i") as idx:
        idx.add_collection("kb", notes)
        idx.update()
        assert idx.get("qmd://kb/git.md").docno == "kb/git.md"
        with pytest.raises(StoreError):
            idx.get("qmd://other/git.md.missing")
        idx.add_context("qmd://", "Everything")
        assert [c.target for c in idx.contexts()] == ["/"]
        assert idx.contexts_for("kb/git.md") == ["Everything"]


# -- 3. cleanup ----------------------------------------------------------------------------------


def _counts(db) -> dict[str, int]:
    with sqlite3.connect(db) as c:
        return {
            t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("documents", "content", "chunks", "vectors")
        }


def test_cleanup_drops_inactive_and_orphans_then_reports(tmp_path, notes):
    import numpy as np

    with Index.open(tmp_path / "i") as idx:
        idx.add_collection("kb", notes)
        idx.update()
        ch = idx.chunks()
        idx.store_vectors(ch["chunk_id"].to_list(), np.ones((ch.height, 4), dtype=np.float32), "fp")
        # a big file, then delete it: its row goes inactive, content/chunks/vectors stay
        (notes / "big.md").write_text("# Big\n\n" + "filler words here\n" * 20000, encoding="utf-8")
        idx.update()
        big = idx.chunks(["kb/big.md"])
        idx.store_vectors(big["chunk_id"].to_list(), np.ones((big.height, 4), dtype=np.float32), "fp")
        (notes / "big.md").unlink()
        idx.update()
        before = _counts(idx.db_path)
        assert before["documents"] == 5 and before["vectors"] == ch.height + big.height
        rep = cleanup(idx)
        after = _counts(idx.db_path)
        assert rep.inactive_documents == 1 and rep.content == 1 and rep.chunks == big.height
        assert rep.vectors == big.height and rep.cache_entries == 0
        assert after == {"documents": 4, "content": 4, "chunks": ch.height, "vectors": ch.height}
        assert rep.bytes_after < rep.bytes_before and rep.freed == rep.bytes_before - rep.bytes_after
        assert idx.status()["inactive_documents"] == 0
        assert idx.get("kb/git.md").title == "Git rebase guide"  # active documents untouched
        again = cleanup(idx)
        assert again[:5] == (0, 0, 0, 0, 0)


def test_cleanup_cli_and_cache(run, notes):
    run("collection", "add", str(notes), "--name", "kb")
    (notes / "cooking" / "soup.md").unlink()
    run("update")
    with Index.open(run.index_dir) as idx:
        idx.cache.put("k1", "expand", ["x"])
        idx.cache.put("k2", "rerank", 0.5)
        n_cache = idx.cache.count()
    assert n_cache == 2
    out = run("cleanup", "--cache").output
    assert out.startswith(
        f"removed 1 inactive documents, 1 orphaned contents, 1 chunks, 0 vectors, {n_cache} cache entries; freed "
    )
    assert "documents: 3 active, 0 inactive" in run("status").output


# -- 3. search flags -----------------------------------------------------------------------------


def test_search_all_full_line_numbers_and_shorthands(run, notes):
    run("collection", "add", str(notes), "--name", "kb")
    assert len(json.loads(run("search", "the OR pasta OR rebase OR soup", "-n", "1", "--json").output)) == 1
    every = json.loads(run("search", "the OR pasta OR rebase OR soup", "-n", "1", "--all", "--json").output)
    assert len(every) >= 3
    assert run("search", "pasta", "--csv").output == run("search", "pasta", "--format", "csv").output
    for flag in ("--md", "--xml", "--files"):
        assert run("search", "pasta", flag).output == run("search", "pasta", "--format", flag[2:]).output
    full = json.loads(run("search", "rebase", "--json", "--full").output)[0]
    assert (
        "snippet" not in full
        and full["body"].startswith("---\ntitle: Git rebase guide")
        and full["body"].endswith("squash commits.")
    )
    numbered = json.loads(run("search", "rebase", "--json", "--line-numbers").output)[0]
    plain = json.loads(run("search", "rebase", "--json").output)[0]
    header, first_line = plain["snippet"].split("\n")[:2]  # qmd's @@ header, then the text
    first = int(header.split(",")[0].removeprefix("@@ -"))
    assert numbered["snippet"].split("\n")[:2] == [header, f"{first}: {first_line}"]
    bad = run("search", "pasta", "--json", "--csv", ok=False)
    assert bad.exit_code == 1 and "--json and --csv ask for different formats" in bad.output
    bad = run("search", "pasta", "--format", "md", "--json", ok=False)
    assert bad.exit_code == 1 and "--format md and --json" in bad.output


# -- 3. multi-get formats and per-file line limit -----------------------------------------------


def test_multi_get_every_format_and_line_limit(run, notes):
    """qmd's multi-get shapes (``src/cli/qmd.ts`` ``multiGet``): ``file`` is the qmd:// URI of a
    listed document and the path in its collection of one a glob found, the context is a field of
    its own, a cut body ends with qmd's truncation marker, a skipped document carries qmd's reason."""
    run("collection", "add", str(notes), "--name", "kb")
    run("context", "add", "qmd://kb/cooking", "Recipes")
    out = run("multi-get", "kb/git.md,kb/cooking/pasta.md", "-l", "2").output
    assert f"{'=' * 60}\nFile: qmd://kb/git.md  #" in out
    assert "---\ntitle: Git rebase guide\n\n[... truncated 8 more lines]" in out
    assert "Folder Context: Recipes\n---\n\n# Pasta" in out
    data = json.loads(run("multi-get", "kb/git.md", "-l", "2", "--json").output)
    assert list(data[0]) == ["file", "docid", "title", "body"] and data[0]["file"] == "qmd://kb/git.md"
    assert data[0]["body"] == "---\ntitle: Git rebase guide\n\n[... truncated 8 more lines]"
    data = json.loads(run("multi-get", "kb/cooking/*", "--json", "--max-bytes", "40").output)
    assert data[0]["context"] == "Recipes" and data[0]["skipped"] is True and "body" not in data[0]
    assert data[0]["reason"].startswith("File too large (0KB > 0KB). Use 'qmdlab get cooking/pasta.md'")
    text = run("multi-get", "kb/cooking/*", "--csv").output
    assert text.splitlines()[0] == "docid,file,title,context,skipped,body"
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["file"] for r in rows] == ["cooking/pasta.md", "cooking/soup.md"]
    assert rows[1]["body"] == "Tomato soup without a heading.\n" and rows[1]["context"] == "Recipes"
    assert rows[1]["skipped"] == "false"
    root = ET.fromstring(run("multi-get", "kb/cooking/*", "--xml", "--max-bytes", "40").output)
    docs = root.findall("document")
    assert [d.findtext("skipped") for d in docs] == ["true", None] and docs[0].find("body") is None
    assert docs[1].findtext("file") == "cooking/soup.md" and docs[1].findtext("context") == "Recipes"
    files = run("multi-get", "kb/cooking/*", "--files", "--max-bytes", "40").output.splitlines()
    assert files[0].endswith(',cooking/pasta.md,"Recipes",[SKIPPED]') and files[0].startswith("#")
    md = run("multi-get", "kb/git.md", "--md", "--line-numbers", "-l", "1").output
    assert md.startswith("## qmd://kb/git.md\n\n**docid:** `#") and "**Title:** Git rebase guide" in md
    assert "1: ---" in md and "[... truncated 9 more lines]" in md
    bad = run("multi-get", "kb/git.md", "-l", "0", ok=False)
    assert bad.exit_code == 1 and "--max-lines must be 1 or more" in bad.output

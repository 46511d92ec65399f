"""Navigation from a hit :
cross-references and jump_to_ref, chunk previews, hit context (breadcrumb, parent summary,
siblings), child → parent backfill — on a small crafted collection and on the default corpus."""

from __future__ import annotations

import pytest

from qmdlab.errors import QmdlabError
from qmdlab.search import chunk_views, crossrefs, hit_context, navigate
from qmdlab.store import Index

GUIDE = """---
title: Guide
---
# Guide

The guide to zebra tools.

## Install

Run the installer. See [linux steps](#linux), [[faq#Errors|the FAQ]] and [web](https://example.org).

### Linux

apt install zebra

### macOS

brew install zebra

## Use

Use it. More in ops/run.md and qmd://kb/ops/run.md#restart or [up](../escape.md).

```
[inside a fence](ops/run.md)
```
"""
RUN = "# Run\n\nStart it.\n\n## Restart\n\nsystemctl restart zebra\n\n## Stop\n\nsystemctl stop zebra\n"
FAQ = "# FAQ\n\n## Errors\n\nE1 means the disk is full.\n"


@pytest.fixture
def kb(tmp_path):
    root = tmp_path / "kb"
    for rel, body in {
        "guide.md": GUIDE,
        "ops/run.md": RUN,
        "faq.md": FAQ,
        "long.md": "# Long\n\n" + "\n".join(f"line {i} " + "x" * 60 for i in range(300)) + "\n",
    }.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body, encoding="utf-8")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("kb", root)
    idx.update()
    yield idx
    idx.close()


def test_section_refs_resolve_every_kind(kb):
    refs = crossrefs.section_refs(kb, "kb/guide.md#guide/install")
    assert [(r.n, r.kind, r.target, r.docno, r.address) for r in refs] == [
        (1, "link", "#linux", "kb/guide.md", "guide/install/linux"),
        (2, "wiki", "faq#Errors", "kb/faq.md", "faq/errors"),
        (3, "link", "https://example.org", None, None),
    ]
    assert refs[2].problem.startswith("external link (https:)")
    assert (
        refs[0].line
        == GUIDE.split("\n").index(
            "Run the installer. See [linux steps](#linux), [[faq#Errors|the FAQ]] and [web](https://example.org)."
        )
        + 1
    )
    use = crossrefs.section_refs(kb, "kb/guide.md", "guide/use")
    assert [(r.kind, r.docno, r.address) for r in use] == [
        ("path", "kb/ops/run.md", ""),
        ("uri", "kb/ops/run.md", "run/restart"),
        ("link", None, None),
    ]
    assert "outside collection 'kb'" in use[2].problem  # ../escape.md
    # the fenced link is not a reference; the whole document lists the union
    assert len(crossrefs.section_refs(kb, "kb/guide.md")) == 6


def test_jump_to_ref_by_number_text_and_target(kb):
    j = crossrefs.jump_to_ref(kb, "kb/guide.md#guide/install", 2)
    assert (j.docno, j.address, j.heading_path, j.text) == (
        "kb/faq.md",
        "faq/errors",
        ("FAQ", "Errors"),
        "## Errors\n\nE1 means the disk is full.",
    )
    assert (
        crossrefs.jump_to_ref(kb, "kb/guide.md#guide/install", "linux steps").text == "### Linux\n\napt install zebra"
    )
    j = crossrefs.jump_to_ref(kb, "qmd://kb/guide.md", "qmd://kb/ops/run.md#restart", address="guide/use")
    assert (j.docno, j.address, j.line_start, j.line_end) == ("kb/ops/run.md", "run/restart", 5, 8)
    whole = crossrefs.jump_to_ref(kb, "kb/guide.md#guide/use", 1)
    assert (whole.address, whole.text) == ("", RUN.rstrip("\n"))


def test_jump_to_ref_errors_name_the_fix(kb):
    with pytest.raises(QmdlabError, match=r"reference 9 does not exist: kb/guide.md#guide/install has 3 \(1: #linux"):
        crossrefs.jump_to_ref(kb, "kb/guide.md#guide/install", 9)
    with pytest.raises(QmdlabError, match="cannot be followed: external link"):
        crossrefs.jump_to_ref(kb, "kb/guide.md#guide/install", 3)
    with pytest.raises(QmdlabError, match="has no cross-references"):
        crossrefs.jump_to_ref(kb, "kb/faq.md", 1)
    with pytest.raises(QmdlabError, match="no reference 'nothing'"):
        crossrefs.jump_to_ref(kb, "kb/guide.md#guide/use", "nothing")


def test_hit_context_breadcrumb_parent_summary_siblings(kb):
    line = GUIDE.split("\n").index("brew install zebra") + 1
    c = hit_context.hit_context(kb, "kb/guide.md", line)
    assert c.breadcrumb() == "Guide > Install > macOS"
    assert (c.address, c.parent_address, c.parent_title) == ("guide/install/macos", "guide/install", "Install")
    assert c.parent_summary.startswith("Run the installer. See [linux steps](#linux)")
    assert c.siblings == (("guide/install/linux", "Linux"),)
    top = hit_context.hit_context(kb, "kb/guide.md", 6)  # "The guide to zebra tools." under the h1
    assert (top.heading_path, top.parent_address, top.parent_summary) == (("Guide",), "", "")
    assert hit_context.hit_context(kb, "kb/guide.md", 6, max_siblings=0).siblings == ()


def test_read_chunks_previews_and_full_text_are_capped(kb):
    chunks = chunk_views.read_chunks(kb, "kb/long.md", preview_chars=50)
    assert len(chunks) > 1 and [c.seq for c in chunks] == list(range(len(chunks)))
    assert all(len(c.text) <= 50 and c.truncated and "\n" not in c.text for c in chunks)
    assert chunks[0].heading_path == ("Long",) and chunks[0].line_start == 1
    one = chunk_views.read_chunks(kb, "kb/long.md", [chunks[1].chunk_id], full=True, max_chars=500)
    assert [c.chunk_id for c in one] == [chunks[1].chunk_id]
    assert one[0].truncated and len(one[0].text.split("\n… [")[0]) <= 500
    shown, note = one[0].text.rsplit("\n", 1)
    # the chunk opens inside line_start; the note resumes at the first line not shown in full
    resume = chunks[1].line_start + shown.count("\n") + 1
    assert note.endswith(f"read on with `qmdlab get kb/long.md:{resume}`]")
    lines = (kb.get("kb/long.md").body).split("\n")
    assert shown.split("\n")[-1] == lines[resume - 2]  # the last line shown is whole
    with pytest.raises(QmdlabError, match=r"are not chunks of kb/long.md"):
        chunk_views.read_chunks(kb, "kb/long.md", [10**9])


def test_backfill_returns_the_parent_with_the_chunk_marked(kb):
    chunks = chunk_views.read_chunks(kb, "kb/long.md")
    last = chunks[-1]
    b = chunk_views.backfill(kb, "kb/long.md", last.chunk_id, max_chars=2000)
    assert b.highlight == (last.line_start, last.line_end) and b.truncated
    # the chunk lies past the cap from the section's start, so the window opens just above it
    assert b.line_start == last.line_start - 2
    marked = b.marked().split("\n")
    assert marked[2].split()[0] == f"{last.line_start}*" and marked[0].split()[0] == str(b.line_start)
    small = chunk_views.read_chunks(kb, "kb/ops/run.md")
    assert len(small) == 1
    doc = chunk_views.backfill(kb, "kb/ops/run.md", small[0].chunk_id, level="document")
    assert (doc.address, doc.text, doc.truncated) == ("", RUN.rstrip("\n"), False)
    with pytest.raises(QmdlabError, match="level 'page'"):
        chunk_views.backfill(kb, "kb/ops/run.md", small[0].chunk_id, level="page")


def test_cap_text_cuts_and_says_how_much_is_left():
    text = "a" * 100
    capped = navigate.cap_text(text, 30)
    assert capped == navigate.Capped("a" * 30 + "\n… [70 more characters]", True, 100)
    assert navigate.cap_text(text, 0).text == text


def test_default_corpus_references_lead_to_their_notes(default_corpus, tmp_path):
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("default", default_corpus)
    idx.update()
    try:
        refs = crossrefs.section_refs(idx, "default/runbooks/cert-renewal.md")
        assert [(r.target, r.docno) for r in refs] == [
            ("howto/nginx-reverse-proxy-tls.md", "default/howto/nginx-reverse-proxy-tls.md")
        ]
        j = crossrefs.jump_to_ref(idx, "default/runbooks/cert-renewal.md", 1)
        # a path without an anchor leads to the whole note, as `qmdlab get` prints it (front matter too)
        assert (j.address, j.line_start) == ("", 1) and j.text.startswith("---\ntitle: nginx reverse proxy")
        # every '.md' path the corpus mentions resolves to an indexed note
        unresolved = []
        for docno in idx.documents()["docno"].to_list():
            unresolved += [(docno, r.target, r.problem) for r in crossrefs.section_refs(idx, docno) if r.docno is None]
        assert unresolved == []
        # breadcrumbs on a long note: each chunk's breadcrumb is its section's heading path
        for c in chunk_views.read_chunks(idx, "default/projects/heron-kubernetes-migration.md"):
            ctx = hit_context.hit_context(idx, c.docno, c.line_start)
            assert ctx.heading_path == c.heading_path and ctx.heading_path[0] == "Heron: moving Tidepool to Kubernetes"
    finally:
        idx.close()

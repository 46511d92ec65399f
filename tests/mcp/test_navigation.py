"""The markdown heading parser and section tree (exact values)."""

from __future__ import annotations

import pytest

from qmdlab.errors import QmdlabError
from qmdlab.store.outline import DocumentOutline, breadcrumb, parse_headings, slugify


def test_headings_skip_front_matter_and_fences_and_read_setext():
    text = "---\ntitle: '# no'\n---\nTitle\n=====\n\n~~~md\n# fenced\n~~~\n## Two ##\n    # indented code\nSub\n---\n"
    assert parse_headings(text) == [(4, 1, "Title"), (10, 2, "Two"), (12, 2, "Sub")]


def test_duplicate_slugs_and_skipped_levels():
    text = "# A\n### Deep\n# A\n## Notes\n## Notes\n"
    out = DocumentOutline.parse(text)
    assert [(s.address, s.parent, s.line_start, s.line_end) for s in out.sections] == [
        ("", None, 1, 5),
        ("a", "", 1, 2),
        ("a/deep", "a", 2, 2),
        ("a-2", "", 3, 5),
        ("a-2/notes", "a-2", 4, 4),
        ("a-2/notes-2", "a-2", 5, 5),
    ]
    assert out.section("A-2/Notes-2").address == "a-2/notes-2"  # headings typed as shown are slugged
    assert out.parent("a/deep").address == "a"


def test_section_text_lookup_and_errors():
    out = DocumentOutline.parse("pre\n# H1\nbody\n## H2\nmore\n")
    assert out.section_text("") == "pre\n# H1\nbody\n## H2\nmore"
    assert out.section_text("h1/h2") == "## H2\nmore"
    assert out.section_at_line(1).address == "" and out.section_at_line(3).address == "h1"
    out.attach_chunks([(7, 1), (8, 4)])
    assert out.section("").chunk_ids == [7] and out.section("h1/h2").chunk_ids == [8]
    with pytest.raises(QmdlabError, match="no section 'zz'.*'h1', 'h1/h2'"):
        out.section("zz")
    assert out.parent("") is None


def test_slug_and_breadcrumb():
    assert slugify("  Héllo, Wörld -- 2  ") == "héllo-wörld-2"
    assert breadcrumb("A > B > C") == ["A", "B", "C"] and breadcrumb("") == [] and breadcrumb('["x"]') == ["x"]


@pytest.mark.slow  # needs the indexed test corpus (session fixture, a few seconds)
def test_outline_agrees_with_the_chunkers_heading_paths(mcp_env):
    """For every stored chunk of the default corpus and the notes, the section containing the chunk's
    first non-blank line has the heading path the chunker stored: breadcrumbs and addresses agree."""
    from qmdlab.store import Index

    idx = Index.open(str(mcp_env.index_dir))
    try:
        outlines: dict[str, DocumentOutline] = {}
        chunks = idx.chunks()
        assert chunks.height >= 5
        for row in chunks.iter_rows(named=True):
            doc = row["docno"]
            if doc not in outlines:
                outlines[doc] = DocumentOutline.parse(idx.get(doc).body)
            text = row["text"]
            lead = len(text) - len(text.lstrip())
            line = row["line_start"] + text[:lead].count("\n")
            assert list(outlines[doc].section_at_line(line).heading_path) == breadcrumb(row["heading_path"]), (
                doc,
                line,
            )
    finally:
        idx.close()

"""Front matter parsing and titles."""

from __future__ import annotations

from qmdlab.store.frontmatter import extract_title, parse_front_matter


def test_scalars_lists_dates_kept_nested_dropped():
    text = (
        "---\ntitle: T\ntags: Python, git\ndate: 2023-12-31 10:00:00\ndraft: true\nscore: 1.5\n"
        "aliases: [x, y]\nnested: {a: 1}\n---\nbody\n"
    )
    fm = parse_front_matter(text)
    assert fm.metadata == {
        "title": "T",
        "tags": ["python", "git"],
        "date": "2023-12-31",
        "draft": True,
        "score": 1.5,
        "aliases": ["x", "y"],
    }
    assert text[fm.body_offset :] == "body\n"


def test_malformed_or_unclosed_front_matter_is_text():
    assert parse_front_matter("---\ntitle: [unclosed\n---\nx").metadata == {}
    assert parse_front_matter("---\ntitle: x\nno closing line").body_offset == 0
    assert parse_front_matter("---\n- a list\n---\n").metadata == {}


def test_title_order():
    assert extract_title("text\n### h3 ignored\n## Two\n# One", {}, "dir/file.name.md") == "Two"
    assert extract_title("no headings", {}, "dir/file.name.md") == "file.name"
    assert extract_title("#nospace is not a heading", {}, "f.md") == "f"

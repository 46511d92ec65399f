"""Result formatters and snippets."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET

import pytest

from qmdlab.errors import QmdlabError
from qmdlab.output import FORMATS, ResultRow, build_rows, format_results, query_terms, snippet
from qmdlab.search import bm25_search

ROWS = [
    ResultRow("kb/a.md", "abc123", 0.75, 4, "A & B", "Ctx <1>", 'line one\nline, "two"', best_line=5, total_lines=9),
    ResultRow("kb/b.md", "def456", 0.5, 1, "B", None, "x", total_lines=1),
]
HEADER_A = "@@ -4,2 @@ (3 before, 4 after)"


def test_json_fields():
    """qmd's keys (file a qmd:// URI, line the best line, the @@ header), then qmdlab's docno."""
    data = json.loads(format_results(ROWS, "json"))
    assert data[0] == {
        "docid": "#abc123",
        "score": 0.75,
        "file": "qmd://kb/a.md",
        "line": 5,
        "title": "A & B",
        "context": "Ctx <1>",
        "snippet": HEADER_A + '\nline one\nline, "two"',
        "docno": "kb/a.md",
    }
    assert "context" not in data[1]  # qmd leaves an empty context out
    assert json.loads(format_results([], "json")) == []
    full = json.loads(format_results(ROWS, "json", full=True))[0]
    assert "snippet" not in full and full["body"] == 'line one\nline, "two"'


def test_csv_round_trips():
    rows = list(csv.reader(io.StringIO(format_results(ROWS, "csv"))))
    assert rows[0] == ["docid", "score", "file", "title", "context", "line", "snippet"]
    assert rows[1] == [
        "#abc123",
        "0.7500",
        "qmd://kb/a.md",
        "A & B",
        "Ctx <1>",
        "5",
        HEADER_A + '\nline one\nline, "two"',
    ]


def test_xml_is_qmds_file_elements_escaped():
    root = ET.fromstring("<r>" + format_results(ROWS, "xml") + "</r>")
    first, second = root.findall("file")
    assert first.get("docid") == "#abc123" and first.get("name") == "qmd://kb/a.md" and first.get("line") == "5"
    assert first.get("title") == "A & B" and first.get("context") == "Ctx <1>"
    assert first.text.strip().startswith(HEADER_A) and second.get("context") is None
    assert format_results([], "xml") == "<results></results>"


def test_snippets_are_capped_as_qmd_caps_them():
    long = ResultRow("kb/c.md", "c", 1.0, 1, "C", None, "word " * 200, best_line=1, total_lines=1)
    js = json.loads(format_results([long], "json"))[0]["snippet"].split("\n", 1)[1]
    assert len(js) == 300 and js.endswith("...")
    csv_snip = list(csv.reader(io.StringIO(format_results([long], "csv"))))[1][6].split("\n", 1)[1]
    assert len(csv_snip) == 500 and csv_snip.endswith("...")
    assert json.loads(format_results([long], "json", full=True))[0]["body"] == long.snippet  # --full: no cap


def test_line_numbers_follow_the_document():
    data = json.loads(format_results(ROWS, "json", line_numbers=True))
    assert data[0]["snippet"] == HEADER_A + '\n4: line one\n5: line, "two"'


def test_cli_md_files():
    cli = format_results(ROWS, "cli")
    assert cli.splitlines()[:5] == [
        "kb/a.md:5  #abc123  score 0.7500",
        "  A & B",
        "  context: Ctx <1>",
        "      4: line one",
        '      5: line, "two"',
    ]
    assert format_results([], "cli") == "No results."
    assert format_results(ROWS, "files").splitlines() == [
        "#abc123,0.7500,qmd://kb/a.md,Ctx <1>",
        "#def456,0.5000,qmd://kb/b.md",
    ]
    assert format_results(ROWS, "md").startswith(
        "---\n# A & B\n**file:** `qmd://kb/a.md`\n**docid:** `#abc123`\n**context:** Ctx <1>\n\n" + HEADER_A
    )
    assert format_results([], "md") == "" and format_results([], "files") == ""
    assert set(FORMATS) == {"cli", "json", "csv", "md", "xml", "files"}
    with pytest.raises(QmdlabError, match="--format 'html'"):
        format_results(ROWS, "html")


def test_snippet_picks_best_line_with_line_numbers():
    body = "# T\nintro\nrebase here\ngit rebase here\nend\n"
    s = snippet(body, "git rebase", context=1)
    assert (s.line, s.best_line, s.text) == (3, 4, "rebase here\ngit rebase here\nend")
    s0 = snippet(body, "git rebase", context=0)
    assert (s0.line, s0.text) == (4, "git rebase here")
    sl = snippet(body, "git rebase", context=0, lines=(1, 3))
    assert (sl.line, sl.text) == (3, "rebase here")
    assert query_terms("Rebasing the branch") == ["rebasing", "branch"]
    assert snippet("x\nrebased\n", "rebasing", context=0).text == "rebased"  # crude stem: 'rebas'


def test_build_rows_from_hits(corpus_index):
    corpus_index.add_context("kb", "Team KB")
    hits = bm25_search(corpus_index, "pasta salt")
    rows = build_rows(corpus_index, hits, "pasta salt", context=0)
    assert rows[0].docno == "kb/pasta.md" and rows[0].title == "Pasta" and rows[0].context == "Team KB"
    assert (rows[0].line, rows[0].snippet) == (7, "Boil water. The pasta needs salt.")
    assert rows[0].docid == corpus_index.get("kb/pasta.md").docid
    # the front matter (tags: [git, ...]) is never the snippet of a whole-document hit
    git = build_rows(corpus_index, bm25_search(corpus_index, "git"), "git", context=0)
    # git-rebase.md: "# Git rebase" (line 5); git-merge.md has no "git" below its front matter: first body line
    assert {r.docno: r.line for r in git} == {"kb/git-rebase.md": 5, "kb/git-merge.md": 5}

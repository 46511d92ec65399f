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
    ResultRow("kb/a.md", "abc123", 0.75, 4, "A & B", "Ctx <1>", 'line one\nline, "two"'),
    ResultRow("kb/b.md", "def456", 0.5, 1, "B", None, "x"),
]


def test_json_fields():
    data = json.loads(format_results(ROWS, "json"))
    assert data[0] == {
        "docid": "#abc123",
        "score": 0.75,
        "file": "kb/a.md",
        "line": 4,
        "title": "A & B",
        "context": "Ctx <1>",
        "snippet": 'line one\nline, "two"',
    }
    assert data[1]["context"] is None
    assert json.loads(format_results([], "json")) == []


def test_csv_round_trips():
    rows = list(csv.reader(io.StringIO(format_results(ROWS, "csv"))))
    assert rows[0] == ["docid", "score", "file", "line", "title", "context", "snippet"]
    assert rows[1] == ["#abc123", "0.7500", "kb/a.md", "4", "A & B", "Ctx <1>", 'line one\nline, "two"']


def test_xml_is_well_formed_and_escaped():
    root = ET.fromstring(format_results(ROWS, "xml"))
    first = root.findall("result")[0]
    assert first.get("docid") == "#abc123" and first.get("line") == "4"
    assert first.findtext("title") == "A & B" and first.findtext("context") == "Ctx <1>"
    assert root.findall("result")[1].find("context") is None


def test_cli_md_files():
    cli = format_results(ROWS, "cli")
    assert cli.splitlines()[:5] == [
        "kb/a.md:4  #abc123  score 0.7500",
        "  A & B",
        "  context: Ctx <1>",
        "      4: line one",
        '      5: line, "two"',
    ]
    assert format_results([], "cli") == "No results."
    assert format_results(ROWS, "files").splitlines() == ["#abc123,0.7500,kb/a.md,Ctx <1>", "#def456,0.5000,kb/b.md,"]
    assert format_results(ROWS, "md").startswith("## 1. A & B\n\n`kb/a.md:4` · #abc123 · score 0.7500\n\n> Ctx <1>")
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

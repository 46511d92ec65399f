"""Odd file names in output: --files is CSV (a comma cannot split a name), format characters
cannot make a name display as another, and a path past PATH_MAX is reported, not lost."""

from __future__ import annotations

import csv
import json
import os

from qmdlab.output import format_results
from qmdlab.pipeline.results import ResultRow
from qmdlab.store import Index
from qmdlab.store.scan import display_path

SPOOF = "notes/invoice\u202efdp.md"  # shows as "invoicedm.pdf" once the override applies


def _row(docno: str) -> ResultRow:
    return ResultRow(docno, "abc123", 0.5, 3, "T\u202eitle", None, "x")


def test_files_output_is_csv_so_commas_and_quotes_survive():
    names = ["n/a, b.md", 'n/say "hi".md', "n/plain.md"]
    text = format_results([_row(n) for n in names], "files")
    assert [r[2] for r in csv.reader(text.splitlines())] == ["qmd://" + n for n in names]
    assert text.splitlines()[2] == "#abc123,0.5000,qmd://n/plain.md"  # plain names print as qmd prints them


def test_format_characters_are_escaped_for_people_and_kept_for_machines():
    cli = format_results([_row(SPOOF)], "cli")
    md = format_results([_row(SPOOF)], "md")
    for text in (cli, md):
        assert "\u202e" not in text and "invoice\\u202efdp.md" in text and "T\\u202eitle" in text
    assert json.loads(format_results([_row(SPOOF)], "json"))[0]["file"] == "qmd://" + SPOOF
    assert display_path("invoice\u202efdp.md") == "invoice\\u202efdp.md"


def test_a_path_longer_than_path_max_is_reported_as_skipped(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha\n")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:  # 20 folders of 250 characters: 5,000 characters, past Linux's PATH_MAX of 4,096
        for _ in range(20):
            os.mkdir("d" * 250, dir_fd=fd)
            nxt = os.open("d" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        f = os.open("deep.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(f, b"# Deep\n\nbeta\n")
        os.close(f)
    finally:
        os.close(fd)
    with Index.open(str(tmp_path / "idx")) as idx:
        idx.add_collection("notes", root)
        rep = idx.update()
    assert rep.new == 1 and rep.skipped >= 1 and rep.skip_counts().get("unreadable", 0) >= 1, rep
    assert any(reason == "unreadable" and docno.startswith("notes/ddd") for docno, reason in rep.skipped_paths)


def test_ls_escapes_format_characters(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from qmdlab.cli import cli

    monkeypatch.setenv("QMDLAB_HOME", str(tmp_path / "home"))
    root = tmp_path / "notes"
    root.mkdir()
    (root / "invoice\u202efdp.md").write_text("# Bill\n\ntotal\n")
    with Index.open(str(tmp_path / "idx")) as idx:
        idx.add_collection("notes", root)
        idx.update()
    res = CliRunner().invoke(cli, ["--index", str(tmp_path / "idx"), "ls", "--all"])
    assert res.exit_code == 0 and "\u202e" not in res.stdout and "notes/invoice\\u202efdp.md" in res.stdout


HIDDEN = {"\u202e": "\\u202e", "\u2066": "\\u2066", "\u2028": "\\u2028", "\u2029": "\\u2029", "\x1b": "\\x1b"}


def _hidden_row() -> ResultRow:
    return ResultRow(
        "notes/a\u202ebc\u2028d.md", "abc123", 0.5, 3, "T\u2066i\u2029tle\x1b[2J", "ctx\u2028x", "snip\u2028pet\n\tnext"
    )


def test_every_format_escapes_bidi_controls_and_line_separators():
    """U+202E (and the other bidi controls) printed raw by --files/--csv, U+2028/U+2029 raw everywhere:
    each format now writes them escaped — Python escapes in cli, md, csv and files; JSON's own
    \\uXXXX escapes and XML character references, so those two still carry the exact value."""
    row = _hidden_row()
    for fmt in ("cli", "md", "csv", "files", "json", "xml"):
        text = format_results([row], fmt)
        assert not any(ch in text for ch in HIDDEN), (fmt, text)
    for fmt in ("cli", "md", "csv", "files"):
        assert "notes/a\\u202ebc\\u2028d.md" in format_results([row], fmt), fmt
    csv_row = next(csv.reader(format_results([row], "csv").splitlines()[1:]))
    assert csv_row[3] == "T\\u2066i\\u2029tle\\x1b[2J" and csv_row[4] == "ctx\\u2028x"
    assert "\n\tnext" in format_results([row], "csv")  # a snippet keeps its newlines and tabs
    data = json.loads(format_results([row], "json"))[0]
    assert (data["file"], data["title"], data["snippet"]) == ("qmd://" + row.docno, row.title, row.snippet)
    assert "\\u202e" in format_results([row], "json") and "\\u2028" in format_results([row], "json")
    xml = format_results([row], "xml")
    assert "&#x202e;" in xml and "&#x2028;" in xml and "\\x1b" in xml


def test_search_files_and_csv_escape_a_bidi_override_in_a_name(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from qmdlab.cli import cli

    monkeypatch.setenv("QMDLAB_HOME", str(tmp_path / "home"))
    root = tmp_path / "notes"
    root.mkdir()
    (root / "invoice\u202efdp.md").write_text("# Bill\u2028due\n\ntotal\n")
    (root / "sep\u2028arated.md").write_text("# Sep\n\ntotal\n")
    idx = str(tmp_path / "idx")
    with Index.open(idx) as ix:
        ix.add_collection("notes", root)
        ix.update()
    runner = CliRunner()
    for args in (
        ("search", "total", "--files"),
        ("search", "total", "--csv"),
        ("search", "total", "--md"),
        ("search", "total"),
        ("search", "total", "--json"),
        ("search", "total", "--xml"),
        ("multi-get", "notes/*.md", "--files"),
        ("multi-get", "notes/*.md", "--json"),
        ("ls", "--all"),
    ):
        res = runner.invoke(cli, ["--index", idx, *args])
        assert res.exit_code == 0, (args, res.output)
        assert "\u202e" not in res.stdout and "\u2028" not in res.stdout, (args, res.stdout)
        assert "invoice\\u202efdp.md" in res.stdout or "invoice&#x202e;fdp.md" in res.stdout, (args, res.stdout)
